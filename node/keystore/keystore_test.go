package keystore

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// cheapKDF keeps tests fast; Create's real parameters are checked in
// TestCreateWritesDefaultParams.
var cheapKDF = kdfParams{Time: 1, MemoryKiB: 64, Threads: 1}

var testPass = []byte("correct horse battery staple")

func newKeyFile(t testing.TB, pass []byte) (string, crypto.PrivKey) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "identity.key")
	priv, err := create(path, pass, cheapKDF)
	if err != nil {
		t.Fatalf("create(%q) = _, %v, want nil error", path, err)
	}
	return path, priv
}

func peerID(t testing.TB, k crypto.PrivKey) peer.ID {
	t.Helper()
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		t.Fatalf("peer.IDFromPrivateKey: %v", err)
	}
	return id
}

func readDoc(t *testing.T, path string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("key file is not JSON: %v\n%s", err, data)
	}
	return m
}

func writeDoc(t *testing.T, path string, m map[string]any) {
	t.Helper()
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	writeRaw(t, path, data)
}

func writeRaw(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
}

func flipB64(t *testing.T, s string) string {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x01
	return base64.StdEncoding.EncodeToString(b)
}

func TestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name       string
		createPass []byte
		loadPass   []byte
	}{
		{"plain", nil, nil},
		{"plain, empty passphrase", []byte{}, nil},
		{"plain, passphrase ignored on load", nil, testPass},
		{"encrypted", testPass, testPass},
		{"encrypted, one-byte passphrase", []byte("x"), []byte("x")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, priv := newKeyFile(t, tc.createPass)
			got, err := Load(path, tc.loadPass)
			if err != nil {
				t.Fatalf("Load(%q) = _, %v, want nil error", path, err)
			}
			if !got.Equals(priv) {
				t.Errorf("Load(%q) returned a different key than create", path)
			}
			if g, w := peerID(t, got), peerID(t, priv); g != w {
				t.Errorf("peer ID after Load = %s, want %s", g, w)
			}
			sig, err := got.Sign([]byte("bid"))
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := priv.GetPublic().Verify([]byte("bid"), sig); !ok || err != nil {
				t.Errorf("Verify(sig by loaded key) = %v, %v, want true, nil", ok, err)
			}
			m := readDoc(t, path)
			encrypted := len(tc.createPass) > 0
			if g, w := m["kdf"] != nil, encrypted; g != w {
				t.Errorf("file has kdf = %v, want present = %v", m["kdf"], w)
			}
			wantCipher := map[bool]string{false: "none", true: "xchacha20poly1305"}[encrypted]
			if g := m["cipher"]; g != wantCipher {
				t.Errorf("file cipher = %v, want %q", g, wantCipher)
			}
			if g := m["version"]; g != float64(1) {
				t.Errorf("file version = %v, want 1", g)
			}
			if g := m["type"]; g != "ed25519" {
				t.Errorf("file type = %v, want ed25519", g)
			}
		})
	}
}

func TestPlainFileHoldsMarshalledKey(t *testing.T) {
	path, priv := newKeyFile(t, nil)
	m := readDoc(t, path)
	raw, err := crypto.MarshalPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	if g, w := m["key"], base64.StdEncoding.EncodeToString(raw); g != w {
		t.Errorf("plain file key = %v, want %v", g, w)
	}
	if _, ok := m["kdf"]; !ok {
		t.Errorf("plain file has no \"kdf\" member; want explicit null")
	}
}

func TestEncryptedFileHidesKey(t *testing.T) {
	path, priv := newKeyFile(t, testPass)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := priv.Raw()
	for _, secret := range [][]byte{raw[:32], []byte(base64.StdEncoding.EncodeToString(raw[:24]))} {
		if bytes.Contains(data, secret) {
			t.Fatalf("encrypted key file contains the private key")
		}
	}
	// Two files of the same key under the same passphrase differ (random
	// salt and nonce).
	d1, _ := encode(priv, testPass, cheapKDF)
	d2, _ := encode(priv, testPass, cheapKDF)
	if bytes.Equal(d1, d2) {
		t.Errorf("encode twice gave identical output; want fresh salt/nonce")
	}
}

func TestCreateWritesDefaultParams(t *testing.T) {
	if defaultKDF != (kdfParams{Time: 3, MemoryKiB: 64 * 1024, Threads: 4}) {
		t.Errorf("defaultKDF = %+v, want {3 65536 4} (RFC 9106 second recommendation)", defaultKDF)
	}
	path := filepath.Join(t.TempDir(), "identity.key")
	priv, err := Create(path, testPass)
	if err != nil {
		t.Fatalf("Create = _, %v", err)
	}
	kdf, _ := readDoc(t, path)["kdf"].(map[string]any)
	for _, tc := range []struct {
		field string
		want  any
	}{
		{"name", "argon2id"},
		{"time", float64(3)},
		{"memory_kib", float64(64 * 1024)},
		{"threads", float64(4)},
	} {
		if g := kdf[tc.field]; g != tc.want {
			t.Errorf("kdf.%s = %v, want %v", tc.field, g, tc.want)
		}
	}
	salt, err := base64.StdEncoding.DecodeString(fmt.Sprint(kdf["salt"]))
	if err != nil || len(salt) != 16 {
		t.Errorf("kdf.salt = %v (%d bytes, err %v), want 16 bytes", kdf["salt"], len(salt), err)
	}
	if testing.Short() {
		return
	}
	got, err := Load(path, testPass)
	if err != nil {
		t.Fatalf("Load = _, %v", err)
	}
	if g, w := peerID(t, got), peerID(t, priv); g != w {
		t.Errorf("peer ID after Load = %s, want %s", g, w)
	}
}

func TestCreateFileMode(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix permission bits")
	}
	for _, pass := range [][]byte{nil, testPass} {
		dir := t.TempDir()
		path := filepath.Join(dir, "identity.key")
		if _, err := create(path, pass, cheapKDF); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if g, w := fi.Mode(), fs.FileMode(0o600); g != w {
			t.Errorf("mode of created file = %v, want %v", g, w)
		}
		entries, _ := os.ReadDir(dir)
		if len(entries) != 1 {
			t.Errorf("dir has %d entries after Create, want 1 (no temp files left)", len(entries))
		}
	}
}

func TestCreateTwice(t *testing.T) {
	path, first := newKeyFile(t, nil)
	before, _ := os.ReadFile(path)
	for _, pass := range [][]byte{nil, testPass} {
		if _, err := Create(path, pass); !errors.Is(err, ErrExists) {
			t.Errorf("Create(existing, %q) = _, %v, want ErrExists", pass, err)
		}
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) {
		t.Errorf("Create over an existing file changed it")
	}
	got, err := Load(path, nil)
	if err != nil || !got.Equals(first) {
		t.Errorf("Load after refused Create = _, %v; want the original key", err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("dir has %d entries, want 1 (no temp files left)", len(entries))
	}
}

func TestCreateRaceNoClobber(t *testing.T) {
	// The existence check in create happens before the key is written; the
	// final move must still refuse to replace a file that appeared meanwhile.
	dir := t.TempDir()
	path := filepath.Join(dir, "identity.key")
	writeRaw(t, path, []byte("someone else's key"))
	if err := writeFile(path, []byte("new"), false); !errors.Is(err, ErrExists) {
		t.Errorf("writeFile(existing, replace=false) = %v, want ErrExists", err)
	}
	if got, _ := os.ReadFile(path); string(got) != "someone else's key" {
		t.Errorf("existing file content = %q, want unchanged", got)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("dir has %d entries, want 1 (no temp files left)", len(entries))
	}
}

func TestCreateMissingDir(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no", "such", "dir", "identity.key")
	if _, err := Create(path, nil); err == nil {
		t.Errorf("Create(%q) = nil error, want error", path)
	}
}

func TestLoadMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.key")
	if _, err := Load(path, nil); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load(missing) = _, %v, want fs.ErrNotExist", err)
	}
}

func TestLoadErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pass   []byte // for Load
		tamper func(t *testing.T, m map[string]any)
		want   error
	}{
		{"wrong passphrase", []byte("hunter2"), nil, ErrWrongPassphrase},
		{"passphrase with extra byte", append(append([]byte{}, testPass...), '\n'), nil, ErrWrongPassphrase},
		{"missing passphrase (nil)", nil, nil, ErrNeedPassphrase},
		{"missing passphrase (empty)", []byte{}, nil, ErrNeedPassphrase},
		{"tampered ciphertext", testPass, func(t *testing.T, m map[string]any) {
			m["key"] = flipB64(t, m["key"].(string))
		}, ErrWrongPassphrase},
		{"tampered nonce", testPass, func(t *testing.T, m map[string]any) {
			m["nonce"] = flipB64(t, m["nonce"].(string))
		}, ErrWrongPassphrase},
		{"tampered salt", testPass, func(t *testing.T, m map[string]any) {
			k := m["kdf"].(map[string]any)
			k["salt"] = flipB64(t, k["salt"].(string))
		}, ErrWrongPassphrase},
		{"tampered kdf time", testPass, func(t *testing.T, m map[string]any) {
			m["kdf"].(map[string]any)["time"] = 2
		}, ErrWrongPassphrase},
		{"tampered kdf memory", testPass, func(t *testing.T, m map[string]any) {
			m["kdf"].(map[string]any)["memory_kib"] = 128
		}, ErrWrongPassphrase},
		{"tampered kdf threads", testPass, func(t *testing.T, m map[string]any) {
			m["kdf"].(map[string]any)["threads"] = 2
		}, ErrWrongPassphrase},
		{"truncated ciphertext", testPass, func(t *testing.T, m map[string]any) {
			b, _ := base64.StdEncoding.DecodeString(m["key"].(string))
			m["key"] = base64.StdEncoding.EncodeToString(b[:len(b)-1])
		}, ErrWrongPassphrase},
		{"unsupported cipher", testPass, func(t *testing.T, m map[string]any) {
			m["cipher"] = "aes-256-gcm"
		}, ErrBadFile},
		{"unsupported kdf", testPass, func(t *testing.T, m map[string]any) {
			m["kdf"].(map[string]any)["name"] = "scrypt"
		}, ErrBadFile},
		{"downgrade to plain", testPass, func(t *testing.T, m map[string]any) {
			m["kdf"] = nil
		}, ErrBadFile},
		{"unsupported key type", testPass, func(t *testing.T, m map[string]any) {
			m["type"] = "secp256k1"
		}, ErrBadFile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, _ := newKeyFile(t, testPass)
			if tc.tamper != nil {
				m := readDoc(t, path)
				tc.tamper(t, m)
				writeDoc(t, path, m)
			}
			_, err := Load(path, tc.pass)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Load(%s) = _, %v, want %v", tc.name, err, tc.want)
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("Load error %q does not name the file %q", err, path)
			}
		})
	}
}

func TestWrongPassphraseMessage(t *testing.T) {
	msg := ErrWrongPassphrase.Error()
	for _, want := range []string{"wrong passphrase", "tampered"} {
		if !strings.Contains(msg, want) {
			t.Errorf("ErrWrongPassphrase = %q, want it to mention %q", msg, want)
		}
	}
}

func TestPermissions(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix permission bits")
	}
	for _, tc := range []struct {
		mode fs.FileMode
		want error
	}{
		{0o600, nil},
		{0o400, nil},
		{0o700, nil},
		{0o644, ErrPermissions},
		{0o640, ErrPermissions},
		{0o604, ErrPermissions},
		{0o660, ErrPermissions},
		{0o610, ErrPermissions},
		{0o602, ErrPermissions},
	} {
		t.Run(fmt.Sprintf("%#o", tc.mode), func(t *testing.T) {
			for _, pass := range [][]byte{nil, testPass} {
				path, _ := newKeyFile(t, pass)
				if err := os.Chmod(path, tc.mode); err != nil {
					t.Fatal(err)
				}
				_, err := Load(path, pass)
				if !errors.Is(err, tc.want) {
					t.Fatalf("Load(mode %#o) = _, %v, want %v", tc.mode, err, tc.want)
				}
				if err != nil {
					for _, want := range []string{path, fmt.Sprintf("%#o", tc.mode)} {
						if !strings.Contains(err.Error(), want) {
							t.Errorf("Load(mode %#o) error %q does not mention %q", tc.mode, err, want)
						}
					}
				}
			}
		})
	}
}

func TestPermissionsViaSymlink(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix permission bits")
	}
	path, _ := newKeyFile(t, nil)
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link.key")
	if err := os.Symlink(path, link); err != nil {
		t.Skip(err)
	}
	if _, err := Load(link, nil); !errors.Is(err, ErrPermissions) {
		t.Errorf("Load(symlink to 0644 file) = _, %v, want ErrPermissions", err)
	}
}

func TestLoadDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir, nil); err == nil {
		t.Errorf("Load(directory) = nil error, want error")
	}
}

// validPlainDoc returns the parsed JSON of a fresh plain key file.
func validPlainDoc(t *testing.T) map[string]any {
	t.Helper()
	path, _ := newKeyFile(t, nil)
	return readDoc(t, path)
}

func TestMalformed(t *testing.T) {
	secp, _, err := crypto.GenerateSecp256k1Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	secpRaw, _ := crypto.MarshalPrivateKey(secp)
	ed, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	edRaw, _ := crypto.MarshalPrivateKey(ed)
	mismatched := bytes.Clone(edRaw)
	mismatched[len(mismatched)-1] ^= 1 // corrupt the public half
	b64 := base64.StdEncoding.EncodeToString

	plain := func(edit func(m map[string]any)) []byte {
		m := validPlainDoc(t)
		edit(m)
		b, _ := json.Marshal(m)
		return b
	}
	enc := func(edit func(m map[string]any)) []byte {
		path, _ := newKeyFile(t, testPass)
		m := readDoc(t, path)
		edit(m)
		b, _ := json.Marshal(m)
		return b
	}
	kdf := func(m map[string]any) map[string]any { return m["kdf"].(map[string]any) }

	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"garbage", []byte("\x00\x01not a key file\xff")},
		{"PEM", []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")},
		{"null", []byte("null")},
		{"array", []byte("[]")},
		{"empty object", []byte("{}")},
		{"version 2", []byte(`{"version":2,"type":"ed25519","kdf":null,"cipher":"none","key":""}`)},
		{"version 0", plain(func(m map[string]any) { m["version"] = 0 })},
		{"version string", plain(func(m map[string]any) { m["version"] = "1" })},
		{"version fraction", []byte(`{"version":1.5}`)},
		{"truncated JSON", plain(func(m map[string]any) {})[:40]},
		{"trailing data", append(plain(func(m map[string]any) {}), []byte(`{}`)...)},
		{"unknown field", plain(func(m map[string]any) { m["comment"] = "hi" })},
		{"unknown kdf field", enc(func(m map[string]any) { kdf(m)["pepper"] = "x" })},
		{"missing type", plain(func(m map[string]any) { delete(m, "type") })},
		{"type rsa", plain(func(m map[string]any) { m["type"] = "rsa" })},
		{"plain, cipher missing", plain(func(m map[string]any) { delete(m, "cipher") })},
		{"plain, cipher xchacha", plain(func(m map[string]any) { m["cipher"] = "xchacha20poly1305" })},
		{"plain, nonce present", plain(func(m map[string]any) { m["nonce"] = b64(make([]byte, 24)) })},
		{"plain, key not base64", plain(func(m map[string]any) { m["key"] = "!!!" })},
		{"plain, key unpadded base64", plain(func(m map[string]any) { m["key"] = strings.TrimRight(m["key"].(string), "=") })},
		{"plain, key empty", plain(func(m map[string]any) { m["key"] = "" })},
		{"plain, key not protobuf", plain(func(m map[string]any) { m["key"] = b64([]byte{0xff, 0xff, 0xff}) })},
		{"plain, secp256k1 key", plain(func(m map[string]any) { m["key"] = b64(secpRaw) })},
		{"plain, truncated key", plain(func(m map[string]any) { m["key"] = b64(edRaw[:len(edRaw)-1]) })},
		{"plain, public half mismatched", plain(func(m map[string]any) { m["key"] = b64(mismatched) })},
		{"enc, cipher none", enc(func(m map[string]any) { m["cipher"] = "none" })},
		{"enc, kdf not object", enc(func(m map[string]any) { m["kdf"] = "argon2id" })},
		{"enc, salt short", enc(func(m map[string]any) { kdf(m)["salt"] = b64(make([]byte, 8)) })},
		{"enc, salt not base64", enc(func(m map[string]any) { kdf(m)["salt"] = "***" })},
		{"enc, nonce short", enc(func(m map[string]any) { m["nonce"] = b64(make([]byte, 12)) })},
		{"enc, nonce missing", enc(func(m map[string]any) { delete(m, "nonce") })},
		{"enc, ciphertext shorter than tag", enc(func(m map[string]any) { m["key"] = b64(make([]byte, 15)) })},
		{"enc, negative time", enc(func(m map[string]any) { kdf(m)["time"] = -1 })},
		{"enc, memory below 8*threads", enc(func(m map[string]any) { kdf(m)["memory_kib"] = 7 })},
		{"oversized", append(plain(func(m map[string]any) {}), bytes.Repeat([]byte(" "), maxFileSize)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bad.key")
			writeRaw(t, path, tc.data)
			for _, pass := range [][]byte{nil, testPass} {
				_, err := Load(path, pass)
				if !errors.Is(err, ErrBadFile) {
					t.Errorf("Load(%s, pass=%t) = _, %v, want ErrBadFile", tc.name, pass != nil, err)
				}
			}
		})
	}
}

func TestUnknownVersionMessage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v9.key")
	writeRaw(t, path, []byte(`{"version":9,"something":"new"}`))
	_, err := Load(path, nil)
	if !errors.Is(err, ErrBadFile) || !strings.Contains(err.Error(), "version 9") {
		t.Errorf("Load(version 9) = _, %v, want ErrBadFile mentioning version 9", err)
	}
}

func TestHostileKDFParams(t *testing.T) {
	for _, tc := range []struct {
		name  string
		field string
		value any
	}{
		{"time 10 at 1 GiB (each within bounds, work too high)", "", nil},
		{"memory 4 TiB", "memory_kib", uint64(1<<32 - 1)},
		{"memory just over 1 GiB", "memory_kib", 1<<20 + 1},
		{"memory overflows uint32", "memory_kib", uint64(1 << 40)},
		{"time 1e9", "time", 1_000_000_000},
		{"time 11", "time", 11},
		{"time 0", "time", 0},
		{"threads 255", "threads", 255},
		{"threads 256", "threads", 256},
		{"threads 0", "threads", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, _ := newKeyFile(t, testPass)
			m := readDoc(t, path)
			if tc.field == "" {
				m["kdf"].(map[string]any)["time"] = 10
				m["kdf"].(map[string]any)["memory_kib"] = 1 << 20
			} else {
				m["kdf"].(map[string]any)[tc.field] = tc.value
			}
			writeDoc(t, path, m)
			start := time.Now()
			_, err := Load(path, testPass)
			if el := time.Since(start); el > 2*time.Second {
				t.Errorf("Load(%s) took %v, want it refused quickly", tc.name, el)
			}
			if !errors.Is(err, ErrBadFile) {
				t.Errorf("Load(%s) = _, %v, want ErrBadFile", tc.name, err)
			}
		})
	}
}

func TestLimitsAcceptDefaults(t *testing.T) {
	// Files written with the defaults must be within what Load accepts.
	if defaultKDF.Time > defaultLimits.MaxTime || defaultKDF.MemoryKiB > defaultLimits.MaxMemoryKiB ||
		defaultKDF.Threads > defaultLimits.MaxThreads ||
		uint64(defaultKDF.Time)*uint64(defaultKDF.MemoryKiB) > defaultLimits.MaxWork {
		t.Errorf("defaultKDF %+v exceeds defaultLimits %+v", defaultKDF, defaultLimits)
	}
}

func TestChangePassphrase(t *testing.T) {
	other := []byte("new passphrase")
	for _, tc := range []struct {
		name             string
		from, old, to    []byte
		wantErr          error
		loadWith, reject []byte // after the change: loads with loadWith; reject (if non-nil) fails
	}{
		{"plain to encrypted", nil, nil, other, nil, other, nil},
		{"encrypted to encrypted", testPass, testPass, other, nil, other, testPass},
		{"encrypted to plain", testPass, testPass, nil, nil, nil, nil},
		{"wrong old passphrase", testPass, []byte("nope"), other, ErrWrongPassphrase, testPass, other},
		{"missing old passphrase", testPass, nil, other, ErrNeedPassphrase, testPass, other},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, priv := newKeyFile(t, tc.from)
			err := changePassphrase(path, tc.old, tc.to, cheapKDF)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("ChangePassphrase = %v, want %v", err, tc.wantErr)
			}
			got, err := Load(path, tc.loadWith)
			if err != nil {
				t.Fatalf("Load after ChangePassphrase = _, %v", err)
			}
			if g, w := peerID(t, got), peerID(t, priv); g != w {
				t.Errorf("peer ID after ChangePassphrase = %s, want %s", g, w)
			}
			if tc.reject != nil {
				if _, err := Load(path, tc.reject); !errors.Is(err, ErrWrongPassphrase) {
					t.Errorf("Load(old/unset passphrase) = _, %v, want ErrWrongPassphrase", err)
				}
			}
			if runtime.GOOS != "windows" {
				if fi, _ := os.Stat(path); fi.Mode() != 0o600 {
					t.Errorf("mode after ChangePassphrase = %v, want 0600", fi.Mode())
				}
			}
			if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
				t.Errorf("dir has %d entries, want 1 (no temp files left)", len(entries))
			}
		})
	}
}

func TestPassphrase(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string, mode fs.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	nl := file("nl", "secret\n", 0o600)
	crlf := file("crlf", "secret\r\n", 0o600)
	two := file("two", "secret\n\n", 0o600)
	none := file("none", "secret", 0o600)
	spaces := file("spaces", " secret \n", 0o600)
	open := file("open", "secret\n", 0o644)
	missing := filepath.Join(dir, "missing")

	for _, tc := range []struct {
		name    string
		env     map[string]string
		envVar  string
		file    string
		want    []byte
		wantErr error
	}{
		{"nothing", nil, "", "", nil, nil},
		{"default env", map[string]string{EnvPassphrase: "from-env"}, "", "", []byte("from-env"), nil},
		{"explicit env", map[string]string{EnvPassphrase: "from-env"}, EnvPassphrase, nl, []byte("from-env"), nil},
		{"env beats file", map[string]string{EnvPassphrase: "from-env\n"}, "", nl, []byte("from-env\n"), nil},
		{"custom env var", map[string]string{"MY_PASS": "mine", EnvPassphrase: "x"}, "MY_PASS", "", []byte("mine"), nil},
		{"empty env falls back to file", map[string]string{EnvPassphrase: ""}, "", nl, []byte("secret"), nil},
		{"file newline trimmed", nil, "", nl, []byte("secret"), nil},
		{"file CRLF trimmed", nil, "", crlf, []byte("secret"), nil},
		{"file only one newline trimmed", nil, "", two, []byte("secret\n"), nil},
		{"file without newline", nil, "", none, []byte("secret"), nil},
		{"file spaces kept", nil, "", spaces, []byte(" secret "), nil},
		{"file too open", nil, "", open, nil, ErrPermissions},
		{"file missing", nil, "", missing, nil, fs.ErrNotExist},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{EnvPassphrase, "MY_PASS"} {
				t.Setenv(k, "")
				os.Unsetenv(k)
			}
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			got, err := Passphrase(tc.envVar, tc.file)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Passphrase(%q, %q) = _, %v, want %v", tc.envVar, tc.file, err, tc.wantErr)
			}
			if !bytes.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
				t.Errorf("Passphrase(%q, %q) = %q, want %q", tc.envVar, tc.file, got, tc.want)
			}
		})
	}
}

// fuzzLimits keep a fuzzed header from asking for expensive derivations.
var fuzzLimits = kdfLimits{MaxTime: 2, MaxMemoryKiB: 256, MaxThreads: 2, MaxWork: 512}

func FuzzLoad(f *testing.F) {
	priv, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	plain, err := encode(priv, nil, cheapKDF)
	if err != nil {
		f.Fatal(err)
	}
	enc, err := encode(priv, testPass, cheapKDF)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(plain)
	f.Add(enc)
	f.Add([]byte("\x00garbage\xff{"))
	f.Add([]byte(""))
	f.Add([]byte("{}"))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`{"version":1,"type":"ed25519","kdf":{"name":"argon2id","time":1,"memory_kib":64,"threads":1,"salt":"AAAAAAAAAAAAAAAAAAAAAA=="},"cipher":"xchacha20poly1305","nonce":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","key":"AAAAAAAAAAAAAAAAAAAAAA=="}`))

	f.Fuzz(func(t *testing.T, data []byte) {
		k, err := decode(data, testPass, fuzzLimits)
		if err != nil {
			if k != nil {
				t.Fatalf("decode returned a key and error %v", err)
			}
			if !errors.Is(err, ErrBadFile) && !errors.Is(err, ErrWrongPassphrase) && !errors.Is(err, ErrNeedPassphrase) {
				t.Fatalf("decode error %v is not one of the package's errors", err)
			}
			return
		}
		if k.Type() != crypto.Ed25519 {
			t.Fatalf("decode returned a %v key", k.Type())
		}
		// Whatever decodes must survive a round trip unchanged.
		again, err := encode(k, nil, cheapKDF)
		if err != nil {
			t.Fatal(err)
		}
		k2, err := decode(again, nil, fuzzLimits)
		if err != nil || !k2.Equals(k) {
			t.Fatalf("round trip of decoded key: %v", err)
		}
		// And the key must be usable.
		sig, err := k.Sign([]byte("m"))
		if err != nil {
			t.Fatal(err)
		}
		if ok, _ := k.GetPublic().Verify([]byte("m"), sig); !ok {
			t.Fatalf("decoded key's signature does not verify")
		}
	})
}

// TestLoadReadsWhatEncodeWrites checks the fuzz seeds' encoder output via
// Load's file path too.
func TestLoadReadsWhatEncodeWrites(t *testing.T) {
	priv, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	for _, pass := range [][]byte{nil, testPass} {
		data, err := encode(priv, pass, cheapKDF)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "k")
		writeRaw(t, path, data)
		got, err := Load(path, pass)
		if err != nil || !got.Equals(priv) {
			t.Errorf("Load(encode(key, %q)) = _, %v; want the key", pass, err)
		}
	}
}

// The Argon2 parameters and salt already change the derived key, so the
// tamper tests above pass even without the additional data; this checks the
// additional data itself covers every header field.
func TestHeaderADCoversHeader(t *testing.T) {
	base := func() (*fileV1, []byte) {
		return &fileV1{
			Version: 1, Type: "ed25519", Cipher: "xchacha20poly1305",
			KDF: &kdfJSON{Name: "argon2id", Time: 3, MemoryKiB: 65536, Threads: 4},
		}, bytes.Repeat([]byte{7}, 16)
	}
	f0, s0 := base()
	want := headerAD(f0, s0)
	for _, tc := range []struct {
		name   string
		mutate func(f *fileV1, salt []byte) []byte
	}{
		{"version", func(f *fileV1, s []byte) []byte { f.Version = 2; return s }},
		{"type", func(f *fileV1, s []byte) []byte { f.Type = "ed25519x"; return s }},
		{"kdf name", func(f *fileV1, s []byte) []byte { f.KDF.Name = "argon2i"; return s }},
		{"time", func(f *fileV1, s []byte) []byte { f.KDF.Time = 4; return s }},
		{"memory", func(f *fileV1, s []byte) []byte { f.KDF.MemoryKiB = 65537; return s }},
		{"threads", func(f *fileV1, s []byte) []byte { f.KDF.Threads = 1; return s }},
		{"salt", func(f *fileV1, s []byte) []byte { s[0] ^= 1; return s }},
		{"cipher", func(f *fileV1, s []byte) []byte { f.Cipher = "xchacha20poly1305x"; return s }},
		{"type/kdf boundary", func(f *fileV1, s []byte) []byte { f.Type = "ed25519a"; f.KDF.Name = "rgon2id"; return s }},
	} {
		f, s := base()
		s = tc.mutate(f, s)
		if got := headerAD(f, s); bytes.Equal(got, want) {
			t.Errorf("headerAD with %s changed = unchanged, want different", tc.name)
		}
	}
	// Opening with the right derived key but a different header fails.
	priv, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	raw, _ := crypto.MarshalPrivateKey(priv)
	aead, err := newAEAD(testPass, s0, cheapKDF)
	if err != nil {
		t.Fatal(err)
	}
	nonce := make([]byte, 24)
	ct := aead.Seal(nil, nonce, raw, want)
	f1, s1 := base()
	f1.Version = 2
	if _, err := aead.Open(nil, nonce, ct, headerAD(f1, s1)); err == nil {
		t.Errorf("Open with a changed header = nil error, want authentication failure")
	}
}
