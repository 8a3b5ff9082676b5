package attest

import (
	"crypto/ecdsa"
	"crypto/sha512"
	"math/big"
	"testing"
)

// BenchmarkVerify is a full offline verification of NVIDIA's sample: report
// parse, PEM parse of 5 certificates, path validation to the pinned root,
// the report's ECDSA P-384 signature, FWID and nonce.
func BenchmarkVerify(b *testing.B) {
	ev := Evidence{Report: sampleReport(b), CertChain: sampleChainPEM(b), Nonce: sampleNonce(b), DriverVersion: "550.90.07"}
	opts := Options{Now: testNow}
	if v := Verify(ev, opts); !v.Verified() {
		b.Fatal(v.Summary())
	}
	b.ReportAllocs()
	for b.Loop() {
		if v := Verify(ev, opts); len(v.Checks) == 0 {
			b.Fatal("no checks")
		}
	}
}

// BenchmarkECDSAP384Verify is the baseline: one ecdsa.Verify of the sample
// report's signature, hash precomputed.
func BenchmarkECDSAP384Verify(b *testing.B) {
	rep, err := ParseReport(sampleReport(b))
	if err != nil {
		b.Fatal(err)
	}
	pub, err := leafP384(sampleCerts(b)[0])
	if err != nil {
		b.Fatal(err)
	}
	h := sha512.Sum384(rep.Signed())
	sig := rep.Response.Signature
	r, s := new(big.Int).SetBytes(sig[:48]), new(big.Int).SetBytes(sig[48:])
	if !ecdsa.Verify(pub, h[:], r, s) {
		b.Fatal("sample signature does not verify")
	}
	b.ReportAllocs()
	for b.Loop() {
		ecdsa.Verify(pub, h[:], r, s)
	}
}

func BenchmarkParseReport(b *testing.B) {
	raw := sampleReport(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseReport(raw); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyRIM is one signed SWID tag: canonicalization twice, a
// 4-certificate chain and the XML signature.
func BenchmarkVerifyRIM(b *testing.B) {
	doc := sampleRIMs(b)[rim5E01]
	b.ReportAllocs()
	for b.Loop() {
		if _, err := VerifyRIM(doc, testNow); err != nil {
			b.Fatal(err)
		}
	}
}
