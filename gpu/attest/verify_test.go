package attest

import (
	"bytes"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"
)

// expect is what one check of a verdict must show.
type expect struct {
	outcome Outcome
	err     error  // sentinel the check's Err must wrap (nil: no Err expected)
	reason  string // substring of the reason
}

func checkVerdict(t *testing.T, v *Verdict, want map[string]expect) {
	t.Helper()
	for name, w := range want {
		c := v.Check(name)
		if c.Outcome != w.outcome {
			t.Errorf("%s: outcome %v (%s), want %v", name, c.Outcome, c.Reason, w.outcome)
			continue
		}
		if w.err != nil && !errors.Is(c.Err, w.err) {
			t.Errorf("%s: err %v, want %v", name, c.Err, w.err)
		}
		if w.err == nil && w.outcome == Pass && c.Err != nil {
			t.Errorf("%s: passed with err %v", name, c.Err)
		}
		if !strings.Contains(c.Reason, w.reason) {
			t.Errorf("%s: reason %q lacks %q", name, c.Reason, w.reason)
		}
	}
	if t.Failed() {
		for _, c := range v.Checks {
			t.Log(c)
		}
	}
}

var (
	pass    = expect{outcome: Pass}
	skipped = expect{outcome: NotChecked}
)

func fail(err error, reason string) expect { return expect{outcome: Fail, err: err, reason: reason} }

func TestVerifySample(t *testing.T) {
	report, chain, nonce := sampleReport(t), sampleChainPEM(t), sampleNonce(t)
	otherNonce := bytes.Repeat([]byte{0x42}, 32)
	certs := sampleCerts(t)
	rep, _ := ParseReport(report)
	blockOff := requestSize + responseHeaderSize + 4 + 3 // first byte of block 1's value
	respNonceOff := requestSize + responseHeaderSize + rep.Response.RecordLen
	driverOff := opaqueOffset(t, report, OpaqueDriverVersion) + 4

	// Evidence correctly signed by a key that chains to another root.
	fwid, _ := rep.Response.Opaque.Get(OpaqueFWID)
	fake := newFakePKI(t, pkix.Name{CommonName: "Throwaway Root CA"}, fwid)
	fakeReport := sampleReport(t)
	resign(t, fakeReport, fake.leafKey)
	// A root impersonating NVIDIA's by name.
	imp := newFakePKI(t, DeviceRoot().Subject, fwid)
	impReport := sampleReport(t)
	resign(t, impReport, imp.leafKey)
	// A leaf swapped for one naming the real issuer, signed by another key.
	swapKey := newP384(t)
	forger := newP384(t)
	swapLeaf := makeCert(t, certs[0].Subject, &swapKey.PublicKey,
		&x509.Certificate{RawSubject: certs[1].RawSubject, PublicKey: &forger.PublicKey}, forger, false)
	// FWID differs between certificate and report.
	otherFWID := newFakePKI(t, pkix.Name{CommonName: "Throwaway Root CA"}, bytes.Repeat([]byte{7}, 48))
	otherFWIDReport := sampleReport(t)
	resign(t, otherFWIDReport, otherFWID.leafKey)

	var der []byte
	for _, c := range certs {
		der = append(der, c.Raw...)
	}

	cases := []struct {
		name     string
		ev       Evidence
		now      time.Time // zero: testNow
		realNow  bool      // leave Options.Now zero (time.Now)
		want     map[string]expect
		verified bool
		summary  string
	}{
		{
			name:     "sample with its own nonce",
			ev:       Evidence{Report: report, CertChain: chain, Nonce: nonce},
			want:     map[string]expect{"parse": pass, "chain": pass, "signature": pass, "fwid": pass, "nonce": pass, "driver": skipped, "vbios": skipped, "uuid": skipped, "rim": {outcome: NotChecked, err: ErrRIMNoMatch, reason: "no reference manifest for VBIOS 96.00.9F.00.01"}, "revocation": {outcome: NotChecked, err: ErrRevocationNotChecked, reason: "offline: OCSP/CRL not consulted"}},
			verified: true,
			summary:  "genuine GH100 (chain to NVIDIA root valid, signature valid, FWID matches), nonce fresh, firmware not compared: no reference manifest for VBIOS 96.00.9F.00.01 (none supplied), revocation not checked: offline",
		},
		{
			name:     "sample at time.Now (zero Options.Now)",
			ev:       Evidence{Report: report, CertChain: chain, Nonce: nonce},
			realNow:  true,
			want:     map[string]expect{"chain": pass},
			verified: true,
		},
		{
			name:     "chain given as DER",
			ev:       Evidence{Report: report, CertChain: der, Nonce: nonce},
			want:     map[string]expect{"chain": pass, "signature": pass},
			verified: true,
		},
		{
			name:     "chain without its root",
			ev:       Evidence{Report: report, CertChain: pemChain(certs[:4]...), Nonce: nonce},
			want:     map[string]expect{"chain": pass},
			verified: true,
		},
		{
			name:    "different nonce: not fresh (a simulated GPU replaying the sample)",
			ev:      Evidence{Report: report, CertChain: chain, Nonce: otherNonce},
			want:    map[string]expect{"chain": pass, "signature": pass, "fwid": pass, "nonce": fail(ErrNonceMismatch, "not fresh")},
			summary: "genuine GH100 (chain to NVIDIA root valid, signature valid, FWID matches), nonce not fresh, firmware not compared: no reference manifest for VBIOS 96.00.9F.00.01 (none supplied), revocation not checked: offline",
		},
		{
			name: "no nonce",
			ev:   Evidence{Report: report, CertChain: chain},
			want: map[string]expect{"signature": pass, "nonce": {outcome: NotChecked, err: ErrNoNonce, reason: "no verifier nonce"}},
		},
		{
			name: "short nonce",
			ev:   Evidence{Report: report, CertChain: chain, Nonce: nonce[:16]},
			want: map[string]expect{"nonce": fail(ErrNonceLength, "not 32 bytes")},
		},
		{
			name: "bit flipped in request nonce",
			ev:   Evidence{Report: flipBit(report, 4), CertChain: chain, Nonce: nonce},
			want: map[string]expect{"parse": pass, "chain": pass, "signature": fail(ErrSignatureInvalid, "does not verify"), "nonce": fail(ErrNonceMismatch, "not fresh")},
		},
		{
			name: "bit flipped in request param2",
			ev:   Evidence{Report: flipBit(report, 3), CertChain: chain, Nonce: nonce},
			want: map[string]expect{"parse": pass, "signature": fail(ErrSignatureInvalid, "does not verify"), "nonce": pass},
		},
		{
			name: "bit flipped in a measurement block",
			ev:   Evidence{Report: flipBit(report, blockOff+47+55*10), CertChain: chain, Nonce: nonce},
			want: map[string]expect{"parse": pass, "chain": pass, "signature": fail(ErrSignatureInvalid, "does not verify"), "nonce": pass},
		},
		{
			name: "bit flipped in the responder nonce",
			ev:   Evidence{Report: flipBit(report, respNonceOff+5), CertChain: chain, Nonce: nonce},
			want: map[string]expect{"parse": pass, "signature": fail(ErrSignatureInvalid, "does not verify"), "nonce": pass},
		},
		{
			name: "bit flipped in opaque data (driver version)",
			ev:   Evidence{Report: flipBit(report, driverOff), CertChain: chain, Nonce: nonce, DriverVersion: "550.90.07"},
			want: map[string]expect{"parse": pass, "signature": fail(ErrSignatureInvalid, "does not verify"), "driver": fail(ErrDriverMismatch, "450.90.07")},
		},
		{
			name: "bit flipped in the signature",
			ev:   Evidence{Report: flipBit(report, len(report)-1), CertChain: chain, Nonce: nonce},
			want: map[string]expect{"parse": pass, "signature": fail(ErrSignatureInvalid, "does not verify")},
		},
		{
			name: "truncated chain: leaf, BROM, ICA",
			ev:   Evidence{Report: report, CertChain: pemChain(certs[:3]...), Nonce: nonce},
			want: map[string]expect{"chain": fail(ErrChainIncomplete, "NVIDIA GH100 Identity"), "signature": pass},
		},
		{
			name: "truncated chain: leaf only",
			ev:   Evidence{Report: report, CertChain: pemChain(certs[0]), Nonce: nonce},
			want: map[string]expect{"chain": fail(ErrChainIncomplete, "GH100 A01 GSP BROM"), "signature": pass},
		},
		{
			name: "truncated chain: middle certificate missing",
			ev:   Evidence{Report: report, CertChain: pemChain(certs[0], certs[2], certs[3], certs[4]), Nonce: nonce},
			want: map[string]expect{"chain": fail(ErrChainIncomplete, "missing")},
		},
		{
			name: "reordered chain",
			ev:   Evidence{Report: report, CertChain: pemChain(certs[0], certs[2], certs[1], certs[3], certs[4]), Nonce: nonce},
			want: map[string]expect{"chain": fail(ErrChainOrder, "not by the next one"), "signature": pass, "fwid": pass},
		},
		{
			name: "reversed chain (root first)",
			ev:   Evidence{Report: report, CertChain: pemChain(certs[4], certs[3], certs[2], certs[1], certs[0]), Nonce: nonce},
			want: map[string]expect{"chain": fail(ErrChainOrder, "pinned root")},
		},
		{
			name: "chain to another root (correctly signed evidence)",
			ev:   Evidence{Report: fakeReport, CertChain: fake.chainPEM(), Nonce: nonce},
			want: map[string]expect{"chain": fail(ErrChainUntrustedRoot, "Throwaway Root CA"), "signature": pass, "fwid": pass, "nonce": pass},
		},
		{
			name: "chain to a root impersonating NVIDIA's name",
			ev:   Evidence{Report: impReport, CertChain: imp.chainPEM(), Nonce: nonce},
			want: map[string]expect{"chain": fail(ErrChainUntrustedRoot, "is not the pinned"), "signature": pass},
		},
		{
			name: "swapped leaf certificate",
			ev:   Evidence{Report: report, CertChain: pemChain(append([]*x509.Certificate{swapLeaf}, certs[1:]...)...), Nonce: nonce},
			want: map[string]expect{"chain": fail(ErrChainBadSignature, "certificate 0"), "signature": fail(ErrSignatureInvalid, "does not verify"), "fwid": fail(ErrFWIDMissing, "no extension 2.23.133.5.4.1"), "nonce": pass},
		},
		{
			name: "FWID in certificate differs from the report",
			ev:   Evidence{Report: otherFWIDReport, CertChain: otherFWID.chainPEM(), Nonce: nonce},
			want: map[string]expect{"signature": pass, "fwid": fail(ErrFWIDMismatch, "f5c384ae")},
		},
		{
			name: "chain not yet valid",
			ev:   Evidence{Report: report, CertChain: chain, Nonce: nonce},
			now:  time.Date(2019, 1, 1, 0, 0, 0, 0, time.UTC),
			want: map[string]expect{"chain": fail(ErrChainInvalid, "expired or is not yet valid"), "signature": pass},
		},
		{
			name: "chain is not PEM",
			ev:   Evidence{Report: report, CertChain: []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), Nonce: nonce},
			want: map[string]expect{"chain": fail(ErrChainPEM, "certificate 0"), "signature": {outcome: NotChecked, err: ErrChainPEM, reason: "no leaf"}},
		},
		{
			name: "text between PEM blocks",
			ev:   Evidence{Report: report, CertChain: append(append(pemChain(certs[0]), "junk\n"...), pemChain(certs[1:]...)...), Nonce: nonce},
			want: map[string]expect{"chain": fail(ErrChainPEM, "not PEM")},
		},
		{
			name: "PEM block of another type",
			ev:   Evidence{Report: report, CertChain: []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), Nonce: nonce},
			want: map[string]expect{"chain": fail(ErrChainPEM, "PRIVATE KEY")},
		},
		{
			name: "no chain",
			ev:   Evidence{Report: report, Nonce: nonce},
			want: map[string]expect{"chain": fail(ErrChainEmpty, "empty"), "signature": skipped, "fwid": skipped},
		},
		{
			name:    "report shorter than its declared lengths",
			ev:      Evidence{Report: report[:len(report)-200], CertChain: chain, Nonce: nonce},
			want:    map[string]expect{"parse": fail(ErrTruncated, "shorter than its declared lengths"), "chain": pass, "signature": {outcome: NotChecked, err: ErrTruncated}, "fwid": skipped, "nonce": skipped, "rim": skipped},
			summary: "not verified: report malformed",
		},
		{
			name: "opaque data with lying lengths",
			ev: Evidence{Report: func() []byte {
				b := sampleReport(t)
				off := opaqueOffset(t, b, OpaqueChipSKU)
				binary.LittleEndian.PutUint16(b[off+2:], 500)
				return b
			}(), CertChain: chain, Nonce: nonce},
			want: map[string]expect{"parse": fail(ErrOpaqueLength, "declares 500 bytes"), "signature": skipped},
		},
		{
			name:     "claims as in the report",
			ev:       Evidence{Report: report, CertChain: chain, Nonce: nonce, DriverVersion: "550.90.07", VBIOSVersion: "96.00.9f.00.01"},
			want:     map[string]expect{"driver": pass, "vbios": pass},
			verified: true,
			summary:  "nonce fresh, driver as offered, vbios as offered, firmware not compared",
		},
		{
			name:    "wrong driver version claimed",
			ev:      Evidence{Report: report, CertChain: chain, Nonce: nonce, DriverVersion: "555.42.02"},
			want:    map[string]expect{"chain": pass, "signature": pass, "nonce": pass, "driver": fail(ErrDriverMismatch, `offer claims "555.42.02", report says "550.90.07"`)},
			summary: "driver NOT as offered",
		},
		{
			name: "wrong VBIOS version claimed",
			ev:   Evidence{Report: report, CertChain: chain, Nonce: nonce, VBIOSVersion: "96.00.5E.00.01"},
			want: map[string]expect{"vbios": fail(ErrVBIOSMismatch, "96.00.9F.00.01")},
		},
		{
			name:     "GPU UUID claimed: not bound",
			ev:       Evidence{Report: report, CertChain: chain, Nonce: nonce, GPUUUID: "GPU-12345678-1234-1234-1234-123456789abc"},
			want:     map[string]expect{"uuid": {outcome: NotChecked, err: ErrUUIDNotBound, reason: "NVIDIA:GH100:48B02D92494BADF4"}},
			verified: true,
			summary:  "GPU UUID not bound",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			now := testNow
			switch {
			case tc.realNow:
				now = time.Time{}
			case !tc.now.IsZero():
				now = tc.now
			}
			v := Verify(tc.ev, Options{Now: now})
			checkVerdict(t, v, tc.want)
			if got := v.Verified(); got != tc.verified {
				t.Errorf("Verified() = %v, want %v; %s", got, tc.verified, v.Summary())
			}
			if !strings.Contains(v.Summary(), tc.summary) {
				t.Errorf("summary %q lacks %q", v.Summary(), tc.summary)
			}
			if (v.Err() == nil) != (tc.verified || allNotFailed(v)) {
				t.Errorf("Err() = %v with verified=%v", v.Err(), tc.verified)
			}
			if len(v.Checks) != 10 {
				t.Errorf("%d checks, want 10", len(v.Checks))
			}
		})
	}
}

func allNotFailed(v *Verdict) bool {
	for _, c := range v.Checks {
		if c.Outcome == Fail {
			return false
		}
	}
	return true
}

// Failures must never be masked: every failing check keeps Verified false,
// and Summary never calls a failing chain genuine.
func TestVerifiedRequiresAllFive(t *testing.T) {
	report, chain, nonce := sampleReport(t), sampleChainPEM(t), sampleNonce(t)
	v := Verify(Evidence{Report: report, CertChain: chain, Nonce: nonce}, Options{Now: testNow})
	if !v.Verified() {
		t.Fatal(v.Summary())
	}
	for i := range v.Checks {
		for _, o := range []Outcome{Fail, NotChecked} {
			w := *v
			w.Checks = append([]Check(nil), v.Checks...)
			w.Checks[i].Outcome = o
			name := w.Checks[i].Name
			essential := name == "parse" || name == "chain" || name == "signature" || name == "fwid" || name == "nonce"
			if want := !(o == Fail || essential); w.Verified() != want {
				t.Errorf("%s %v: Verified() = %v, want %v", name, o, w.Verified(), want)
			}
		}
	}
	bad := Verify(Evidence{Report: report, CertChain: pemChain(sampleCerts(t)[0]), Nonce: nonce}, Options{Now: testNow})
	if s := bad.Summary(); !strings.HasPrefix(s, "NOT proven genuine") {
		t.Errorf("summary %q", s)
	}
	if !errors.Is(bad.Err(), ErrChainIncomplete) {
		t.Errorf("Err() = %v", bad.Err())
	}
}

func TestCertFWIDLayouts(t *testing.T) {
	fwid := bytes.Repeat([]byte{0xAB}, 48)
	key := newP384(t)
	mk := func(exts ...pkix.Extension) *x509.Certificate {
		return makeCert(t, pkix.Name{CommonName: "leaf"}, &key.PublicKey, nil, key, false, exts...)
	}
	raw := func(v any, params string) []byte {
		b, err := asn1.MarshalWithParams(v, params)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// TCG DiceTcbInfo: SEQUENCE { [0] vendor, [6] fwids SEQUENCE OF FWID }.
	type tcbOut struct {
		Vendor string    `asn1:"optional,tag:0,utf8"`
		FWIDs  []fwidASN `asn1:"optional,tag:6"`
	}
	tcg := raw(tcbOut{Vendor: "NVIDIA", FWIDs: []fwidASN{{asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 1}, fwid[:32]}, {oidSHA384, fwid}}}, "")
	tcgNo384 := raw(tcbOut{FWIDs: []fwidASN{{asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 1}, fwid[:32]}}}, "")
	short := raw(compositeDeviceID{Version: 1, DeviceKey: asn1.RawValue{FullBytes: raw(asn1.NullRawValue, "")}, FWID: fwidASN{oidSHA384, fwid[:20]}}, "")

	for _, tc := range []struct {
		name string
		cert *x509.Certificate
		want error
	}{
		{"NVIDIA layout", mk(nvFWIDExt(t, &key.PublicKey, fwid)), nil},
		{"TCG DiceTcbInfo", mk(pkix.Extension{Id: oidDiceTcbInfo, Value: tcg}), nil},
		{"TCG without SHA-384", mk(pkix.Extension{Id: oidDiceTcbInfo, Value: tcgNo384}), ErrFWIDMissing},
		{"no extension", mk(), ErrFWIDMissing},
		{"garbage", mk(pkix.Extension{Id: oidDiceTcbInfo, Value: []byte{0x30, 0x03, 0x01}}), ErrFWIDMalformed},
		{"short digest", mk(pkix.Extension{Id: oidDiceTcbInfo, Value: short}), ErrFWIDMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CertFWID(tc.cert)
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			if err == nil && !bytes.Equal(got, fwid) {
				t.Fatalf("fwid %x", got)
			}
		})
	}
	// The sample leaf.
	got, err := CertFWID(sampleCerts(t)[0])
	if err != nil || len(got) != 48 {
		t.Fatalf("sample: %x %v", got, err)
	}
}

func TestEmbeddedRoots(t *testing.T) {
	if got := DeviceRoot().Subject.CommonName; got != "NVIDIA Device Identity CA" {
		t.Errorf("device root %q", got)
	}
	if got := RIMRoot().Subject.CommonName; got != "NVIDIA CoRIM signing Root CA" {
		t.Errorf("RIM root %q", got)
	}
	// The sample chain's last certificate is the pinned device root.
	certs := sampleCerts(t)
	if !bytes.Equal(certs[len(certs)-1].Raw, DeviceRoot().Raw) {
		t.Error("sample chain does not end at the embedded device root")
	}
}

func TestVerifyNeverPanicsOnGarbage(t *testing.T) {
	for _, ev := range []Evidence{
		{},
		{Report: []byte{0x11}},
		{Report: bytes.Repeat([]byte{0xFF}, 5000), CertChain: []byte("garbage")},
		{Report: sampleReport(t), CertChain: sampleChainPEM(t), Nonce: sampleNonce(t)[:31]},
	} {
		v := Verify(ev, Options{RIMs: [][]byte{nil, []byte("<x/>"), []byte("<<<")}})
		if v == nil || v.Verified() || v.Summary() == "" {
			t.Errorf("unexpected verdict %+v", v)
		}
	}
}
