// Package attest verifies NVIDIA confidential-computing GPU attestation
// evidence offline, with the standard library only: an SPDM 1.1
// GET_MEASUREMENTS request ‖ MEASUREMENTS response signed by the GPU, the
// GPU's certificate chain, and optionally NVIDIA's signed reference integrity
// manifests (RIMs).
//
// Verify runs every check and records each as a named Check with an
// Outcome (pass, fail, not-checked) and a reason:
//
//	parse       the report is well-formed (bounds-checked SPDM + NVIDIA opaque TLVs)
//	chain       the PEM chain is in order and verifies to the pinned NVIDIA Device Identity CA
//	signature   ECDSA P-384 over SHA-384(request ‖ response-without-signature), leaf key
//	fwid        the leaf's tcg-dice-TcbInfo FWID equals the report's FWID opaque field
//	nonce       the request nonce is the verifier's (else "not fresh")
//	driver      the report's driver version is the offer's (not-checked when not claimed)
//	vbios       the report's VBIOS version is the offer's (not-checked when not claimed)
//	uuid        always not-checked: the evidence does not carry the GPU UUID
//	rim         supplied RIMs for this VBIOS/driver: XML signature to the pinned RIM
//	            root, then golden vs. reported measurements; not-checked without one
//	revocation  always not-checked: offline, OCSP/CRL not consulted
//
// Verdict.Verified is true only when parse, chain, signature, fwid and nonce
// pass and nothing failed; Verdict.Summary says in one line what was proven
// and what was not. Every failure wraps one of the Err* sentinels.
//
// The two roots are NVIDIA's, from the nvtrust local GPU verifier, embedded
// from roots/. What this package does not do: consult OCSP or CRLs, bind the
// NVML GPU UUID, or canonicalize XML beyond the subset signed SWID tags use
// (see c14n.go; anything outside it is reported not-checked, never passed).
//
// Files:
//
//	doc.go     this overview
//	errors.go  sentinel errors
//	report.go  SPDM request/response and opaque-data parsing (ParseReport, ParseOpaqueData)
//	chain.go   embedded roots, chain parsing and ordering, FWID extension (CertFWID)
//	verify.go  Evidence, Options, Verdict, Verify, Summary
//	rim.go     signed SWID-tag RIMs (VerifyRIM) and measurement comparison
//	c14n.go    inclusive Canonical XML 1.0/1.1 for the RIM subset
package attest
