package attest

import (
	"bytes"
	"crypto/x509/pkix"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"
)

const rim5E01 = "1010_0200_882_96005E0001_PROD.swidtag"

// After the RIM signers expired (L4 2025-06-22, L3 2026-11-11).
var afterRIMExpiry = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func TestVerifyRIMSamples(t *testing.T) {
	for name, doc := range sampleRIMs(t) {
		t.Run(name, func(t *testing.T) {
			rim, err := VerifyRIM(doc, testNow)
			if err != nil {
				t.Fatal(err)
			}
			// File names are project_projectSKU_chipSKU_VBIOS.
			wantVersion := strings.Split(strings.TrimSuffix(name, "_PROD.swidtag"), "_")[3]
			if got := strings.ReplaceAll(rim.ColloquialVersion, ".", ""); got != wantVersion {
				t.Errorf("colloquialVersion %q, file says %s", rim.ColloquialVersion, wantVersion)
			}
			if rim.Product != "GH100" || rim.Name != "GH100" || len(rim.TagID) != 96 {
				t.Errorf("product %q name %q tagId %q", rim.Product, rim.Name, rim.TagID)
			}
			if len(rim.Measurements) != 64 {
				t.Errorf("%d measurements", len(rim.Measurements))
			}
			active := 0
			for i, g := range rim.Measurements {
				if g.Index != i || g.Size != 48 || len(g.Values) == 0 || len(g.Values[0]) != 48 {
					t.Errorf("measurement %d: %+v", i, g)
				}
				if g.Active {
					active++
				}
			}
			if active != 12 {
				t.Errorf("%d active measurements, want 12", active)
			}
			if cn := rim.Signer.Subject.CommonName; cn != "HCC RIM L4 Signer" {
				t.Errorf("signer %q", cn)
			}
		})
	}
}

// Serializations that differ only in what Canonical XML erases must still
// verify: this is what shows the canonicalizer is real, not a byte compare.
func TestVerifyRIMCanonicalEquivalents(t *testing.T) {
	doc := sampleRIMs(t)[rim5E01]
	resource := regexp.MustCompile(`<ns0:Resource type="Measurement" index="7" active="False" alternatives="1" (ns2:Hash0="[0-9a-f]+") name="Measurement_7" size="48"/>`)
	if !resource.Match(doc) {
		t.Fatal("fixture changed")
	}
	for _, tc := range []struct {
		name string
		edit func(string) string
	}{
		{"as published", func(s string) string { return s }},
		{"XML declaration and comments", func(s string) string {
			s = strings.Replace(s, "<ns0:Payload", "<!-- a comment --><ns0:Payload", 1)
			return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!-- leading comment -->\n" + s + "\n<!-- trailing -->\n"
		}},
		{"attributes reordered, single quotes, empty-element tag expanded", func(s string) string {
			return resource.ReplaceAllString(s, `<ns0:Resource size='48' name='Measurement_7' $1 alternatives='1' active='False' index='7' type='Measurement'></ns0:Resource>`)
		}},
		{"redundant namespace redeclaration", func(s string) string {
			return strings.Replace(s, `<ns0:Entity name=`, `<ns0:Entity xmlns:ns0="http://standards.iso.org/iso/19770/-2/2015/schema.xsd" name=`, 1)
		}},
		{"character references", func(s string) string {
			return strings.Replace(s, `name="NVIDIA Corporation" role=`, `name="&#x4E;VIDIA Corporation" role=`, 1)
		}},
		{"CRLF line endings", func(s string) string { return strings.ReplaceAll(s, "\n", "\r\n") }},
		{"whitespace inside tags", func(s string) string {
			return strings.Replace(s, `<ns0:Entity name="NVIDIA Corporation" role="softwareCreator tagCreator"/>`,
				`<ns0:Entity   name = "NVIDIA Corporation"
			role="softwareCreator tagCreator"   />`, 1)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			edited := tc.edit(string(doc))
			if tc.name != "as published" && edited == string(doc) {
				t.Fatal("edit did not apply")
			}
			if _, err := VerifyRIM([]byte(edited), testNow); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestVerifyRIMErrors(t *testing.T) {
	doc := string(sampleRIMs(t)[rim5E01])
	replace := func(old, new string) []byte {
		if !strings.Contains(doc, old) {
			t.Fatalf("fixture lacks %q", old)
		}
		return []byte(strings.Replace(doc, old, new, 1))
	}
	certBlocks := regexp.MustCompile(`(?s)<ds:X509Certificate>.*?</ds:X509Certificate>`).FindAllString(doc, -1)
	if len(certBlocks) != 4 {
		t.Fatalf("%d certificates in KeyInfo", len(certBlocks))
	}
	sigValue := regexp.MustCompile(`<ds:SignatureValue>([^<]*)</ds:SignatureValue>`).FindStringSubmatch(doc)[1]
	digest := regexp.MustCompile(`<ds:DigestValue>([^<]*)</ds:DigestValue>`).FindStringSubmatch(doc)[1]

	for _, tc := range []struct {
		name string
		doc  []byte
		now  time.Time
		want []error
	}{
		{"golden hash edited", replace(`ns2:Hash0="c3f65ef79a19`, `ns2:Hash0="d3f65ef79a19`), testNow, []error{ErrRIMDigest}},
		{"inactive measurement activated", replace(`index="7" active="False"`, `index="7" active="True"`), testNow, []error{ErrRIMDigest}},
		{"version edited", replace(`colloquialVersion="96.00.5E.00.01"`, `colloquialVersion="96.00.9F.00.01"`), testNow, []error{ErrRIMDigest}},
		{"element added", replace(`</ns0:Payload>`, `<ns0:Resource type="Measurement" index="64" active="True" alternatives="1" ns2:Hash0="00" name="x" size="1"/></ns0:Payload>`), testNow, []error{ErrRIMDigest}},
		{"significant whitespace added", replace("</ns0:Payload>", " </ns0:Payload>"), testNow, []error{ErrRIMDigest}},
		{"DigestValue edited", replace(digest, strings.Replace(digest, "D3Bc", "E3Bc", 1)), testNow, []error{ErrRIMSignature}},
		{"SignatureValue edited", replace(sigValue, strings.Replace(sigValue, "s5JY", "t5JY", 1)), testNow, []error{ErrRIMSignature}},
		{"SignatureValue truncated", replace(sigValue, sigValue[:64]), testNow, []error{ErrRIMSignature}},
		{"signer expired", []byte(doc), afterRIMExpiry, []error{ErrRIMChain, ErrChainInvalid}},
		{"KeyInfo without intermediates", replace(certBlocks[1]+certBlocks[2]+certBlocks[3], ""), testNow, []error{ErrRIMChain, ErrChainIncomplete}},
		{"KeyInfo reordered", replace(certBlocks[0]+certBlocks[1], certBlocks[1]+certBlocks[0]), testNow, []error{ErrRIMChain, ErrChainOrder}},
		{"no Signature", []byte(regexp.MustCompile(`(?s)<ds:Signature .*</ds:Signature>`).ReplaceAllString(doc, "")), testNow, []error{ErrRIMMalformed}},
		{"two Signatures", replace("</SoftwareIdentity>", regexp.MustCompile(`(?s)<ds:Signature .*</ds:Signature>`).FindString(doc)+"</SoftwareIdentity>"), testNow, []error{ErrRIMMalformed}},
		{"exclusive c14n named", replace(`<ds:CanonicalizationMethod Algorithm="http://www.w3.org/2006/12/xml-c14n11"/>`,
			`<ds:CanonicalizationMethod Algorithm="http://www.w3.org/2001/10/xml-exc-c14n#"/>`), testNow, []error{ErrRIMUnsupported}},
		{"DOCTYPE", []byte(`<!DOCTYPE SoftwareIdentity [<!ENTITY x "y">]>` + doc), testNow, []error{ErrRIMUnsupported}},
		{"xml:lang attribute", replace(`<ns0:Payload `, `<ns0:Payload xml:lang="en" `), testNow, []error{ErrRIMUnsupported}},
		{"newline in attribute value", replace(`role="softwareCreator tagCreator"`, "role=\"softwareCreator\ntagCreator\""), testNow, []error{ErrRIMUnsupported}},
		{"not XML", []byte("<<<"), testNow, []error{ErrRIMMalformed}},
		{"not a SWID tag", []byte(`<a xmlns="urn:x"/>`), testNow, []error{ErrRIMMalformed}},
		{"unclosed", []byte(doc[:len(doc)-30]), testNow, []error{ErrRIMMalformed}},
		{"too large", bytes.Repeat([]byte(" "), maxRIMBytes+1), testNow, []error{ErrRIMMalformed}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rim, err := VerifyRIM(tc.doc, tc.now)
			if rim != nil {
				t.Error("manifest returned with an error")
			}
			for _, w := range tc.want {
				if !errors.Is(err, w) {
					t.Errorf("got %v, want %v", err, w)
				}
			}
		})
	}
}

// blockValueOffset is where measurement index idx (0-based) begins in the
// sample layout (every block 4+3+48 bytes).
func blockValueOffset(idx int) int {
	return requestSize + responseHeaderSize + idx*(blockHeaderSize+dmtfHeaderSize+48) + blockHeaderSize + dmtfHeaderSize
}

// reportFor5E01 is the sample report rewritten to claim VBIOS 96.00.5E.00.01
// and, when golden, to carry that RIM's first alternative at each active
// index; it is re-signed by a throwaway PKI (the GPU's key is not ours).
func reportFor5E01(t *testing.T, golden bool) (*fakePKI, []byte) {
	t.Helper()
	rep := sampleReport(t)
	setOpaque(t, rep, OpaqueVBIOSVersion, []byte{0x00, 0x5e, 0x00, 0x96, 0x01, 0x00, 0x00, 0x00})
	if golden {
		rim, err := VerifyRIM(sampleRIMs(t)[rim5E01], testNow)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range rim.Measurements {
			if g.Active {
				copy(rep[blockValueOffset(g.Index):], g.Values[len(g.Values)-1])
			}
		}
	}
	p, _ := ParseReport(rep)
	fwid, _ := p.Response.Opaque.Get(OpaqueFWID)
	pki := newFakePKI(t, pkix.Name{CommonName: "Throwaway Root CA"}, fwid)
	resign(t, rep, pki.leafKey)
	return pki, rep
}

func TestVerifyWithRIMs(t *testing.T) {
	all := sampleRIMs(t)
	var rims [][]byte
	for _, d := range all {
		rims = append(rims, d)
	}
	report, chain, nonce := sampleReport(t), sampleChainPEM(t), sampleNonce(t)
	goldenPKI, goldenReport := reportFor5E01(t, true)
	plainPKI, plainReport := reportFor5E01(t, false)
	tampered := bytes.Replace(all[rim5E01], []byte(`ns2:Hash0="c3f65ef79a19`), []byte(`ns2:Hash0="d3f65ef79a19`), 1)
	exc := bytes.Replace(all[rim5E01], []byte(`<ds:CanonicalizationMethod Algorithm="http://www.w3.org/2006/12/xml-c14n11"/>`),
		[]byte(`<ds:CanonicalizationMethod Algorithm="http://www.w3.org/2001/10/xml-exc-c14n#"/>`), 1)

	for _, tc := range []struct {
		name    string
		ev      Evidence
		rims    [][]byte
		now     time.Time
		want    expect
		summary string
	}{
		{"sample, no manifests", Evidence{Report: report, CertChain: chain, Nonce: nonce}, nil, testNow,
			expect{NotChecked, ErrRIMNoMatch, "no reference manifest for VBIOS 96.00.9F.00.01 (none supplied)"},
			"firmware not compared: no reference manifest for VBIOS 96.00.9F.00.01"},
		{"sample, the four published manifests (other VBIOS versions)", Evidence{Report: report, CertChain: chain, Nonce: nonce}, rims, testNow,
			expect{NotChecked, ErrRIMNoMatch, "no reference manifest for VBIOS 96.00.9F.00.01 or driver 550.90.07 among 4 supplied"}, ""},
		{"unreadable manifests are noted, not matched", Evidence{Report: report, CertChain: chain, Nonce: nonce}, [][]byte{[]byte("junk")}, testNow,
			expect{NotChecked, ErrRIMNoMatch, "RIM 0 unreadable"}, ""},
		{"report for 96.00.5E.00.01 with golden measurements", Evidence{Report: goldenReport, CertChain: goldenPKI.chainPEM(), Nonce: nonce}, rims, testNow,
			expect{Pass, nil, "VBIOS 96.00.5E.00.01 (signed, chain to NVIDIA RIM root valid): 12 active measurements match; no driver manifest"},
			"firmware matches reference manifest: VBIOS 96.00.5E.00.01"},
		{"report for 96.00.5E.00.01 with the sample's measurements", Evidence{Report: plainReport, CertChain: plainPKI.chainPEM(), Nonce: nonce}, rims, testNow,
			expect{Fail, ErrRIMMismatch, "active indices differ: 1, 2,"}, "firmware check FAILED"},
		{"matching manifest, signer expired", Evidence{Report: goldenReport, CertChain: goldenPKI.chainPEM(), Nonce: nonce}, rims, afterRIMExpiry,
			expect{Fail, ErrRIMChain, "VBIOS RIM 96.00.5E.00.01"}, ""},
		{"matching manifest tampered", Evidence{Report: goldenReport, CertChain: goldenPKI.chainPEM(), Nonce: nonce}, [][]byte{tampered}, testNow,
			expect{Fail, ErrRIMDigest, "digest mismatch"}, ""},
		{"matching manifest names unsupported c14n", Evidence{Report: goldenReport, CertChain: goldenPKI.chainPEM(), Nonce: nonce}, [][]byte{exc}, testNow,
			expect{NotChecked, ErrRIMUnsupported, "signature not checked"}, "firmware not compared"},
		{"same manifest twice", Evidence{Report: goldenReport, CertChain: goldenPKI.chainPEM(), Nonce: nonce}, [][]byte{all[rim5E01], all[rim5E01]}, testNow,
			expect{Fail, ErrRIMConflict, "index 0"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Verify(tc.ev, Options{Now: tc.now, RIMs: tc.rims})
			checkVerdict(t, v, map[string]expect{"rim": tc.want})
			if !strings.Contains(v.Summary(), tc.summary) {
				t.Errorf("summary %q lacks %q", v.Summary(), tc.summary)
			}
			if tc.want.outcome == Fail && v.Verified() {
				t.Error("verified despite a failed rim check")
			}
		})
	}
}

func TestCompareRIMNVDEC(t *testing.T) {
	raw := sampleReport(t)
	rep, err := ParseReport(raw)
	if err != nil {
		t.Fatal(err)
	}
	golden := map[int]GoldenMeasurement{}
	for i := range 64 {
		blk, _ := rep.Block(uint8(i + 1))
		golden[i] = GoldenMeasurement{Index: i, Active: true, Size: 48, Values: [][]byte{blk.Value}}
	}
	golden[rimIndexNVDEC0] = GoldenMeasurement{Index: rimIndexNVDEC0, Active: true, Size: 48, Values: [][]byte{make([]byte, 48)}}
	// The sample has NVDEC0 disabled (0x55): index 35 is skipped.
	if n, err := compareRIM(golden, rep); err != nil || n != 63 {
		t.Fatalf("NVDEC0 disabled: compared %d, %v", n, err)
	}
	setOpaque(t, raw, OpaqueNVDEC0Status, []byte{0xAA})
	rep, _ = ParseReport(raw)
	if _, err := compareRIM(golden, rep); !errors.Is(err, ErrRIMMismatch) || !strings.Contains(err.Error(), ": 35") {
		t.Fatalf("NVDEC0 enabled: %v", err)
	}
	// A golden index the report lacks.
	golden[100] = GoldenMeasurement{Index: 100, Active: true, Size: 48, Values: [][]byte{make([]byte, 48)}}
	if _, err := compareRIM(golden, rep); !errors.Is(err, ErrRIMMismatch) || !strings.Contains(err.Error(), "100 (no block)") {
		t.Fatalf("missing block: %v", err)
	}
}
