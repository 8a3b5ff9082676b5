package attest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/sha512"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"time"
)

// XML namespaces and algorithm URIs of NVIDIA's signed SWID-tag RIMs.
const (
	nsSWID   = "http://standards.iso.org/iso/19770/-2/2015/schema.xsd"
	nsDSig   = "http://www.w3.org/2000/09/xmldsig#"
	nsSHA384 = "http://www.w3.org/2001/04/xmlenc#sha384" // namespace of the Resource Hash<i> attributes

	algC14N11     = "http://www.w3.org/2006/12/xml-c14n11"
	algC14N10     = "http://www.w3.org/TR/2001/REC-xml-c14n-20010315"
	algEnveloped  = "http://www.w3.org/2000/09/xmldsig#enveloped-signature"
	algECDSA384   = "http://www.w3.org/2001/04/xmldsig-more#ecdsa-sha384"
	algSHA384More = "http://www.w3.org/2001/04/xmldsig-more#sha384"
	algSHA384Enc  = "http://www.w3.org/2001/04/xmlenc#sha384"

	maxRIMBytes        = 4 << 20
	maxRIMAlternatives = 64
)

// GoldenMeasurement is one Resource of a RIM's Payload: the reference
// values for measurement index Index (0-based; report block Index+1).
type GoldenMeasurement struct {
	Index  int
	Name   string
	Active bool
	Size   int
	Values [][]byte // the Hash0..Hash<alternatives-1> alternatives
}

// RIM is a reference integrity manifest whose XML signature and signing
// chain have been verified. Every field comes from the signed (canonical)
// bytes.
type RIM struct {
	TagID             string
	Name              string // SoftwareIdentity name, e.g. "GH100"
	Product           string // Meta product
	ColloquialVersion string // Meta colloquialVersion: the VBIOS or driver version
	Measurements      []GoldenMeasurement
	Signer            *x509.Certificate
}

// rimHead is what can be read from a RIM without verifying it, to decide
// whether it concerns a report at all.
type rimHead struct {
	ColloquialVersion string
	Product           string
}

// peekRIM reads the version of a RIM without trusting it.
func peekRIM(doc []byte) (rimHead, error) {
	if len(doc) > maxRIMBytes {
		return rimHead{}, fmt.Errorf("%w: %d bytes, limit %d", ErrRIMMalformed, len(doc), maxRIMBytes)
	}
	var v swidTag
	if err := xml.Unmarshal(doc, &v); err != nil {
		return rimHead{}, fmt.Errorf("%w: %v", ErrRIMMalformed, err)
	}
	if v.XMLName.Space != nsSWID || v.XMLName.Local != "SoftwareIdentity" {
		return rimHead{}, fmt.Errorf("%w: root element {%s}%s is not a SWID SoftwareIdentity", ErrRIMMalformed, v.XMLName.Space, v.XMLName.Local)
	}
	if v.Meta == nil || v.Meta.ColloquialVersion == "" {
		return rimHead{}, fmt.Errorf("%w: no Meta colloquialVersion", ErrRIMMalformed)
	}
	return rimHead{ColloquialVersion: v.Meta.ColloquialVersion, Product: v.Meta.Product}, nil
}

type swidTag struct {
	XMLName xml.Name
	TagID   string    `xml:"tagId,attr"`
	Name    string    `xml:"name,attr"`
	Meta    *swidMeta `xml:"http://standards.iso.org/iso/19770/-2/2015/schema.xsd Meta"`
	Payload *struct {
		Resources []swidResource `xml:"http://standards.iso.org/iso/19770/-2/2015/schema.xsd Resource"`
	} `xml:"http://standards.iso.org/iso/19770/-2/2015/schema.xsd Payload"`
}

type swidMeta struct {
	ColloquialVersion string `xml:"colloquialVersion,attr"`
	Product           string `xml:"product,attr"`
}

type swidResource struct {
	Attrs []xml.Attr `xml:",any,attr"`
}

type signedInfo struct {
	XMLName xml.Name `xml:"http://www.w3.org/2000/09/xmldsig# SignedInfo"`
	C14N    struct {
		Algorithm string `xml:"Algorithm,attr"`
	} `xml:"http://www.w3.org/2000/09/xmldsig# CanonicalizationMethod"`
	SigMethod struct {
		Algorithm string `xml:"Algorithm,attr"`
	} `xml:"http://www.w3.org/2000/09/xmldsig# SignatureMethod"`
	References []struct {
		URI        *string `xml:"URI,attr"`
		Transforms []struct {
			Algorithm string `xml:"Algorithm,attr"`
		} `xml:"http://www.w3.org/2000/09/xmldsig# Transforms>Transform"`
		DigestMethod struct {
			Algorithm string `xml:"Algorithm,attr"`
		} `xml:"http://www.w3.org/2000/09/xmldsig# DigestMethod"`
		DigestValue string `xml:"http://www.w3.org/2000/09/xmldsig# DigestValue"`
	} `xml:"http://www.w3.org/2000/09/xmldsig# Reference"`
}

func decodeB64(s string) ([]byte, error) {
	return base64.StdEncoding.DecodeString(strings.Join(strings.Fields(s), ""))
}

// VerifyRIM verifies a signed SWID-tag RIM: its KeyInfo certificate chain to
// the pinned NVIDIA RIM root at now, the ECDSA P-384 SignatureValue over the
// canonical SignedInfo, and the SHA-384 digest of the canonical document
// without its enveloped Signature. It then returns the manifest as read from
// those signed canonical bytes. Algorithms or XML features it does not
// implement return ErrRIMUnsupported.
func VerifyRIM(doc []byte, now time.Time) (*RIM, error) {
	if len(doc) > maxRIMBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrRIMMalformed, len(doc), maxRIMBytes)
	}
	root, err := parseXMLTree(doc)
	if err != nil {
		if errors.Is(err, errC14NUnsupported) {
			return nil, fmt.Errorf("%w: %v", ErrRIMUnsupported, err)
		}
		return nil, fmt.Errorf("%w: %v", ErrRIMMalformed, err)
	}
	if !root.is(nsSWID, "SoftwareIdentity") {
		return nil, fmt.Errorf("%w: root element is not a SWID SoftwareIdentity", ErrRIMMalformed)
	}
	sigs := root.childrenNamed(nsDSig, "Signature")
	if len(sigs) != 1 {
		return nil, fmt.Errorf("%w: %d ds:Signature elements under the root, want 1", ErrRIMMalformed, len(sigs))
	}
	sig := sigs[0]
	siNode := sig.child(nsDSig, "SignedInfo")
	sv := sig.child(nsDSig, "SignatureValue")
	x509Data := (*xnode)(nil)
	if ki := sig.child(nsDSig, "KeyInfo"); ki != nil {
		x509Data = ki.child(nsDSig, "X509Data")
	}
	if siNode == nil || sv == nil || x509Data == nil {
		return nil, fmt.Errorf("%w: Signature lacks SignedInfo, SignatureValue or KeyInfo/X509Data", ErrRIMMalformed)
	}

	// 1. The signing certificate chain, to the pinned RIM root.
	var certs []*x509.Certificate
	for _, c := range x509Data.childrenNamed(nsDSig, "X509Certificate") {
		der, err := decodeB64(c.textContent())
		if err != nil {
			return nil, fmt.Errorf("%w: X509Certificate %d: %v", ErrRIMMalformed, len(certs), err)
		}
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fmt.Errorf("%w: X509Certificate %d: %v", ErrRIMMalformed, len(certs), err)
		}
		if len(certs) == maxChainCerts {
			return nil, fmt.Errorf("%w: more than %d certificates", ErrRIMMalformed, maxChainCerts)
		}
		certs = append(certs, cert)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("%w: no X509Certificate in KeyInfo", ErrRIMMalformed)
	}
	if err := verifyChain(certs, rimRoot(), now); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRIMChain, err)
	}
	signer := certs[0]
	pub, err := leafP384(signer)
	if err != nil {
		return nil, fmt.Errorf("%w: signer: %w", ErrRIMUnsupported, err)
	}

	// 2. SignedInfo, canonicalized with the method it names, then read back
	//    from the canonical bytes so that only signed values are used.
	cm := siNode.child(nsDSig, "CanonicalizationMethod")
	if cm == nil {
		return nil, fmt.Errorf("%w: SignedInfo has no CanonicalizationMethod", ErrRIMMalformed)
	}
	if alg, _ := cm.attr("Algorithm"); alg != algC14N11 && alg != algC14N10 {
		return nil, fmt.Errorf("%w: canonicalization %q not implemented (only inclusive C14N 1.0/1.1 without comments)", ErrRIMUnsupported, alg)
	}
	siBytes, err := canonicalize(siNode, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: SignedInfo: %v", ErrRIMMalformed, err)
	}
	var si signedInfo
	if err := xml.Unmarshal(siBytes, &si); err != nil {
		return nil, fmt.Errorf("%w: SignedInfo: %v", ErrRIMMalformed, err)
	}
	if si.SigMethod.Algorithm != algECDSA384 {
		return nil, fmt.Errorf("%w: signature method %q (only ECDSA-SHA384)", ErrRIMUnsupported, si.SigMethod.Algorithm)
	}

	// 3. SignatureValue: raw r‖s (XML-DSig 1.1 ECDSA), 48 bytes each.
	sigBytes, err := decodeB64(sv.textContent())
	if err != nil {
		return nil, fmt.Errorf("%w: SignatureValue: %v", ErrRIMMalformed, err)
	}
	if len(sigBytes) != 96 {
		return nil, fmt.Errorf("%w: SignatureValue is %d bytes, want 96 (r‖s)", ErrRIMSignature, len(sigBytes))
	}
	h := sha512.Sum384(siBytes)
	rr, ss := new(big.Int).SetBytes(sigBytes[:48]), new(big.Int).SetBytes(sigBytes[48:])
	if !ecdsa.Verify(pub, h[:], rr, ss) {
		return nil, fmt.Errorf("%w: ECDSA P-384 over canonical SignedInfo does not verify with %q", ErrRIMSignature, certName(signer))
	}

	// 4. The one Reference: the whole document, enveloped signature removed.
	if len(si.References) != 1 {
		return nil, fmt.Errorf("%w: %d References, want 1", ErrRIMUnsupported, len(si.References))
	}
	ref := si.References[0]
	if ref.URI == nil || *ref.URI != "" {
		return nil, fmt.Errorf("%w: Reference URI is not \"\" (whole document)", ErrRIMUnsupported)
	}
	switch {
	case len(ref.Transforms) == 1 && ref.Transforms[0].Algorithm == algEnveloped:
	case len(ref.Transforms) == 2 && ref.Transforms[0].Algorithm == algEnveloped &&
		(ref.Transforms[1].Algorithm == algC14N11 || ref.Transforms[1].Algorithm == algC14N10):
	default:
		return nil, fmt.Errorf("%w: Reference transforms other than enveloped-signature + inclusive C14N", ErrRIMUnsupported)
	}
	if a := ref.DigestMethod.Algorithm; a != algSHA384More && a != algSHA384Enc {
		return nil, fmt.Errorf("%w: digest method %q (only SHA-384)", ErrRIMUnsupported, a)
	}
	want, err := decodeB64(ref.DigestValue)
	if err != nil {
		return nil, fmt.Errorf("%w: DigestValue: %v", ErrRIMMalformed, err)
	}
	content, err := canonicalize(root, sig)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRIMMalformed, err)
	}
	if got := sha512.Sum384(content); !bytes.Equal(got[:], want) {
		return nil, fmt.Errorf("%w: SHA-384 of the canonical document is %x, SignedInfo says %x", ErrRIMDigest, got, want)
	}

	// 5. The manifest, read from the signed canonical bytes.
	rim, err := parseSWID(content)
	if err != nil {
		return nil, err
	}
	rim.Signer = signer
	return rim, nil
}

func parseSWID(content []byte) (*RIM, error) {
	var v swidTag
	if err := xml.Unmarshal(content, &v); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRIMMalformed, err)
	}
	if v.Meta == nil || v.Meta.ColloquialVersion == "" {
		return nil, fmt.Errorf("%w: no Meta colloquialVersion", ErrRIMMalformed)
	}
	if v.Payload == nil || len(v.Payload.Resources) == 0 {
		return nil, fmt.Errorf("%w: no Payload Resources", ErrRIMMalformed)
	}
	rim := &RIM{TagID: v.TagID, Name: v.Name, Product: v.Meta.Product, ColloquialVersion: v.Meta.ColloquialVersion}
	seen := map[int]bool{}
	for i, res := range v.Payload.Resources {
		attr := func(space, local string) (string, bool) {
			for _, a := range res.Attrs {
				if a.Name.Space == space && a.Name.Local == local {
					return a.Value, true
				}
			}
			return "", false
		}
		if t, _ := attr("", "type"); t != "Measurement" {
			continue
		}
		var g GoldenMeasurement
		var err error
		idx, _ := attr("", "index")
		if g.Index, err = strconv.Atoi(idx); err != nil || g.Index < 0 || g.Index > 254 {
			return nil, fmt.Errorf("%w: Resource %d index %q", ErrRIMMalformed, i, idx)
		}
		if seen[g.Index] {
			return nil, fmt.Errorf("%w: index %d appears twice", ErrRIMMalformed, g.Index)
		}
		seen[g.Index] = true
		g.Name, _ = attr("", "name")
		act, _ := attr("", "active")
		g.Active = !strings.EqualFold(act, "false") // as nvtrust: anything but False is active
		size, _ := attr("", "size")
		if g.Size, err = strconv.Atoi(size); err != nil || g.Size < 0 || g.Size > 1024 {
			return nil, fmt.Errorf("%w: Resource %d size %q", ErrRIMMalformed, i, size)
		}
		alts, _ := attr("", "alternatives")
		n, err := strconv.Atoi(alts)
		if err != nil || n < 1 || n > maxRIMAlternatives {
			return nil, fmt.Errorf("%w: Resource %d alternatives %q", ErrRIMMalformed, i, alts)
		}
		for k := range n {
			hv, ok := attr(nsSHA384, "Hash"+strconv.Itoa(k))
			if !ok {
				return nil, fmt.Errorf("%w: Resource %d lacks Hash%d", ErrRIMMalformed, i, k)
			}
			b, err := hex.DecodeString(hv)
			if err != nil {
				return nil, fmt.Errorf("%w: Resource %d Hash%d: %v", ErrRIMMalformed, i, k, err)
			}
			g.Values = append(g.Values, b)
		}
		rim.Measurements = append(rim.Measurements, g)
	}
	if len(rim.Measurements) == 0 {
		return nil, fmt.Errorf("%w: no Measurement resources", ErrRIMMalformed)
	}
	return rim, nil
}

// compareRIM compares every active golden measurement with the report block
// of index+1. NVDEC0's index is skipped when the report says NVDEC0 is
// disabled, as NVIDIA's verifier does. It returns the indices compared and
// an ErrRIMMismatch listing the ones that differ.
func compareRIM(golden map[int]GoldenMeasurement, rep *Report) (compared int, err error) {
	nvdecOff := false
	if v, ok := rep.Response.Opaque.Get(OpaqueNVDEC0Status); ok && len(v) > 0 && v[0] == nvdecStatusDisabled {
		nvdecOff = true
	}
	var bad []string
	for idx := range 256 {
		g, ok := golden[idx]
		if !ok || !g.Active || (idx == rimIndexNVDEC0 && nvdecOff) {
			continue
		}
		compared++
		blk, ok := rep.Block(uint8(idx + 1))
		if !ok {
			bad = append(bad, fmt.Sprintf("%d (no block)", idx))
			continue
		}
		match := false
		for _, v := range g.Values {
			if len(blk.Value) == g.Size && bytes.Equal(v, blk.Value) {
				match = true
			}
		}
		if !match {
			bad = append(bad, strconv.Itoa(idx))
		}
	}
	if len(bad) > 0 {
		return compared, fmt.Errorf("%w: %d of %d active indices differ: %s", ErrRIMMismatch, len(bad), compared, strings.Join(bad, ", "))
	}
	return compared, nil
}
