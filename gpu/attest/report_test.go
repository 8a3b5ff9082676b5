package attest

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"testing"
)

func TestParseSample(t *testing.T) {
	raw := sampleReport(t)
	if len(raw) != 4117 {
		t.Fatalf("sample is %d bytes, want 4117", len(raw))
	}
	rep, err := ParseReport(raw)
	if err != nil {
		t.Fatal(err)
	}
	q, p := rep.Request, rep.Response
	if q.Version != 0x11 || q.Code != 0xE0 || q.Param1 != 0x01 || q.Param2 != 0xFF || q.SlotID != 0 {
		t.Errorf("request header %+v", q)
	}
	if got := hex.EncodeToString(q.Nonce[:]); got != "931d8dd0add203ac3d8b4fbde75e115278eefcdceac5b87671a748f32364dfcb" {
		t.Errorf("request nonce %s", got)
	}
	if p.Version != 0x11 || p.Code != 0x60 || p.NumBlocks != 64 || p.RecordLen != 64*55 || len(p.Blocks) != 64 {
		t.Errorf("response header: version %#x code %#x blocks %d record %d", p.Version, p.Code, p.NumBlocks, p.RecordLen)
	}
	for i, b := range p.Blocks {
		if int(b.Index) != i+1 || b.Spec != 1 || b.ValueType != 1 || len(b.Value) != 48 {
			t.Errorf("block %d: index %d spec %d type %d len %d", i, b.Index, b.Spec, b.ValueType, len(b.Value))
		}
	}
	if len(p.OpaqueRaw) != 422 || len(p.Signature) != 96 || len(rep.Signed()) != 4117-96 {
		t.Errorf("opaque %d, signature %d, signed %d", len(p.OpaqueRaw), len(p.Signature), len(rep.Signed()))
	}
	f := factsOf(rep)
	want := Facts{
		SPDMVersion: "1.1", DriverVersion: "550.90.07", VBIOSVersion: "96.00.9F.00.01",
		ChipSKU: "882", ChipSKUMod: "0", Project: "1010", ProjectSKU: "0200", BoardID: 0x3b1,
		FWID:              "f5c384aebb579217a2c66b17ed0f28e6a9b8d639041acd7b4721cec004f7275494ba94bb5cdfdb3055ee051762b1f75d",
		MeasurementBlocks: 64, RequestNonce: hex.EncodeToString(q.Nonce[:]),
	}
	if f != want {
		t.Errorf("facts\n got %+v\nwant %+v", f, want)
	}
	var types []uint16
	for _, fld := range p.Opaque {
		types = append(types, fld.Type)
	}
	if got := len(types); got != 14 {
		t.Errorf("opaque types %v", types)
	}
	if v, _ := p.Opaque.Get(OpaqueMeasurementCount); len(v) != 256 {
		t.Errorf("measurement count field %d bytes", len(v))
	}
}

func TestVBIOSVersionFormat(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
	}{
		{"009f009601000000", "96.00.9F.00.01"},
		{"005e009601000000", "96.00.5E.00.01"}, // the 96.00.5E.00.01 RIM's encoding
		{"0000000000000000", "00.00.00.00.00"},
		{"00", ""},
	} {
		v, _ := hex.DecodeString(tc.in)
		o := OpaqueData{{Type: OpaqueVBIOSVersion, Value: v}}
		if got := o.VBIOSVersion(); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestParseReportErrors(t *testing.T) {
	base := sampleReport(t)
	rep, _ := ParseReport(base)
	recordEnd := requestSize + responseHeaderSize + rep.Response.RecordLen
	opaqueStart := recordEnd + NonceSize + 2

	mut := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), base...)) }
	put24 := func(b []byte, off, v int) { b[off], b[off+1], b[off+2] = byte(v), byte(v>>8), byte(v>>16) }

	cases := []struct {
		name   string
		report []byte
		want   error
	}{
		{"empty", nil, ErrTruncated},
		{"request only", base[:requestSize], ErrTruncated},
		{"cut in response header", base[:requestSize+5], ErrTruncated},
		{"cut in measurement record", base[:requestSize+responseHeaderSize+100], ErrTruncated},
		{"cut in responder nonce", base[:recordEnd+10], ErrTruncated},
		{"cut in opaque length", base[:recordEnd+NonceSize+1], ErrTruncated},
		{"cut in opaque data", base[:opaqueStart+200], ErrTruncated},
		{"cut in signature", base[:len(base)-1], ErrTruncated},
		{"record length beyond report", mut(func(b []byte) []byte { put24(b, requestSize+5, 0xFFFFFF); return b }), ErrTruncated},
		{"opaque length beyond report", mut(func(b []byte) []byte {
			binary.LittleEndian.PutUint16(b[recordEnd+NonceSize:], 0xFFFF)
			return b
		}), ErrTruncated},
		{"trailing byte", append(append([]byte(nil), base...), 0), ErrTrailingData},
		{"opaque length short: signature misplaced", mut(func(b []byte) []byte {
			binary.LittleEndian.PutUint16(b[recordEnd+NonceSize:], 421)
			return b
		}), ErrOpaqueLength}, // the shortened opaque data now cuts its last TLV
		{"request version 1.0", mut(func(b []byte) []byte { b[0] = 0x10; return b }), ErrUnsupportedVersion},
		{"request code", mut(func(b []byte) []byte { b[1] = 0xE1; return b }), ErrBadRequest},
		{"no signature requested", mut(func(b []byte) []byte { b[2] = 0; return b }), ErrBadRequest},
		{"response code", mut(func(b []byte) []byte { b[requestSize+1] = 0x7F; return b }), ErrBadResponse},
		{"response version", mut(func(b []byte) []byte { b[requestSize] = 0x12; return b }), ErrBadResponse},
		{"more blocks than record holds", mut(func(b []byte) []byte { b[requestSize+4] = 65; return b }), ErrMeasurementBlock},
		{"fewer blocks than record holds", mut(func(b []byte) []byte { b[requestSize+4] = 63; return b }), ErrMeasurementBlock},
		{"block size lies", mut(func(b []byte) []byte { b[requestSize+responseHeaderSize+2] = 0xFF; return b }), ErrMeasurementBlock},
		{"DMTF value size lies", mut(func(b []byte) []byte { b[requestSize+responseHeaderSize+5] = 47; return b }), ErrMeasurementBlock},
		{"not DMTF", mut(func(b []byte) []byte { b[requestSize+responseHeaderSize+1] = 2; return b }), ErrMeasurementBlock},
		{"duplicate block index", mut(func(b []byte) []byte { b[requestSize+responseHeaderSize+55] = 1; return b }), ErrMeasurementBlock},
		{"opaque TLV length lies", mut(func(b []byte) []byte {
			off := opaqueOffset(t, b, OpaqueDriverVersion)
			binary.LittleEndian.PutUint16(b[off+2:], 0x4000)
			return b
		}), ErrOpaqueLength},
		{"opaque TLV type duplicated", mut(func(b []byte) []byte {
			off := opaqueOffset(t, b, OpaqueDriverVersion)
			binary.LittleEndian.PutUint16(b[off:], OpaqueVBIOSVersion)
			return b
		}), ErrOpaqueDuplicate},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := ParseReport(tc.report)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if rep != nil {
				t.Fatal("report returned with error")
			}
			// Each reason is its own: no other parse sentinel matches.
			for _, other := range []error{ErrTruncated, ErrTrailingData, ErrUnsupportedVersion, ErrBadRequest,
				ErrBadResponse, ErrMeasurementBlock, ErrOpaqueLength, ErrOpaqueDuplicate} {
				if other != tc.want && errors.Is(err, other) {
					t.Errorf("%v also matches %v", err, other)
				}
			}
		})
	}
}

func TestParseOpaqueData(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want error
		n    int
	}{
		{"empty", "", nil, 0},
		{"one field", "030002004142", nil, 1},
		{"zero-length field", "03000000", nil, 1},
		{"two fields", "0300010041" + "060002001122", nil, 2},
		{"unknown type kept", "3412010000", nil, 1},
		{"stray byte", "030001004100", ErrOpaqueLength, 0},
		{"header cut", "030001", ErrOpaqueLength, 0},
		{"length lies by one", "0300020041", ErrOpaqueLength, 0},
		{"length lies", "03000500414243", ErrOpaqueLength, 0},
		{"length 0xffff", "0300ffff41", ErrOpaqueLength, 0},
		{"second field lies", "0300010041" + "06000900112233", ErrOpaqueLength, 0},
		{"duplicate", "0300010041" + "0300010042", ErrOpaqueDuplicate, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, _ := hex.DecodeString(tc.in)
			got, err := ParseOpaqueData(in)
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if err == nil && len(got) != tc.n {
				t.Fatalf("%d fields, want %d", len(got), tc.n)
			}
		})
	}
}

func TestDecodeReportHex(t *testing.T) {
	if b, err := DecodeReportHex([]byte(" 0x11e0\n01ff \r\n")); err != nil || hex.EncodeToString(b) != "11e001ff" {
		t.Errorf("got %x, %v", b, err)
	}
	for _, in := range []string{"11e", "zz", "11 e0 0"} {
		if _, err := DecodeReportHex([]byte(in)); !errors.Is(err, ErrHexEncoding) {
			t.Errorf("%q: got %v", in, err)
		}
	}
}
