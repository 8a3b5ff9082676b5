package attest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha512"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/binary"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"
)

// testNow is inside every sample certificate's validity, RIM signers included
// (the RIM L4 signer expires 2025-06-22).
var testNow = time.Date(2024, 6, 1, 0, 0, 0, 0, time.UTC)

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sampleReport returns a fresh copy of NVIDIA's sample report (binary).
func sampleReport(t testing.TB) []byte {
	t.Helper()
	b, err := DecodeReportHex(readTestdata(t, "hopperAttestationReport.txt"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sampleChainPEM(t testing.TB) []byte { return readTestdata(t, "hopperCertChain.txt") }

func sampleCerts(t testing.TB) []*x509.Certificate {
	t.Helper()
	c, err := ParseChain(sampleChainPEM(t))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// sampleNonce is the nonce the sample report answers (request bytes 4..36).
func sampleNonce(t testing.TB) []byte {
	return append([]byte(nil), sampleReport(t)[4:36]...)
}

func sampleRIMs(t testing.TB) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "*.swidtag"))
	if err != nil || len(files) != 4 {
		t.Fatalf("want 4 swidtags, got %d (%v)", len(files), err)
	}
	sort.Strings(files)
	out := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = b
	}
	return out
}

func pemChain(certs ...*x509.Certificate) []byte {
	var out []byte
	for _, c := range certs {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return out
}

// opaqueOffset returns the offset in report of the opaque TLV of type typ
// (its 4-byte header), by walking the sample layout.
func opaqueOffset(t testing.TB, report []byte, typ uint16) int {
	t.Helper()
	rep, err := ParseReport(report)
	if err != nil {
		t.Fatal(err)
	}
	off := requestSize + responseHeaderSize + rep.Response.RecordLen + NonceSize + 2
	end := off + len(rep.Response.OpaqueRaw)
	for off < end {
		ty := binary.LittleEndian.Uint16(report[off:])
		n := int(binary.LittleEndian.Uint16(report[off+2:]))
		if ty == typ {
			return off
		}
		off += 4 + n
	}
	t.Fatalf("no opaque field %d", typ)
	return 0
}

// setOpaque overwrites the value of opaque field typ (same length).
func setOpaque(t testing.TB, report []byte, typ uint16, val []byte) {
	t.Helper()
	off := opaqueOffset(t, report, typ)
	if n := int(binary.LittleEndian.Uint16(report[off+2:])); n != len(val) {
		t.Fatalf("field %d is %d bytes, new value %d", typ, n, len(val))
	}
	copy(report[off+4:], val)
}

// resign replaces the report's signature with one by key.
func resign(t testing.TB, report []byte, key *ecdsa.PrivateKey) {
	t.Helper()
	n := len(report) - SignatureSize
	h := sha512.Sum384(report[:n])
	r, s, err := ecdsa.Sign(rand.Reader, key, h[:])
	if err != nil {
		t.Fatal(err)
	}
	r.FillBytes(report[n : n+48])
	s.FillBytes(report[n+48:])
}

func newP384(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

var serial int64 = 1000

// makeCert issues a certificate for pub, signed by parentKey (self-signed
// when parent is nil). exts are added verbatim.
func makeCert(t testing.TB, subject pkix.Name, pub *ecdsa.PublicKey, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, ca bool, exts ...pkix.Extension) *x509.Certificate {
	t.Helper()
	serial++
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial),
		Subject:               subject,
		NotBefore:             time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:              time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC),
		BasicConstraintsValid: true,
		IsCA:                  ca,
		ExtraExtensions:       exts,
	}
	if ca {
		tmpl.KeyUsage = x509.KeyUsageCertSign
	} else {
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	}
	if parent == nil {
		parent = tmpl
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// nvFWIDExt builds the FWID extension in NVIDIA's layout.
func nvFWIDExt(t testing.TB, deviceKey *ecdsa.PublicKey, fwid []byte) pkix.Extension {
	t.Helper()
	spki, err := x509.MarshalPKIXPublicKey(deviceKey)
	if err != nil {
		t.Fatal(err)
	}
	v, err := asn1.Marshal(compositeDeviceID{Version: 1, DeviceKey: asn1.RawValue{FullBytes: spki}, FWID: fwidASN{oidSHA384, fwid}})
	if err != nil {
		t.Fatal(err)
	}
	return pkix.Extension{Id: oidDiceTcbInfo, Value: v}
}

// fakePKI is a throwaway P-384 CA and a leaf carrying fwid, for evidence
// that is correctly signed but rooted elsewhere.
type fakePKI struct {
	rootKey, leafKey *ecdsa.PrivateKey
	root, leaf       *x509.Certificate
}

func newFakePKI(t testing.TB, rootName pkix.Name, fwid []byte) *fakePKI {
	t.Helper()
	p := &fakePKI{rootKey: newP384(t), leafKey: newP384(t)}
	p.root = makeCert(t, rootName, &p.rootKey.PublicKey, nil, p.rootKey, true)
	p.leaf = makeCert(t, pkix.Name{CommonName: "GH100 A01 GSP FMC LF"}, &p.leafKey.PublicKey, p.root, p.rootKey, false,
		nvFWIDExt(t, &p.rootKey.PublicKey, fwid))
	return p
}

func (p *fakePKI) chainPEM() []byte { return pemChain(p.leaf, p.root) }

func flipBit(b []byte, off int) []byte {
	c := append([]byte(nil), b...)
	c[off] ^= 0x01
	return c
}
