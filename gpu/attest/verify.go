package attest

import (
	"crypto/ecdsa"
	"crypto/sha512"
	"crypto/subtle"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"
)

// Evidence is what a provider presents for one GPU, plus what its offer
// claims about it.
type Evidence struct {
	// Report is the binary attestation report: the SPDM GET_MEASUREMENTS
	// request ‖ MEASUREMENTS response (signature last). Use DecodeReportHex
	// for NVIDIA's hex text form.
	Report []byte
	// CertChain is the GPU's certificate chain, leaf first: PEM, or
	// concatenated DER.
	CertChain []byte
	// Nonce is the 32-byte nonce the verifier asked the report to answer.
	Nonce []byte

	// Claims from the offer, cross-checked against the signed report. Empty
	// means not claimed.
	DriverVersion string // e.g. "550.90.07"
	VBIOSVersion  string // e.g. "96.00.9F.00.01" (compared case-insensitively)
	GPUUUID       string // e.g. "GPU-…"; not bound by the evidence, see check "uuid"
}

// Options tune Verify.
type Options struct {
	// Now is the time at which certificates must be valid; zero means
	// time.Now().
	Now time.Time
	// RIMs are reference integrity manifests (signed SWID tag XML). Those
	// whose colloquialVersion is the report's VBIOS or driver version are
	// verified to the pinned RIM root and compared with the measurements.
	RIMs [][]byte
}

// Outcome is a check's result.
type Outcome int

// Outcomes. The zero value is NotChecked, so nothing passes by default.
const (
	NotChecked Outcome = iota
	Pass
	Fail
)

func (o Outcome) String() string {
	switch o {
	case Pass:
		return "pass"
	case Fail:
		return "fail"
	default:
		return "not-checked"
	}
}

// Check names, in the order Verify records them.
const (
	CheckParse      = "parse"
	CheckChain      = "chain"
	CheckSignature  = "signature"
	CheckFWID       = "fwid"
	CheckNonce      = "nonce"
	CheckDriver     = "driver"
	CheckVBIOS      = "vbios"
	CheckUUID       = "uuid"
	CheckRIM        = "rim"
	CheckRevocation = "revocation"
)

// Check is one named verification step.
type Check struct {
	Name    string
	Outcome Outcome
	Reason  string // human-readable; says what was proven or why not
	Err     error  // wraps one sentinel; nil when the check passed
}

func (c Check) String() string { return c.Name + ": " + c.Outcome.String() + ": " + c.Reason }

// Facts are the report's contents for display. Values are as the report
// states them; they are authenticated only when the verdict's signature and
// chain checks pass.
type Facts struct {
	SPDMVersion       string // "1.1"
	DriverVersion     string
	VBIOSVersion      string // "96.00.9F.00.01"
	ChipSKU           string
	ChipSKUMod        string
	Project           string
	ProjectSKU        string
	ProjectSKUMod     string
	BoardID           uint32
	FWID              string // hex, from the report's opaque data
	NVDEC0Enabled     bool
	MeasurementBlocks int
	RequestNonce      string // hex
	// From the leaf certificate, when the chain parses.
	Chip     string // e.g. "GH100"
	DeviceID string // leaf subjectAltName, e.g. "NVIDIA:GH100:48B02D92494BADF4"
}

// Verdict is the result of Verify: every check, in order, and the facts.
type Verdict struct {
	Checks []Check
	Facts  Facts
	Report *Report             // nil when the report did not parse
	Chain  []*x509.Certificate // nil when the chain did not parse
}

// Check returns the check with the given name.
func (v *Verdict) Check(name string) Check {
	for _, c := range v.Checks {
		if c.Name == name {
			return c
		}
	}
	return Check{Name: name, Outcome: NotChecked, Reason: "not run"}
}

// Verified is true only when parse, chain, signature, fwid and nonce all
// passed and no check failed: a genuine NVIDIA GPU signed this report for
// this nonce. Checks left not-checked beyond those five (RIM, revocation,
// UUID) do not block it; Summary says what they leave unproven.
func (v *Verdict) Verified() bool {
	for _, name := range []string{CheckParse, CheckChain, CheckSignature, CheckFWID, CheckNonce} {
		if v.Check(name).Outcome != Pass {
			return false
		}
	}
	for _, c := range v.Checks {
		if c.Outcome == Fail {
			return false
		}
	}
	return true
}

// Err joins the errors of the failed checks; nil when none failed.
func (v *Verdict) Err() error {
	var errs []error
	for _, c := range v.Checks {
		if c.Outcome == Fail && c.Err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.Name, c.Err))
		}
	}
	return errors.Join(errs...)
}

// Summary is a one-line account of what was proven and what was not, e.g.
// "genuine GH100 (chain to NVIDIA root valid, signature valid, FWID
// matches), nonce not fresh, firmware not compared: no reference manifest
// for VBIOS 96.00.9F.00.01, revocation not checked: offline".
func (v *Verdict) Summary() string {
	var parts []string
	if p := v.Check(CheckParse); p.Outcome != Pass {
		return "not verified: report malformed: " + p.Reason + ", revocation not checked: offline"
	}
	chain, sig, fwid := v.Check(CheckChain), v.Check(CheckSignature), v.Check(CheckFWID)
	chip := v.Facts.Chip
	if chip == "" {
		chip = "GPU"
	}
	if chain.Outcome == Pass && sig.Outcome == Pass {
		id := "genuine " + chip + " (chain to NVIDIA root valid, signature valid"
		switch fwid.Outcome {
		case Pass:
			id += ", FWID matches)"
		case Fail:
			id += ", FWID MISMATCH: " + fwid.Reason + ")"
		default:
			id += ", FWID not checked: " + fwid.Reason + ")"
		}
		parts = append(parts, id)
	} else {
		parts = append(parts, "NOT proven genuine (chain "+short(chain)+"; signature "+short(sig)+")")
	}
	switch n := v.Check(CheckNonce); n.Outcome {
	case Pass:
		parts = append(parts, "nonce fresh")
	case Fail:
		parts = append(parts, "nonce not fresh")
	default:
		parts = append(parts, "freshness unknown: "+n.Reason)
	}
	for _, name := range []string{CheckDriver, CheckVBIOS} {
		switch c := v.Check(name); c.Outcome {
		case Pass:
			parts = append(parts, name+" as offered")
		case Fail:
			parts = append(parts, name+" NOT as offered: "+c.Reason)
		}
	}
	if errors.Is(v.Check(CheckUUID).Err, ErrUUIDNotBound) {
		parts = append(parts, "GPU UUID not bound")
	}
	switch r := v.Check(CheckRIM); r.Outcome {
	case Pass:
		parts = append(parts, "firmware matches reference manifest: "+r.Reason)
	case Fail:
		parts = append(parts, "firmware check FAILED: "+r.Reason)
	default:
		parts = append(parts, "firmware not compared: "+r.Reason)
	}
	parts = append(parts, "revocation not checked: offline")
	return strings.Join(parts, ", ")
}

func short(c Check) string {
	if c.Outcome == Pass {
		return "valid"
	}
	return c.Outcome.String() + ": " + c.Reason
}

// recorder appends checks to a verdict.
type recorder struct{ v *Verdict }

func (r recorder) pass(name, reason string) {
	r.v.Checks = append(r.v.Checks, Check{Name: name, Outcome: Pass, Reason: reason})
}

func (r recorder) fail(name string, err error) {
	r.v.Checks = append(r.v.Checks, Check{Name: name, Outcome: Fail, Reason: reasonOf(err), Err: err})
}

func (r recorder) skip(name, reason string, err error) {
	r.v.Checks = append(r.v.Checks, Check{Name: name, Outcome: NotChecked, Reason: reason, Err: err})
}

// reasonOf turns "attest: not fresh: …" into "not fresh: …", also inside
// wrapped messages.
func reasonOf(err error) string { return strings.ReplaceAll(err.Error(), "attest: ", "") }

// Verify checks ev offline and records one Check per step: parse, chain,
// signature, fwid, nonce, driver, vbios, uuid, rim, revocation. It never
// panics on hostile input and never returns nil.
func Verify(ev Evidence, opts Options) *Verdict {
	v := &Verdict{}
	rec := recorder{v}
	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}

	// parse
	rep, perr := ParseReport(ev.Report)
	if perr != nil {
		rec.fail(CheckParse, perr)
	} else {
		v.Report = rep
		v.Facts = factsOf(rep)
		rec.pass(CheckParse, fmt.Sprintf("SPDM %s request and MEASUREMENTS response with %d measurement blocks and %d opaque fields",
			v.Facts.SPDMVersion, len(rep.Response.Blocks), len(rep.Response.Opaque)))
	}

	// chain
	certs, cerr := ParseChain(ev.CertChain)
	var leaf *x509.Certificate
	if cerr == nil {
		v.Chain = certs
		leaf = certs[0]
		v.Facts.Chip = chipName(leaf)
		v.Facts.DeviceID = certDeviceID(leaf)
		cerr = verifyChain(certs, deviceRoot(), now)
	}
	if cerr != nil {
		rec.fail(CheckChain, cerr)
	} else {
		rec.pass(CheckChain, fmt.Sprintf("%d certificates, leaf %q, verify to the pinned %q at %s",
			len(certs), certName(leaf), certName(deviceRoot().cert), now.UTC().Format(time.RFC3339)))
	}

	// signature
	switch {
	case rep == nil:
		rec.skip(CheckSignature, "report did not parse", perr)
	case leaf == nil:
		rec.skip(CheckSignature, "no leaf certificate", cerr)
	default:
		if err := verifyReportSignature(rep, leaf); err != nil {
			rec.fail(CheckSignature, err)
		} else {
			why := "ECDSA P-384/SHA-384 over request ‖ response verifies with the leaf key"
			if cerr != nil {
				why += " (but the leaf is not trusted: see chain)"
			}
			rec.pass(CheckSignature, why)
		}
	}

	// fwid
	switch {
	case rep == nil:
		rec.skip(CheckFWID, "report did not parse", perr)
	case leaf == nil:
		rec.skip(CheckFWID, "no leaf certificate", cerr)
	default:
		reportFWID, ok := rep.Response.Opaque.Get(OpaqueFWID)
		certFWID, err := CertFWID(leaf)
		switch {
		case !ok:
			rec.skip(CheckFWID, "report carries no FWID opaque field", ErrFWIDNotInReport)
		case err != nil:
			rec.fail(CheckFWID, err)
		case subtle.ConstantTimeCompare(reportFWID, certFWID) != 1:
			rec.fail(CheckFWID, fmt.Errorf("%w: certificate %x, report %x", ErrFWIDMismatch, certFWID, reportFWID))
		default:
			rec.pass(CheckFWID, "leaf certificate FWID equals the report's: "+hex.EncodeToString(certFWID))
		}
	}

	// nonce
	switch {
	case rep == nil:
		rec.skip(CheckNonce, "report did not parse", perr)
	case len(ev.Nonce) == 0:
		rec.skip(CheckNonce, "no verifier nonce supplied", ErrNoNonce)
	case len(ev.Nonce) != NonceSize:
		rec.fail(CheckNonce, fmt.Errorf("%w: %d bytes", ErrNonceLength, len(ev.Nonce)))
	case subtle.ConstantTimeCompare(ev.Nonce, rep.Request.Nonce[:]) != 1:
		rec.fail(CheckNonce, fmt.Errorf("%w: report answers %x, verifier asked %x", ErrNonceMismatch, rep.Request.Nonce[:], ev.Nonce))
	default:
		rec.pass(CheckNonce, "report answers the verifier's nonce "+hex.EncodeToString(ev.Nonce))
	}

	// driver / vbios claims
	claim := func(name, claimed, actual string, sentinel error, equal func(a, b string) bool) {
		switch {
		case claimed == "":
			rec.skip(name, "not claimed by the offer", nil)
		case rep == nil:
			rec.skip(name, "report did not parse", perr)
		case actual == "":
			rec.fail(name, fmt.Errorf("%w: offer claims %q, report carries none", sentinel, claimed))
		case !equal(claimed, actual):
			rec.fail(name, fmt.Errorf("%w: offer claims %q, report says %q", sentinel, claimed, actual))
		default:
			rec.pass(name, fmt.Sprintf("report says %q, as the offer claims", actual))
		}
	}
	claim(CheckDriver, ev.DriverVersion, v.Facts.DriverVersion, ErrDriverMismatch, func(a, b string) bool { return a == b })
	claim(CheckVBIOS, ev.VBIOSVersion, v.Facts.VBIOSVersion, ErrVBIOSMismatch, strings.EqualFold)

	// uuid: nothing in the report or chain carries the NVML UUID.
	if ev.GPUUUID == "" {
		rec.skip(CheckUUID, "not claimed by the offer", nil)
	} else {
		why := "the report and chain do not carry the GPU UUID"
		if v.Facts.DeviceID != "" {
			why += "; the leaf certificate names device " + v.Facts.DeviceID
		}
		rec.skip(CheckUUID, why, fmt.Errorf("%w: claimed %s", ErrUUIDNotBound, ev.GPUUUID))
	}

	// rim
	if rep == nil {
		rec.skip(CheckRIM, "report did not parse", perr)
	} else {
		checkRIMs(rec, rep, v.Facts, opts.RIMs, now)
	}

	rec.skip(CheckRevocation, "offline: OCSP/CRL not consulted", ErrRevocationNotChecked)
	return v
}

func verifyReportSignature(rep *Report, leaf *x509.Certificate) error {
	pub, err := leafP384(leaf)
	if err != nil {
		return err
	}
	h := sha512.Sum384(rep.Signed())
	sig := rep.Response.Signature
	r, s := new(big.Int).SetBytes(sig[:48]), new(big.Int).SetBytes(sig[48:])
	if !ecdsa.Verify(pub, h[:], r, s) {
		return fmt.Errorf("%w: ECDSA P-384 over SHA-384 of the first %d bytes does not verify with the key of %q",
			ErrSignatureInvalid, len(rep.Signed()), certName(leaf))
	}
	return nil
}

func factsOf(rep *Report) Facts {
	o := rep.Response.Opaque
	f := Facts{
		SPDMVersion:       fmt.Sprintf("%d.%d", rep.Request.Version>>4, rep.Request.Version&0xF),
		DriverVersion:     o.String(OpaqueDriverVersion),
		VBIOSVersion:      o.VBIOSVersion(),
		ChipSKU:           o.String(OpaqueChipSKU),
		ChipSKUMod:        o.String(OpaqueChipSKUMod),
		Project:           o.String(OpaqueProject),
		ProjectSKU:        o.String(OpaqueProjectSKU),
		ProjectSKUMod:     o.String(OpaqueProjectSKUMod),
		MeasurementBlocks: len(rep.Response.Blocks),
		RequestNonce:      hex.EncodeToString(rep.Request.Nonce[:]),
	}
	if b, ok := o.Get(OpaqueBoardID); ok && len(b) == 4 {
		f.BoardID = binary.LittleEndian.Uint32(b)
	}
	if b, ok := o.Get(OpaqueFWID); ok {
		f.FWID = hex.EncodeToString(b)
	}
	if b, ok := o.Get(OpaqueNVDEC0Status); ok && len(b) > 0 {
		f.NVDEC0Enabled = b[0] != nvdecStatusDisabled
	}
	return f
}

// checkRIMs selects the supplied manifests that concern this report (VBIOS
// or driver version equal to its colloquialVersion), verifies each, and
// compares the union of their active golden measurements with the report.
func checkRIMs(rec recorder, rep *Report, facts Facts, rims [][]byte, now time.Time) {
	var notes []string
	type match struct {
		kind string // "VBIOS" or "driver"
		rim  *RIM
	}
	var matched []match
	for i, doc := range rims {
		head, err := peekRIM(doc)
		if err != nil {
			notes = append(notes, fmt.Sprintf("RIM %d unreadable (%v)", i, reasonOf(err)))
			continue
		}
		var kind string
		switch {
		case facts.VBIOSVersion != "" && strings.EqualFold(head.ColloquialVersion, facts.VBIOSVersion):
			kind = "VBIOS"
		case facts.DriverVersion != "" && strings.EqualFold(head.ColloquialVersion, facts.DriverVersion):
			kind = "driver"
		default:
			continue
		}
		rim, err := VerifyRIM(doc, now)
		switch {
		case errors.Is(err, ErrRIMUnsupported):
			rec.skip(CheckRIM, fmt.Sprintf("%s RIM %s: signature not checked: %s; measurements not compared",
				kind, head.ColloquialVersion, reasonOf(err)), err)
			return
		case err != nil:
			rec.fail(CheckRIM, fmt.Errorf("%s RIM %s: %w", kind, head.ColloquialVersion, err))
			return
		case !strings.EqualFold(rim.ColloquialVersion, head.ColloquialVersion):
			rec.fail(CheckRIM, fmt.Errorf("%w: RIM %d: signed version %q differs from the unsigned view %q",
				ErrRIMMalformed, i, rim.ColloquialVersion, head.ColloquialVersion))
			return
		}
		if facts.Chip != "" && rim.Product != "" && !strings.EqualFold(rim.Product, facts.Chip) {
			notes = append(notes, fmt.Sprintf("RIM %d is for %s, not %s", i, rim.Product, facts.Chip))
			continue
		}
		matched = append(matched, match{kind, rim})
	}
	if len(matched) == 0 {
		reason := "no reference manifest for VBIOS " + orNone(facts.VBIOSVersion)
		if len(rims) == 0 {
			reason += " (none supplied)"
		} else {
			reason += fmt.Sprintf(" or driver %s among %d supplied", orNone(facts.DriverVersion), len(rims))
		}
		if len(notes) > 0 {
			reason += "; " + strings.Join(notes, "; ")
		}
		rec.skip(CheckRIM, reason, fmt.Errorf("%w: VBIOS %s, driver %s", ErrRIMNoMatch, orNone(facts.VBIOSVersion), orNone(facts.DriverVersion)))
		return
	}

	golden := map[int]GoldenMeasurement{}
	var kinds []string
	haveKind := map[string]bool{}
	for _, m := range matched {
		kinds = append(kinds, m.kind+" "+m.rim.ColloquialVersion)
		haveKind[m.kind] = true
		for _, g := range m.rim.Measurements {
			if !g.Active {
				continue
			}
			if _, dup := golden[g.Index]; dup {
				rec.fail(CheckRIM, fmt.Errorf("%w: two manifests hold active measurement index %d", ErrRIMConflict, g.Index))
				return
			}
			golden[g.Index] = g
		}
	}
	n, err := compareRIM(golden, rep)
	if err != nil {
		rec.fail(CheckRIM, fmt.Errorf("%s: %w", strings.Join(kinds, " + "), err))
		return
	}
	reason := fmt.Sprintf("%s (signed, chain to NVIDIA RIM root valid): %d active measurements match",
		strings.Join(kinds, " + "), n)
	for _, k := range []string{"VBIOS", "driver"} {
		if !haveKind[k] {
			reason += "; no " + k + " manifest: " + k + " measurements not compared"
		}
	}
	rec.pass(CheckRIM, reason)
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
