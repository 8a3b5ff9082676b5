package attest

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
)

// SPDM constants for the only layout this package accepts: SPDM 1.1
// GET_MEASUREMENTS with a signature requested, answered by a MEASUREMENTS
// response signed with ECDSA P-384 / SHA-384 (what Hopper GPUs send).
const (
	SPDMVersion11 = 0x11 // SPDMVersion byte of SPDM 1.1

	codeGetMeasurements = 0xE0
	codeMeasurements    = 0x60

	NonceSize     = 32 // request and responder nonces
	SignatureSize = 96 // ECDSA P-384 r‖s, 48 bytes each

	requestSize         = 4 + NonceSize + 1 // header, nonce, SlotIDParam
	responseHeaderSize  = 8                 // header, NumberOfBlocks, MeasurementRecordLength (3 B LE)
	blockHeaderSize     = 4                 // Index, MeasurementSpecification, MeasurementSize (2 B LE)
	dmtfHeaderSize      = 3                 // DMTFSpecMeasurementValueType, ...Size (2 B LE)
	opaqueHeaderSize    = 4                 // NVIDIA TLV: type (2 B LE), length (2 B LE)
	measurementSpecDMTF = 0x01
)

// Request is the SPDM 1.1 GET_MEASUREMENTS request the verifier sent.
type Request struct {
	Version byte // 0x11
	Code    byte // 0xE0
	Param1  byte // bit 0: signature requested (required here)
	Param2  byte // measurement operation: 0xFF = all blocks
	Nonce   [NonceSize]byte
	SlotID  byte
}

// MeasurementBlock is one measurement block of the response, with its DMTF
// measurement value. Value aliases the parsed report.
type MeasurementBlock struct {
	Index     uint8 // 1-based in NVIDIA reports
	Spec      uint8 // MeasurementSpecification: 0x01 = DMTF
	ValueType uint8 // DMTFSpecMeasurementValueType
	Value     []byte
}

// OpaqueField is one NVIDIA opaque-data TLV. Value aliases the parsed report.
type OpaqueField struct {
	Type  uint16
	Value []byte
}

// NVIDIA opaque-data field types, as numbered by NVIDIA's nvtrust local GPU
// verifier (OpaqueData.OPAQUE_DATA_TYPES). The sample Hopper report carries
// types 6, 14, 15, 16, 17, 18, 19, 3, 4, 12, 13, 11, 20, 21 in that order and
// their contents agree with these names (3 = "550.90.07\x00", 15 = "882",
// 17 = "1010", 18 = "0200", 20 = the 48-byte FWID also found in the leaf
// certificate, 11 = 0x55 "NVDEC0 disabled").
const (
	OpaqueCertIssuerName      uint16 = 1
	OpaqueCertAuthorityKeyID  uint16 = 2
	OpaqueDriverVersion       uint16 = 3 // NUL-terminated ASCII
	OpaqueGPUInfo             uint16 = 4
	OpaqueSKU                 uint16 = 5
	OpaqueVBIOSVersion        uint16 = 6 // 8 bytes LE, see OpaqueData.VBIOSVersion
	OpaqueManufacturerID      uint16 = 7
	OpaqueTamperDetection     uint16 = 8
	OpaqueSMC                 uint16 = 9
	OpaqueVPR                 uint16 = 10
	OpaqueNVDEC0Status        uint16 = 11 // 0xAA enabled, 0x55 disabled
	OpaqueMeasurementCount    uint16 = 12 // uint32 LE per measurement
	OpaqueCPRInfo             uint16 = 13
	OpaqueBoardID             uint16 = 14 // uint32 LE
	OpaqueChipSKU             uint16 = 15 // NUL-padded ASCII
	OpaqueChipSKUMod          uint16 = 16
	OpaqueProject             uint16 = 17
	OpaqueProjectSKU          uint16 = 18
	OpaqueProjectSKUMod       uint16 = 19
	OpaqueFWID                uint16 = 20 // 48 bytes, SHA-384
	OpaqueProtectedPCIeStatus uint16 = 21
	OpaqueSwitchPDI           uint16 = 22
	OpaqueFloorsweptPorts     uint16 = 23
	OpaquePositionID          uint16 = 24
	OpaqueLockSwitchStatus    uint16 = 25
	OpaqueGPULinkConn         uint16 = 32
	OpaqueInvalid             uint16 = 255
)

const (
	nvdecStatusDisabled   = 0x55
	rimIndexNVDEC0        = 35      // golden index skipped when NVDEC0 is disabled, as nvtrust does
	maxReportBytes        = 1 << 25 // far above any real report; bounds hex decoding
	opaqueVBIOSVersionLen = 8
)

// OpaqueData is the response's opaque data as an ordered list of TLVs.
type OpaqueData []OpaqueField

// Get returns the value of the field of type t.
func (o OpaqueData) Get(t uint16) ([]byte, bool) {
	for _, f := range o {
		if f.Type == t {
			return f.Value, true
		}
	}
	return nil, false
}

// String returns field t as text: the bytes up to the first NUL.
func (o OpaqueData) String(t uint16) string {
	v, _ := o.Get(t)
	if i := bytes.IndexByte(v, 0); i >= 0 {
		v = v[:i]
	}
	return string(v)
}

// VBIOSVersion formats the VBIOS version field the way NVIDIA's tools and RIM
// colloquialVersion do: bytes 00 9f 00 96 01 00 00 00 read as the
// little-endian 0x0000000196009f00 become "96.00.9F.00.01" (low 32 bits as
// four bytes, then the next byte). "" when absent or not 8 bytes.
func (o OpaqueData) VBIOSVersion() string {
	v, _ := o.Get(OpaqueVBIOSVersion)
	if len(v) != opaqueVBIOSVersionLen {
		return ""
	}
	x := binary.LittleEndian.Uint64(v)
	return fmt.Sprintf("%02X.%02X.%02X.%02X.%02X",
		byte(x>>24), byte(x>>16), byte(x>>8), byte(x), byte(x>>32))
}

// Response is the SPDM 1.1 MEASUREMENTS response.
type Response struct {
	Version   byte
	Code      byte // 0x60
	Param1    byte
	Param2    byte // slot ID
	NumBlocks uint8
	RecordLen int
	Blocks    []MeasurementBlock
	Nonce     [NonceSize]byte // the responder's nonce
	OpaqueRaw []byte          // the opaque data as sent (its 2-byte length prefix excluded)
	Opaque    OpaqueData
	Signature []byte // 96 bytes, r‖s
}

// Report is a parsed attestation report: request ‖ response. Its slices
// alias Raw, which aliases the parsed input.
type Report struct {
	Raw      []byte
	Request  Request
	Response Response
}

// Signed is the part of the report covered by the signature: the request
// and the response up to (excluding) the signature.
func (r *Report) Signed() []byte { return r.Raw[:len(r.Raw)-SignatureSize] }

// Block returns the measurement block with SPDM index idx.
func (r *Report) Block(idx uint8) (MeasurementBlock, bool) {
	for _, b := range r.Response.Blocks {
		if b.Index == idx {
			return b, true
		}
	}
	return MeasurementBlock{}, false
}

// DecodeReportHex decodes a report stored as hex text (NVIDIA's sample
// format), ignoring whitespace and an optional 0x prefix.
func DecodeReportHex(text []byte) ([]byte, error) {
	s := strings.Join(strings.Fields(string(text)), "")
	s = strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	if len(s) > 2*maxReportBytes {
		return nil, fmt.Errorf("%w: %d hex digits exceed the %d-byte limit", ErrHexEncoding, len(s), maxReportBytes)
	}
	b, err := hex.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrHexEncoding, err)
	}
	return b, nil
}

// reader is a bounds-checked cursor; every read says what it was reading so
// a short input yields a precise ErrTruncated.
type reader struct {
	b   []byte
	off int
}

func (r *reader) take(n int, what string) ([]byte, error) {
	if n < 0 || n > len(r.b)-r.off {
		return nil, fmt.Errorf("%w: %s needs %d bytes at offset %d, %d remain",
			ErrTruncated, what, n, r.off, len(r.b)-r.off)
	}
	v := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return v, nil
}

// ParseReport parses request ‖ response ‖ signature. It never panics and
// allocates only in proportion to the input (at most 255 block headers and
// len/4 opaque fields), never from an unchecked length.
func ParseReport(b []byte) (*Report, error) {
	rep := &Report{Raw: b}
	r := &reader{b: b}

	// GET_MEASUREMENTS request.
	req, err := r.take(requestSize, "GET_MEASUREMENTS request")
	if err != nil {
		return nil, err
	}
	q := &rep.Request
	q.Version, q.Code, q.Param1, q.Param2 = req[0], req[1], req[2], req[3]
	if q.Version != SPDMVersion11 {
		return nil, fmt.Errorf("%w: request version 0x%02x, want 0x%02x", ErrUnsupportedVersion, q.Version, SPDMVersion11)
	}
	if q.Code != codeGetMeasurements {
		return nil, fmt.Errorf("%w: request code 0x%02x, want 0x%02x", ErrBadRequest, q.Code, codeGetMeasurements)
	}
	if q.Param1&1 == 0 {
		return nil, fmt.Errorf("%w: no signature requested (param1 0x%02x), so no nonce", ErrBadRequest, q.Param1)
	}
	copy(q.Nonce[:], req[4:4+NonceSize])
	q.SlotID = req[4+NonceSize]

	// MEASUREMENTS response header.
	hdr, err := r.take(responseHeaderSize, "MEASUREMENTS response header")
	if err != nil {
		return nil, err
	}
	p := &rep.Response
	p.Version, p.Code, p.Param1, p.Param2, p.NumBlocks = hdr[0], hdr[1], hdr[2], hdr[3], hdr[4]
	if p.Code != codeMeasurements {
		return nil, fmt.Errorf("%w: response code 0x%02x, want 0x%02x", ErrBadResponse, p.Code, codeMeasurements)
	}
	if p.Version != q.Version {
		return nil, fmt.Errorf("%w: response version 0x%02x differs from request version 0x%02x", ErrBadResponse, p.Version, q.Version)
	}
	p.RecordLen = int(hdr[5]) | int(hdr[6])<<8 | int(hdr[7])<<16
	record, err := r.take(p.RecordLen, "measurement record")
	if err != nil {
		return nil, err
	}
	if p.Blocks, err = parseBlocks(record, int(p.NumBlocks)); err != nil {
		return nil, err
	}

	nonce, err := r.take(NonceSize, "responder nonce")
	if err != nil {
		return nil, err
	}
	copy(p.Nonce[:], nonce)
	ol, err := r.take(2, "opaque data length")
	if err != nil {
		return nil, err
	}
	if p.OpaqueRaw, err = r.take(int(binary.LittleEndian.Uint16(ol)), "opaque data"); err != nil {
		return nil, err
	}
	if p.Opaque, err = ParseOpaqueData(p.OpaqueRaw); err != nil {
		return nil, err
	}
	if p.Signature, err = r.take(SignatureSize, "signature"); err != nil {
		return nil, err
	}
	if extra := len(b) - r.off; extra != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the %d-byte signature", ErrTrailingData, extra, SignatureSize)
	}
	return rep, nil
}

func parseBlocks(record []byte, n int) ([]MeasurementBlock, error) {
	// n ≤ 255, and each block needs ≥ 7 bytes: both bound the allocation.
	blocks := make([]MeasurementBlock, 0, min(n, len(record)/(blockHeaderSize+dmtfHeaderSize)))
	var seen [256]bool
	r := &reader{b: record}
	for i := range n {
		h, err := r.take(blockHeaderSize, "")
		if err != nil {
			return nil, fmt.Errorf("%w: %d blocks declared but the %d-byte record ends inside block %d's header",
				ErrMeasurementBlock, n, len(record), i)
		}
		blk := MeasurementBlock{Index: h[0], Spec: h[1]}
		size := int(binary.LittleEndian.Uint16(h[2:4]))
		if blk.Spec != measurementSpecDMTF {
			return nil, fmt.Errorf("%w: block %d (index %d) specification 0x%02x, want DMTF 0x01", ErrMeasurementBlock, i, blk.Index, blk.Spec)
		}
		if seen[blk.Index] {
			return nil, fmt.Errorf("%w: index %d appears twice", ErrMeasurementBlock, blk.Index)
		}
		seen[blk.Index] = true
		m, err := r.take(size, "")
		if err != nil {
			return nil, fmt.Errorf("%w: block %d (index %d) declares %d bytes, record has %d left",
				ErrMeasurementBlock, i, blk.Index, size, len(record)-r.off)
		}
		if len(m) < dmtfHeaderSize {
			return nil, fmt.Errorf("%w: block %d (index %d) is %d bytes, shorter than the DMTF header", ErrMeasurementBlock, i, blk.Index, len(m))
		}
		blk.ValueType = m[0]
		vs := int(binary.LittleEndian.Uint16(m[1:3]))
		if vs != len(m)-dmtfHeaderSize {
			return nil, fmt.Errorf("%w: block %d (index %d) DMTF value size %d, block holds %d",
				ErrMeasurementBlock, i, blk.Index, vs, len(m)-dmtfHeaderSize)
		}
		blk.Value = m[dmtfHeaderSize:]
		blocks = append(blocks, blk)
	}
	if r.off != len(record) {
		return nil, fmt.Errorf("%w: %d blocks use %d of the %d-byte measurement record",
			ErrMeasurementBlock, n, r.off, len(record))
	}
	return blocks, nil
}

// ParseOpaqueData parses NVIDIA's opaque data: TLVs of a 2-byte type and a
// 2-byte length (both little-endian) followed by the value. A TLV whose
// header or value runs past the end returns ErrOpaqueLength; a repeated type
// returns ErrOpaqueDuplicate. Unknown types are kept.
func ParseOpaqueData(b []byte) (OpaqueData, error) {
	if len(b) == 0 {
		return nil, nil
	}
	fields := make(OpaqueData, 0, min(len(b)/opaqueHeaderSize, 64))
	var seen [1 << 16 / 64]uint64 // bitset of field types
	for off := 0; off < len(b); {
		if len(b)-off < opaqueHeaderSize {
			return nil, fmt.Errorf("%w: %d stray bytes at offset %d, a field header needs %d",
				ErrOpaqueLength, len(b)-off, off, opaqueHeaderSize)
		}
		t := binary.LittleEndian.Uint16(b[off:])
		n := int(binary.LittleEndian.Uint16(b[off+2:]))
		off += opaqueHeaderSize
		if n > len(b)-off {
			return nil, fmt.Errorf("%w: field type %d at offset %d declares %d bytes, %d remain",
				ErrOpaqueLength, t, off-opaqueHeaderSize, n, len(b)-off)
		}
		if seen[t/64]&(1<<(t%64)) != 0 {
			return nil, fmt.Errorf("%w: type %d", ErrOpaqueDuplicate, t)
		}
		seen[t/64] |= 1 << (t % 64)
		fields = append(fields, OpaqueField{Type: t, Value: b[off : off+n : off+n]})
		off += n
	}
	return fields, nil
}
