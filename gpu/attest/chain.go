package attest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	_ "embed"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// The two pinned roots, from NVIDIA's nvtrust local GPU verifier
// (verifier/certs/): the root of GPU device identity and the root that signs
// reference integrity manifests.
var (
	//go:embed roots/verifier_device_root.pem
	deviceRootPEM []byte
	//go:embed roots/verifier_RIM_root.pem
	rimRootPEM []byte
)

type pinnedRoot struct {
	cert *x509.Certificate
	pool *x509.CertPool
}

func loadRoot(pemBytes []byte) pinnedRoot {
	blk, _ := pem.Decode(pemBytes)
	if blk == nil {
		panic("attest: embedded root is not PEM")
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		panic("attest: embedded root does not parse: " + err.Error())
	}
	pool := x509.NewCertPool()
	pool.AddCert(c)
	return pinnedRoot{cert: c, pool: pool}
}

var (
	deviceRoot = sync.OnceValue(func() pinnedRoot { return loadRoot(deviceRootPEM) })
	rimRoot    = sync.OnceValue(func() pinnedRoot { return loadRoot(rimRootPEM) })
)

// DeviceRoot returns the pinned NVIDIA Device Identity CA certificate.
func DeviceRoot() *x509.Certificate { return deviceRoot().cert }

// RIMRoot returns the pinned NVIDIA RIM signing root certificate.
func RIMRoot() *x509.Certificate { return rimRoot().cert }

// maxChainCerts bounds how many certificates a chain may hold.
const maxChainCerts = 16

// ParseChain parses a certificate chain given as PEM CERTIFICATE blocks (or,
// when it does not start with PEM, as concatenated DER), leaf first.
func ParseChain(b []byte) ([]*x509.Certificate, error) {
	trimmed := bytes.TrimSpace(b)
	if len(trimmed) == 0 {
		return nil, ErrChainEmpty
	}
	if !bytes.HasPrefix(trimmed, []byte("-----BEGIN")) {
		certs, err := x509.ParseCertificates(trimmed)
		if err != nil {
			return nil, fmt.Errorf("%w: not PEM, and not DER: %v", ErrChainPEM, err)
		}
		if len(certs) > maxChainCerts {
			return nil, fmt.Errorf("%w: %d certificates, at most %d", ErrChainPEM, len(certs), maxChainCerts)
		}
		return certs, nil
	}
	var certs []*x509.Certificate
	rest := trimmed
	for rest = bytes.TrimSpace(rest); len(rest) > 0; rest = bytes.TrimSpace(rest) {
		var blk *pem.Block
		if !bytes.HasPrefix(rest, []byte("-----BEGIN")) {
			blk = nil // pem.Decode would skip text before the next block; refuse it
		} else {
			blk, rest = pem.Decode(rest)
		}
		if blk == nil {
			return nil, fmt.Errorf("%w: bytes after certificate %d are not PEM", ErrChainPEM, len(certs))
		}
		if blk.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("%w: PEM block %d is %q, not CERTIFICATE", ErrChainPEM, len(certs), blk.Type)
		}
		if len(certs) == maxChainCerts {
			return nil, fmt.Errorf("%w: more than %d certificates", ErrChainPEM, maxChainCerts)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: certificate %d: %v", ErrChainPEM, len(certs), err)
		}
		certs = append(certs, c)
	}
	return certs, nil
}

func certName(c *x509.Certificate) string {
	if c.Subject.CommonName != "" {
		return c.Subject.CommonName
	}
	return c.Subject.String()
}

// issuedBy reports whether child names parent as issuer and parent's key
// verifies child's signature; nameOK alone says whether the names match.
func issuedBy(child, parent *x509.Certificate) (nameOK, sigOK bool) {
	nameOK = bytes.Equal(child.RawIssuer, parent.RawSubject)
	sigOK = nameOK && parent.CheckSignature(child.SignatureAlgorithm, child.RawTBSCertificate, child.Signature) == nil
	return nameOK, sigOK
}

func selfSigned(c *x509.Certificate) bool {
	_, ok := issuedBy(c, c)
	return ok
}

// verifyChain checks that certs is ordered leaf first, each certificate
// issued by the next, ending at (or directly under) the pinned root, and that
// x509 path validation to that root succeeds at now. Each failure wraps its
// own sentinel. The common, valid case costs one x509.Verify; the per-link
// diagnosis runs only when that fails or took a path other than the order
// given.
func verifyChain(certs []*x509.Certificate, root pinnedRoot, now time.Time) error {
	if len(certs) == 0 {
		return ErrChainEmpty
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	chains, verr := certs[0].Verify(x509.VerifyOptions{
		Roots:         root.pool,
		Intermediates: inter,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	})
	if verr == nil {
		for _, c := range chains {
			if pathIs(c, certs, root.cert) {
				return nil
			}
		}
	}
	if err := diagnoseChain(certs, root); err != nil {
		return err
	}
	if verr != nil {
		return fmt.Errorf("%w: %v", ErrChainInvalid, verr)
	}
	return fmt.Errorf("%w: the certificates verify only along another path than the order given", ErrChainOrder)
}

// pathIs reports whether the verified path is exactly certs, followed by the
// root when certs does not end with it.
func pathIs(path, certs []*x509.Certificate, root *x509.Certificate) bool {
	want := certs
	if !certs[len(certs)-1].Equal(root) {
		want = append(append([]*x509.Certificate(nil), certs...), root)
	}
	if len(path) != len(want) {
		return false
	}
	for i := range path {
		if !path[i].Equal(want[i]) {
			return false
		}
	}
	return true
}

// diagnoseChain names the first structural fault of certs: order, a
// missing issuer, a bad signature, or a foreign root.
func diagnoseChain(certs []*x509.Certificate, root pinnedRoot) error {
	rootName := certName(root.cert)
	for i := 0; i+1 < len(certs); i++ {
		child, parent := certs[i], certs[i+1]
		if child.Equal(root.cert) {
			return fmt.Errorf("%w: the pinned root %q is certificate %d, not last", ErrChainOrder, rootName, i)
		}
		nameOK, sigOK := issuedBy(child, parent)
		if sigOK {
			continue
		}
		if selfSigned(child) {
			return fmt.Errorf("%w: certificate %d (%s) is a self-signed root other than the pinned %q",
				ErrChainUntrustedRoot, i, certName(child), rootName)
		}
		if nameOK {
			return fmt.Errorf("%w: certificate %d (%s) names certificate %d (%s) as issuer",
				ErrChainBadSignature, i, certName(child), i+1, certName(parent))
		}
		for j, other := range certs {
			if j != i+1 && j != i {
				if _, ok := issuedBy(child, other); ok {
					return fmt.Errorf("%w: certificate %d (%s) is issued by certificate %d (%s), not by the next one (%s)",
						ErrChainOrder, i, certName(child), j, certName(other), certName(parent))
				}
			}
		}
		if _, ok := issuedBy(child, root.cert); ok {
			return fmt.Errorf("%w: certificate %d (%s) is issued by the pinned root but certificates follow it",
				ErrChainOrder, i, certName(child))
		}
		return fmt.Errorf("%w: the issuer of certificate %d (%s), %q, is missing",
			ErrChainIncomplete, i, certName(child), child.Issuer.String())
	}
	if last := certs[len(certs)-1]; !last.Equal(root.cert) {
		nameOK, sigOK := issuedBy(last, root.cert)
		switch {
		case sigOK:
		case selfSigned(last):
			return fmt.Errorf("%w: root %q is not the pinned %q", ErrChainUntrustedRoot, certName(last), rootName)
		case nameOK:
			return fmt.Errorf("%w: last certificate (%s) names the pinned %q as issuer",
				ErrChainBadSignature, certName(last), rootName)
		default:
			return fmt.Errorf("%w: chain ends at %q, issued by %q, which is neither in the chain nor the pinned %q",
				ErrChainIncomplete, certName(last), last.Issuer.String(), rootName)
		}
	}
	return nil
}

// leafP384 returns the leaf's ECDSA P-384 public key.
func leafP384(c *x509.Certificate) (*ecdsa.PublicKey, error) {
	pub, ok := c.PublicKey.(*ecdsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("%w: %T", ErrLeafKey, c.PublicKey)
	}
	if pub.Curve != elliptic.P384() {
		return nil, fmt.Errorf("%w: curve %s", ErrLeafKey, pub.Curve.Params().Name)
	}
	return pub, nil
}

var (
	oidDiceTcbInfo = asn1.ObjectIdentifier{2, 23, 133, 5, 4, 1}
	oidSHA384      = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 2}
	oidSAN         = asn1.ObjectIdentifier{2, 5, 29, 17}
	oidNVDeviceID  = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 412, 274, 1} // NVIDIA SAN otherName
)

type fwidASN struct {
	HashAlg asn1.ObjectIdentifier
	Digest  []byte
}

// compositeDeviceID is the layout NVIDIA's GPU leaf certificates put under
// the tcg-dice-TcbInfo OID (seen in the sample chain): the RIoT-style
// SEQUENCE { version INTEGER, deviceIDPublicKey SubjectPublicKeyInfo,
// fwid FWID }. In the sample, deviceIDPublicKey is the issuer's (GSP BROM)
// key, which path validation already binds.
type compositeDeviceID struct {
	Version   int
	DeviceKey asn1.RawValue
	FWID      fwidASN
}

// diceTcbInfo is TCG DICE Attestation Architecture's DiceTcbInfo; only the
// fields up to fwids are decoded.
type diceTcbInfo struct {
	Vendor  string    `asn1:"optional,tag:0,utf8"`
	Model   string    `asn1:"optional,tag:1,utf8"`
	Version string    `asn1:"optional,tag:2,utf8"`
	SVN     int       `asn1:"optional,tag:3"`
	Layer   int       `asn1:"optional,tag:4"`
	Index   int       `asn1:"optional,tag:5"`
	FWIDs   []fwidASN `asn1:"optional,tag:6"`
	// later fields (flags, vendorInfo, type) are ignored; encoding/asn1
	// allows trailing SEQUENCE elements.
}

// CertFWID extracts the SHA-384 FWID from the leaf's tcg-dice-TcbInfo
// extension (OID 2.23.133.5.4.1). It accepts both the layout NVIDIA uses
// (version, device key, FWID) and TCG's DiceTcbInfo with its [6] fwids list.
func CertFWID(c *x509.Certificate) ([]byte, error) {
	var ext []byte
	for _, e := range c.Extensions {
		if e.Id.Equal(oidDiceTcbInfo) {
			if ext != nil {
				return nil, fmt.Errorf("%w: extension %s appears twice", ErrFWIDMalformed, oidDiceTcbInfo)
			}
			ext = e.Value
		}
	}
	if ext == nil {
		return nil, fmt.Errorf("%w: %s has no extension %s", ErrFWIDMissing, certName(c), oidDiceTcbInfo)
	}
	var fwids []fwidASN
	var cdi compositeDeviceID
	if rest, err := asn1.Unmarshal(ext, &cdi); err == nil && len(rest) == 0 {
		fwids = []fwidASN{cdi.FWID}
	} else {
		var tcb diceTcbInfo
		rest, err2 := asn1.Unmarshal(ext, &tcb)
		if err2 != nil || len(rest) != 0 {
			if err2 == nil {
				err2 = errors.New("trailing data")
			}
			return nil, fmt.Errorf("%w: neither NVIDIA's (version, key, fwid) layout (%v) nor DiceTcbInfo (%v)",
				ErrFWIDMalformed, err, err2)
		}
		fwids = tcb.FWIDs
	}
	for _, f := range fwids {
		if f.HashAlg.Equal(oidSHA384) {
			if len(f.Digest) != 48 {
				return nil, fmt.Errorf("%w: SHA-384 FWID is %d bytes", ErrFWIDMalformed, len(f.Digest))
			}
			return f.Digest, nil
		}
	}
	return nil, fmt.Errorf("%w: %s lists %d FWIDs, none SHA-384", ErrFWIDMissing, certName(c), len(fwids))
}

// certDeviceID returns the NVIDIA device name from the leaf's subjectAltName
// otherName 1.3.6.1.4.1.412.274.1 (e.g. "NVIDIA:GH100:48B02D92494BADF4"), or
// "" when absent.
func certDeviceID(c *x509.Certificate) string {
	for _, e := range c.Extensions {
		if !e.Id.Equal(oidSAN) {
			continue
		}
		var names []asn1.RawValue
		if rest, err := asn1.Unmarshal(e.Value, &names); err != nil || len(rest) != 0 {
			return ""
		}
		for _, n := range names {
			if n.Class != asn1.ClassContextSpecific || n.Tag != 0 {
				continue
			}
			var other struct {
				ID    asn1.ObjectIdentifier
				Value asn1.RawValue `asn1:"tag:0,explicit"`
			}
			if _, err := asn1.UnmarshalWithParams(n.FullBytes, &other, "tag:0"); err != nil || !other.ID.Equal(oidNVDeviceID) {
				continue
			}
			var s string
			if _, err := asn1.UnmarshalWithParams(other.Value.Bytes, &s, "utf8"); err == nil {
				return s
			}
			if len(other.Value.Bytes) > 0 {
				var raw asn1.RawValue
				if _, err := asn1.Unmarshal(other.Value.Bytes, &raw); err == nil {
					return string(raw.Bytes)
				}
			}
		}
	}
	return ""
}

// chipName guesses the GPU chip ("GH100") from the leaf: the device ID's
// second field, else the first word of the common name.
func chipName(c *x509.Certificate) string {
	if id := certDeviceID(c); id != "" {
		if parts := strings.Split(id, ":"); len(parts) >= 2 && parts[1] != "" {
			return parts[1]
		}
	}
	if f := strings.Fields(c.Subject.CommonName); len(f) > 0 {
		return f[0]
	}
	return ""
}
