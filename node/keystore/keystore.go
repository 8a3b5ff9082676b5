// Package keystore stores the node's identity key on disk.
//
// The node's identity is a libp2p Ed25519 private key; its peer ID is the
// node's account in the marketplace, so losing or leaking this file means
// losing or leaking the account.
//
// # File format (version 1)
//
// A key file is a single JSON document (at most 64 KiB):
//
//	{
//	  "version": 1,
//	  "type": "ed25519",
//	  "kdf": {
//	    "name": "argon2id",
//	    "time": 3,
//	    "memory_kib": 65536,
//	    "threads": 4,
//	    "salt": "<base64, 16 bytes>"
//	  },
//	  "cipher": "xchacha20poly1305",
//	  "nonce": "<base64, 24 bytes>",
//	  "key": "<base64 ciphertext of the libp2p-marshalled private key>"
//	}
//
// All binary fields use standard, padded base64 (RFC 4648 §4). "key" holds
// crypto.MarshalPrivateKey(priv), i.e. the libp2p protobuf PrivateKey
// message.
//
// Encrypted form: a 32-byte key is derived from the passphrase with
// Argon2id(passphrase, salt, time, memory_kib, threads) and the marshalled
// key is sealed with XChaCha20-Poly1305 under the random 24-byte nonce. The
// additional data is a canonical binary encoding of the header (format
// version, key type, KDF name and parameters, salt and cipher name; see
// headerAD), so changing any of them, the nonce or the ciphertext makes
// decryption fail with ErrWrongPassphrase.
//
// Plain form (empty passphrase): "kdf" is null, "cipher" is "none", "nonce"
// is absent and "key" holds the marshalled key itself.
//
// Unknown fields are rejected. A reader first looks only at "version" and
// refuses versions it does not know with ErrBadFile, so a later format may
// change everything else.
//
// The file is written with mode 0600, atomically (temporary file in the same
// directory, fsync, rename or link, fsync of the directory). Like ssh, Load
// refuses a file whose mode grants any access to group or others.
package keystore

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/libp2p/go-libp2p/core/crypto"
	cryptopb "github.com/libp2p/go-libp2p/core/crypto/pb"
	"golang.org/x/crypto/argon2"
	"golang.org/x/crypto/chacha20poly1305"
	"google.golang.org/protobuf/proto"
)

// EnvPassphrase is the environment variable Passphrase reads by default.
const EnvPassphrase = "SUANLI_PASSPHRASE"

// Errors returned by this package. Returned errors wrap them with detail;
// test with errors.Is.
var (
	// ErrExists: Create refuses to overwrite an existing key file.
	ErrExists = errors.New("keystore: key file already exists")
	// ErrNeedPassphrase: the key file is encrypted and no passphrase was given.
	ErrNeedPassphrase = errors.New("keystore: key file is encrypted; a passphrase is required")
	// ErrWrongPassphrase: authenticated decryption failed.
	ErrWrongPassphrase = errors.New("keystore: cannot decrypt key: wrong passphrase, or the key file has been tampered with")
	// ErrBadFile: the file is malformed, of an unknown version, or uses an
	// unsupported key type, KDF or cipher, or out-of-bounds KDF parameters.
	ErrBadFile = errors.New("keystore: bad key file")
	// ErrPermissions: the key (or passphrase) file is accessible by group or others.
	ErrPermissions = errors.New("keystore: file permissions are too open")
)

const (
	formatVersion  = 1
	keyTypeEd25519 = "ed25519"
	kdfArgon2id    = "argon2id"
	cipherXChaCha  = "xchacha20poly1305"
	cipherNone     = "none"

	saltLen       = 16
	derivedKeyLen = chacha20poly1305.KeySize // 32

	// maxFileSize bounds what Load reads; a real file is well under 1 KiB.
	maxFileSize = 64 << 10
	// maxPassphraseFileSize bounds what Passphrase reads from a file.
	maxPassphraseFileSize = 64 << 10
)

// kdfParams are the Argon2id cost parameters.
type kdfParams struct {
	Time      uint32 // passes over memory
	MemoryKiB uint32 // memory in KiB
	Threads   uint8  // lanes (parallelism); an input to the hash, not just a speed knob
}

// defaultKDF are the parameters Create and ChangePassphrase write.
//
// They are RFC 9106 §4's second recommended option ("uniformly safe" when
// 2 GiB is too much): Argon2id, t=3, m=64 MiB, p=4, 128-bit salt, 256-bit
// tag. The key is unlocked once per node start, so a cost of roughly 0.1–0.5 s
// and 64 MiB of RAM is acceptable on the small machines a provider may run,
// while costing an offline guesser the same per candidate. Parallelism is
// fixed at 4 rather than min(4, NumCPU): it is an input to the hash, so a
// fixed value keeps files identical in cost wherever they are created; on
// fewer cores the Go runtime simply runs the four lanes in turn (same total
// work, a little more wall time). The values are recorded in the file, so
// they can be raised later without breaking existing files.
var defaultKDF = kdfParams{Time: 3, MemoryKiB: 64 * 1024, Threads: 4}

// kdfLimits bound the KDF parameters Load accepts from a file, so a hostile
// or corrupted file cannot make Load run for minutes or exhaust memory.
type kdfLimits struct {
	MaxTime      uint32
	MaxMemoryKiB uint32
	MaxThreads   uint8
	MaxWork      uint64 // bound on Time × MemoryKiB (KiB processed)
}

// defaultLimits: up to 1 GiB, 10 passes and 4 GiB processed in all (16× the
// default memory, ~3× the default passes, ~21× the default work) leaves room
// to raise the defaults later. The work cap matters: 10 passes over 1 GiB
// take ~12 s on a 2-core machine, while the worst a file can now demand is
// about 5 s and 1 GiB (the default costs ~0.35 s there).
var defaultLimits = kdfLimits{MaxTime: 10, MaxMemoryKiB: 1 << 20, MaxThreads: 16, MaxWork: 4 << 20}

// fileV1 is the JSON document.
type fileV1 struct {
	Version int      `json:"version"`
	Type    string   `json:"type"`
	KDF     *kdfJSON `json:"kdf"`
	Cipher  string   `json:"cipher"`
	Nonce   string   `json:"nonce,omitempty"`
	Key     string   `json:"key"`
}

type kdfJSON struct {
	Name      string `json:"name"`
	Time      uint32 `json:"time"`
	MemoryKiB uint32 `json:"memory_kib"`
	Threads   uint32 `json:"threads"`
	Salt      string `json:"salt"`
}

var b64 = base64.StdEncoding.Strict()

// Create generates a new Ed25519 identity key and writes it to path with mode
// 0600. With an empty passphrase the key is stored in plain form; otherwise it
// is encrypted with a key derived from passphrase (Argon2id +
// XChaCha20-Poly1305). Create never overwrites: if path exists it returns an
// error wrapping ErrExists.
func Create(path string, passphrase []byte) (crypto.PrivKey, error) {
	return create(path, passphrase, defaultKDF)
}

func create(path string, passphrase []byte, params kdfParams) (crypto.PrivKey, error) {
	if _, err := os.Lstat(path); err == nil {
		return nil, fmt.Errorf("%w: %s", ErrExists, path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("keystore: %w", err)
	}
	priv, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("keystore: generating key: %w", err)
	}
	data, err := encode(priv, passphrase, params)
	if err != nil {
		return nil, err
	}
	if err := writeFile(path, data, false); err != nil {
		return nil, err
	}
	return priv, nil
}

// Load reads the identity key at path. passphrase is ignored for a plain
// (unencrypted) file. Errors wrap ErrNeedPassphrase, ErrWrongPassphrase,
// ErrBadFile or ErrPermissions, or are the underlying I/O error (e.g.
// fs.ErrNotExist).
func Load(path string, passphrase []byte) (crypto.PrivKey, error) {
	return load(path, passphrase, defaultLimits)
}

func load(path string, passphrase []byte, lim kdfLimits) (crypto.PrivKey, error) {
	data, err := readPrivateFile(path, maxFileSize)
	if err != nil {
		return nil, err
	}
	priv, err := decode(data, passphrase, lim)
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return priv, nil
}

// ChangePassphrase re-encrypts the key at path under newPass, atomically
// replacing the file. oldPass must unlock the current file (it is ignored if
// the file is plain). An empty newPass stores the key in plain form.
func ChangePassphrase(path string, oldPass, newPass []byte) error {
	return changePassphrase(path, oldPass, newPass, defaultKDF)
}

func changePassphrase(path string, oldPass, newPass []byte, params kdfParams) error {
	priv, err := Load(path, oldPass)
	if err != nil {
		return err
	}
	data, err := encode(priv, newPass, params)
	if err != nil {
		return err
	}
	return writeFile(path, data, true)
}

// Passphrase returns the passphrase to unlock the key with: the value of the
// environment variable envVar (EnvPassphrase if envVar is "") if it is set
// and non-empty; else the contents of file, with one trailing newline ("\n"
// or "\r\n") removed, if file is not ""; else nil (no passphrase). The
// passphrase file, like the key file, must not be accessible by group or
// others (ErrPermissions).
func Passphrase(envVar string, file string) ([]byte, error) {
	if envVar == "" {
		envVar = EnvPassphrase
	}
	if v := os.Getenv(envVar); v != "" {
		return []byte(v), nil
	}
	if file == "" {
		return nil, nil
	}
	data, err := readPrivateFile(file, maxPassphraseFileSize)
	if err != nil {
		return nil, err
	}
	if bytes.HasSuffix(data, []byte("\r\n")) {
		data = data[:len(data)-2]
	} else if bytes.HasSuffix(data, []byte("\n")) {
		data = data[:len(data)-1]
	}
	return data, nil
}

// encode serialises priv, encrypting it if passphrase is non-empty.
func encode(priv crypto.PrivKey, passphrase []byte, params kdfParams) ([]byte, error) {
	if priv.Type() != cryptopb.KeyType_Ed25519 {
		return nil, fmt.Errorf("keystore: unsupported key type %v", priv.Type())
	}
	raw, err := crypto.MarshalPrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("keystore: marshalling key: %w", err)
	}
	defer clear(raw)

	f := fileV1{Version: formatVersion, Type: keyTypeEd25519}
	if len(passphrase) == 0 {
		f.Cipher = cipherNone
		f.Key = b64.EncodeToString(raw)
	} else {
		salt := make([]byte, saltLen)
		if _, err := rand.Read(salt); err != nil {
			return nil, fmt.Errorf("keystore: reading random salt: %w", err)
		}
		nonce := make([]byte, chacha20poly1305.NonceSizeX)
		if _, err := rand.Read(nonce); err != nil {
			return nil, fmt.Errorf("keystore: reading random nonce: %w", err)
		}
		f.KDF = &kdfJSON{
			Name:      kdfArgon2id,
			Time:      params.Time,
			MemoryKiB: params.MemoryKiB,
			Threads:   uint32(params.Threads),
			Salt:      b64.EncodeToString(salt),
		}
		f.Cipher = cipherXChaCha
		f.Nonce = b64.EncodeToString(nonce)

		aead, err := newAEAD(passphrase, salt, params)
		if err != nil {
			return nil, err
		}
		ct := aead.Seal(nil, nonce, raw, headerAD(&f, salt))
		f.Key = b64.EncodeToString(ct)
	}
	out, err := json.MarshalIndent(&f, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("keystore: encoding file: %w", err)
	}
	return append(out, '\n'), nil
}

// decode parses and, if needed, decrypts a key file's contents.
func decode(data []byte, passphrase []byte, lim kdfLimits) (crypto.PrivKey, error) {
	// Look at the version alone first, so that a future version with a
	// different layout is reported as such, not as unknown fields.
	var probe struct {
		Version *int `json:"version"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, badFile("not a JSON key file: %v", err)
	}
	if probe.Version == nil {
		return nil, badFile("missing \"version\"")
	}
	if *probe.Version != formatVersion {
		return nil, badFile("unsupported format version %d (this build reads version %d)", *probe.Version, formatVersion)
	}

	var f fileV1
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, badFile("%v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, badFile("trailing data after JSON document")
	}
	if f.Type != keyTypeEd25519 {
		return nil, badFile("unsupported key type %q", f.Type)
	}
	ct, err := b64.DecodeString(f.Key)
	if err != nil {
		return nil, badFile("\"key\" is not valid base64: %v", err)
	}

	if f.KDF == nil {
		if f.Cipher != cipherNone {
			return nil, badFile("cipher %q without \"kdf\"", f.Cipher)
		}
		if f.Nonce != "" {
			return nil, badFile("\"nonce\" in a plain key file")
		}
		defer clear(ct)
		return parseKey(ct)
	}

	// Encrypted form.
	k := f.KDF
	if k.Name != kdfArgon2id {
		return nil, badFile("unsupported kdf %q", k.Name)
	}
	if f.Cipher != cipherXChaCha {
		return nil, badFile("unsupported cipher %q", f.Cipher)
	}
	if k.Time < 1 || k.Time > lim.MaxTime {
		return nil, badFile("kdf time %d out of range [1, %d]", k.Time, lim.MaxTime)
	}
	if k.Threads < 1 || k.Threads > uint32(lim.MaxThreads) {
		return nil, badFile("kdf threads %d out of range [1, %d]", k.Threads, lim.MaxThreads)
	}
	if k.MemoryKiB < 8*k.Threads || k.MemoryKiB > lim.MaxMemoryKiB {
		return nil, badFile("kdf memory_kib %d out of range [%d, %d]", k.MemoryKiB, 8*k.Threads, lim.MaxMemoryKiB)
	}
	if work := uint64(k.Time) * uint64(k.MemoryKiB); work > lim.MaxWork {
		return nil, badFile("kdf cost time×memory_kib = %d exceeds %d", work, lim.MaxWork)
	}
	salt, err := b64.DecodeString(k.Salt)
	if err != nil {
		return nil, badFile("\"salt\" is not valid base64: %v", err)
	}
	if len(salt) != saltLen {
		return nil, badFile("salt is %d bytes, want %d", len(salt), saltLen)
	}
	nonce, err := b64.DecodeString(f.Nonce)
	if err != nil {
		return nil, badFile("\"nonce\" is not valid base64: %v", err)
	}
	if len(nonce) != chacha20poly1305.NonceSizeX {
		return nil, badFile("nonce is %d bytes, want %d", len(nonce), chacha20poly1305.NonceSizeX)
	}
	if len(ct) < chacha20poly1305.Overhead {
		return nil, badFile("ciphertext too short (%d bytes)", len(ct))
	}
	if len(passphrase) == 0 {
		return nil, ErrNeedPassphrase
	}

	params := kdfParams{Time: k.Time, MemoryKiB: k.MemoryKiB, Threads: uint8(k.Threads)}
	aead, err := newAEAD(passphrase, salt, params)
	if err != nil {
		return nil, err
	}
	raw, err := aead.Open(nil, nonce, ct, headerAD(&f, salt))
	if err != nil {
		return nil, ErrWrongPassphrase
	}
	defer clear(raw)
	return parseKey(raw)
}

// headerAD is the additional data authenticated with the ciphertext: a
// canonical, length-prefixed binary encoding of every header field, so it
// does not depend on how the JSON was formatted.
func headerAD(f *fileV1, salt []byte) []byte {
	var b []byte
	str := func(s string) {
		b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	str("suanli-keystore")
	b = binary.BigEndian.AppendUint32(b, uint32(f.Version))
	str(f.Type)
	str(f.KDF.Name)
	b = binary.BigEndian.AppendUint32(b, f.KDF.Time)
	b = binary.BigEndian.AppendUint32(b, f.KDF.MemoryKiB)
	b = binary.BigEndian.AppendUint32(b, f.KDF.Threads)
	str(string(salt))
	str(f.Cipher)
	return b
}

type aeadCipher interface {
	Seal(dst, nonce, plaintext, additionalData []byte) []byte
	Open(dst, nonce, ciphertext, additionalData []byte) ([]byte, error)
}

func newAEAD(passphrase, salt []byte, p kdfParams) (aeadCipher, error) {
	key := argon2.IDKey(passphrase, salt, p.Time, p.MemoryKiB, p.Threads, derivedKeyLen)
	defer clear(key)
	aead, err := chacha20poly1305.NewX(key)
	if err != nil {
		return nil, fmt.Errorf("keystore: %w", err)
	}
	return aead, nil
}

// parseKey decodes a libp2p-marshalled private key, accepting only a
// well-formed Ed25519 key whose public half matches its seed.
func parseKey(raw []byte) (crypto.PrivKey, error) {
	var pk cryptopb.PrivateKey
	if err := proto.Unmarshal(raw, &pk); err != nil {
		return nil, badFile("key is not a libp2p private key: %v", err)
	}
	if pk.Type == nil || pk.GetType() != cryptopb.KeyType_Ed25519 {
		return nil, badFile("key is not an Ed25519 key (type %v)", pk.GetType())
	}
	d := pk.GetData()
	defer clear(d)
	if len(d) != ed25519.PrivateKeySize {
		return nil, badFile("Ed25519 key is %d bytes, want %d", len(d), ed25519.PrivateKeySize)
	}
	want := ed25519.NewKeyFromSeed(d[:ed25519.SeedSize])
	defer clear(want)
	if !bytes.Equal(want[ed25519.SeedSize:], d[ed25519.SeedSize:ed25519.PrivateKeySize]) {
		return nil, badFile("Ed25519 public key does not match the private key")
	}
	// UnmarshalEd25519PrivateKey may keep its argument, so give it a copy we
	// own rather than d (which is cleared on return).
	own := make([]byte, ed25519.PrivateKeySize)
	copy(own, d)
	priv, err := crypto.UnmarshalEd25519PrivateKey(own)
	if err != nil {
		return nil, badFile("%v", err)
	}
	return priv, nil
}

func badFile(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadFile, fmt.Sprintf(format, args...))
}

// readPrivateFile opens path, refuses it unless it is a regular file with no
// group/other permission bits (checked on the open descriptor, so it is the
// file that is read), and reads at most limit bytes.
func readPrivateFile(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("keystore: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("keystore: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("keystore: %s is not a regular file (mode %v)", path, fi.Mode())
	}
	if err := checkPerm(path, fi.Mode()); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("keystore: reading %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrBadFile, path, limit)
	}
	return data, nil
}

// checkPerm refuses, as ssh does, a secret file that grants any access to
// group or others. Windows has no such mode bits; its ACLs are not checked.
func checkPerm(path string, mode fs.FileMode) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	if perm := mode.Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%w: %s has mode %#o; it must not be accessible by group or others (run: chmod 600 %s)",
			ErrPermissions, path, perm, shellQuote(path))
	}
	return nil
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// writeFile writes data to path atomically with mode 0600: a temporary file
// in the same directory is written and fsynced, then moved into place and
// the directory fsynced. If replace is false and path exists, it fails with
// ErrExists (without a window in which an existing file could be clobbered,
// where the file system supports hard links).
func writeFile(path string, data []byte, replace bool) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*") // created 0600
	if err != nil {
		return fmt.Errorf("keystore: %w", err)
	}
	tmpName := tmp.Name()
	defer func() {
		if tmp != nil {
			tmp.Close()
		}
		os.Remove(tmpName) // no-op once renamed; removes the extra link otherwise
	}()
	if err := tmp.Chmod(0o600); err != nil && runtime.GOOS != "windows" {
		return fmt.Errorf("keystore: %w", err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("keystore: writing %s: %w", tmpName, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("keystore: syncing %s: %w", tmpName, err)
	}
	err = tmp.Close()
	tmp = nil
	if err != nil {
		return fmt.Errorf("keystore: closing %s: %w", tmpName, err)
	}

	if replace {
		if err := os.Rename(tmpName, path); err != nil {
			return fmt.Errorf("keystore: %w", err)
		}
	} else {
		// link(2) fails with EEXIST instead of replacing, closing the race
		// between the existence check in Create and the move into place.
		if lerr := os.Link(tmpName, path); lerr != nil {
			if errors.Is(lerr, fs.ErrExist) {
				return fmt.Errorf("%w: %s", ErrExists, path)
			}
			// No hard links here (some FUSE/network file systems): fall
			// back to check-then-rename.
			if _, serr := os.Lstat(path); serr == nil {
				return fmt.Errorf("%w: %s", ErrExists, path)
			}
			if err := os.Rename(tmpName, path); err != nil {
				return fmt.Errorf("keystore: %w", err)
			}
		}
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil // directories cannot be fsynced there; rename is durable enough
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("keystore: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("keystore: syncing directory %s: %w", dir, err)
	}
	return nil
}
