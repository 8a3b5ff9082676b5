package attest

import "errors"

// Sentinel errors, one per distinct failure reason. Every error this package
// returns, and every Check.Err it records, wraps exactly one of them with
// detail, so callers can branch with errors.Is.

// Report parsing.
var (
	// ErrHexEncoding: a hex-encoded report (DecodeReportHex) is not valid hex.
	ErrHexEncoding = errors.New("attest: report is not valid hex")
	// ErrTruncated: the report is shorter than a length it declares (fixed
	// header, measurement record, opaque data, or the 96-byte signature).
	ErrTruncated = errors.New("attest: report shorter than its declared lengths")
	// ErrTrailingData: bytes follow the signature, so the signature's position
	// is ambiguous.
	ErrTrailingData = errors.New("attest: trailing bytes after the report signature")
	// ErrUnsupportedVersion: an SPDM version other than 1.1.
	ErrUnsupportedVersion = errors.New("attest: unsupported SPDM version")
	// ErrBadRequest: the GET_MEASUREMENTS request is malformed (wrong request
	// code, or no signature was requested so it carries no nonce).
	ErrBadRequest = errors.New("attest: malformed SPDM GET_MEASUREMENTS request")
	// ErrBadResponse: the MEASUREMENTS response is malformed (wrong response
	// code, version differs from the request's).
	ErrBadResponse = errors.New("attest: malformed SPDM MEASUREMENTS response")
	// ErrMeasurementBlock: a measurement block's sizes disagree with each other
	// or with the record length, its specification is not DMTF, or its index
	// repeats.
	ErrMeasurementBlock = errors.New("attest: malformed measurement block")
	// ErrOpaqueLength: an opaque-data TLV declares more bytes than the opaque
	// data holds (the TLV lengths lie).
	ErrOpaqueLength = errors.New("attest: opaque data field length exceeds opaque data")
	// ErrOpaqueDuplicate: the same opaque-data field type appears twice.
	ErrOpaqueDuplicate = errors.New("attest: duplicate opaque data field")
)

// Certificate chain.
var (
	// ErrChainPEM: the chain is not a sequence of PEM (or DER) certificates.
	ErrChainPEM = errors.New("attest: certificate chain does not parse")
	// ErrChainEmpty: no certificate was supplied.
	ErrChainEmpty = errors.New("attest: certificate chain is empty")
	// ErrChainOrder: the chain holds the right certificates in the wrong order
	// (it must be leaf first, each certificate issued by the next).
	ErrChainOrder = errors.New("attest: certificate chain out of order")
	// ErrChainIncomplete: a certificate's issuer is missing from the chain and
	// it is not the pinned root either (a truncated chain).
	ErrChainIncomplete = errors.New("attest: certificate chain truncated")
	// ErrChainBadSignature: a certificate names the next one as issuer but its
	// signature does not verify with that issuer's key (a swapped or forged
	// certificate).
	ErrChainBadSignature = errors.New("attest: certificate signature does not verify with its issuer's key")
	// ErrChainUntrustedRoot: the chain ends at a self-signed root other than
	// the pinned one.
	ErrChainUntrustedRoot = errors.New("attest: certificate chain ends at an untrusted root")
	// ErrChainInvalid: x509 path validation against the pinned root failed for
	// another reason (validity period, constraints, key usage).
	ErrChainInvalid = errors.New("attest: certificate chain does not verify to the pinned root")
	// ErrLeafKey: the leaf key is not an ECDSA P-384 key.
	ErrLeafKey = errors.New("attest: leaf certificate key is not ECDSA P-384")
)

// Report signature, FWID, nonce and offer claims.
var (
	// ErrSignatureInvalid: the report's ECDSA P-384 signature does not verify
	// with the leaf certificate's key.
	ErrSignatureInvalid = errors.New("attest: report signature invalid")
	// ErrFWIDMissing: the leaf certificate has no FWID (TCG DICE extension
	// 2.23.133.5.4.1 with a SHA-384 FWID).
	ErrFWIDMissing = errors.New("attest: leaf certificate carries no FWID")
	// ErrFWIDMalformed: the FWID extension does not parse.
	ErrFWIDMalformed = errors.New("attest: leaf certificate FWID extension malformed")
	// ErrFWIDNotInReport: the report carries no FWID opaque field.
	ErrFWIDNotInReport = errors.New("attest: report carries no FWID")
	// ErrFWIDMismatch: the certificate's FWID differs from the report's.
	ErrFWIDMismatch = errors.New("attest: FWID in leaf certificate differs from the report")
	// ErrNoNonce: the verifier supplied no nonce, so freshness is unknown.
	ErrNoNonce = errors.New("attest: no verifier nonce supplied")
	// ErrNonceLength: the verifier nonce is not 32 bytes.
	ErrNonceLength = errors.New("attest: verifier nonce is not 32 bytes")
	// ErrNonceMismatch: the report answers another nonce: it is not fresh.
	ErrNonceMismatch = errors.New("attest: not fresh: report nonce differs from the verifier nonce")
	// ErrDriverMismatch: the report's driver version differs from the offer.
	ErrDriverMismatch = errors.New("attest: driver version differs from the offer")
	// ErrVBIOSMismatch: the report's VBIOS version differs from the offer.
	ErrVBIOSMismatch = errors.New("attest: VBIOS version differs from the offer")
	// ErrUUIDNotBound: the report does not carry the GPU UUID, so a claimed
	// UUID cannot be checked against it.
	ErrUUIDNotBound = errors.New("attest: GPU UUID is not bound by the evidence")
)

// Reference integrity manifests (RIMs).
var (
	// ErrRIMMalformed: a RIM is not a well-formed signed SWID tag.
	ErrRIMMalformed = errors.New("attest: malformed reference manifest")
	// ErrRIMUnsupported: a RIM uses an XML-DSig algorithm or XML feature this
	// package cannot verify; it is reported not-checked, never passed.
	ErrRIMUnsupported = errors.New("attest: reference manifest uses an unsupported signature feature")
	// ErrRIMChain: the RIM's signing certificates do not verify to the pinned
	// RIM root.
	ErrRIMChain = errors.New("attest: reference manifest certificate chain does not verify to the pinned RIM root")
	// ErrRIMDigest: the RIM's content does not match its signed digest.
	ErrRIMDigest = errors.New("attest: reference manifest digest mismatch")
	// ErrRIMSignature: the RIM's SignatureValue does not verify.
	ErrRIMSignature = errors.New("attest: reference manifest signature invalid")
	// ErrRIMNoMatch: no supplied RIM is for the report's VBIOS or driver.
	ErrRIMNoMatch = errors.New("attest: no reference manifest for the report")
	// ErrRIMConflict: two matching RIMs hold active measurements at one index.
	ErrRIMConflict = errors.New("attest: reference manifests overlap")
	// ErrRIMMismatch: a measurement block differs from every golden value.
	ErrRIMMismatch = errors.New("attest: measurements differ from the reference manifest")
)

// ErrRevocationNotChecked: revocation (OCSP/CRL) is never consulted offline.
var ErrRevocationNotChecked = errors.New("attest: offline: OCSP/CRL not consulted")
