package attest

import (
	"runtime"
	"testing"
)

// allocBound is the most a parse may allocate for an input of n bytes: a
// constant for headers and error text plus a small multiple of n (opaque
// field slices). Anything sized from a declared length would exceed it.
func allocBound(n int) uint64 { return 1<<20 + 32*uint64(n) }

func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func FuzzParseReport(f *testing.F) {
	sample := sampleReport(f)
	f.Add(sample)
	f.Add(sample[:requestSize+responseHeaderSize])
	f.Add(sample[:len(sample)-SignatureSize-10])
	big := append([]byte(nil), sample...)
	big[requestSize+5], big[requestSize+6], big[requestSize+7] = 0xFF, 0xFF, 0xFF // 16 MiB record declared
	f.Add(big)
	f.Add([]byte{0x11, 0xE0, 0x01, 0xFF})
	golden := map[int]GoldenMeasurement{0: {Index: 0, Active: true, Size: 48, Values: [][]byte{make([]byte, 48)}}}

	f.Fuzz(func(t *testing.T, data []byte) {
		var rep *Report
		var err error
		if n := allocated(func() { rep, err = ParseReport(data) }); n > allocBound(len(data)) {
			t.Fatalf("parsing %d bytes allocated %d", len(data), n)
		}
		if err != nil {
			if rep != nil {
				t.Fatal("report with error")
			}
			return
		}
		if len(rep.Signed())+SignatureSize != len(data) || len(rep.Response.Signature) != SignatureSize {
			t.Fatalf("signed %d + signature %d != %d", len(rep.Signed()), len(rep.Response.Signature), len(data))
		}
		if len(rep.Response.Blocks) != int(rep.Response.NumBlocks) {
			t.Fatalf("%d blocks, %d declared", len(rep.Response.Blocks), rep.Response.NumBlocks)
		}
		_ = factsOf(rep)
		_, _ = compareRIM(golden, rep)
	})
}

func FuzzParseOpaqueData(f *testing.F) {
	rep, err := ParseReport(sampleReport(f))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(rep.Response.OpaqueRaw)
	f.Add([]byte{3, 0, 0xFF, 0xFF, 'x'})
	f.Add([]byte{3, 0, 1, 0, 'x', 3, 0, 1, 0, 'y'})
	f.Fuzz(func(t *testing.T, data []byte) {
		var fields OpaqueData
		var err error
		if n := allocated(func() { fields, err = ParseOpaqueData(data) }); n > allocBound(len(data)) {
			t.Fatalf("parsing %d bytes allocated %d", len(data), n)
		}
		if err != nil {
			return
		}
		total := 0
		for _, fl := range fields {
			total += opaqueHeaderSize + len(fl.Value)
		}
		if total != len(data) {
			t.Fatalf("fields cover %d of %d bytes", total, len(data))
		}
		_ = fields.VBIOSVersion()
		_ = fields.String(OpaqueDriverVersion)
	})
}

func FuzzVerifyRIM(f *testing.F) {
	f.Add(sampleRIMs(f)[rim5E01])
	f.Add([]byte(`<SoftwareIdentity xmlns="http://standards.iso.org/iso/19770/-2/2015/schema.xsd"><Meta colloquialVersion="1"/><ds:Signature xmlns:ds="http://www.w3.org/2000/09/xmldsig#"><ds:SignedInfo/><ds:SignatureValue/><ds:KeyInfo><ds:X509Data><ds:X509Certificate>AAAA</ds:X509Certificate></ds:X509Data></ds:KeyInfo></ds:Signature></SoftwareIdentity>`))
	f.Add([]byte(`<a xmlns:p="urn:p" p:x="1" y="2"><p:b xmlns="urn:d"><c xmlns=""/></p:b><!-- c --></a>`))
	f.Fuzz(func(t *testing.T, data []byte) {
		rim, err := VerifyRIM(data, testNow)
		if (rim == nil) == (err == nil) {
			t.Fatalf("rim %v, err %v", rim, err)
		}
		_, _ = peekRIM(data)
		if root, err := parseXMLTree(data); err == nil {
			if _, err := canonicalize(root, nil); err != nil {
				return
			}
		}
	})
}
