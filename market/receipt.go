package market

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"

	"github.com/suanli/suanli/proto"
)

// Billing rule. A lease is billed for the GPU time its provider held for the
// buyer, metered to the millisecond, at the lease's price per GPU-hour:
//
//	cumulative_micros(n) = ceil(price_micros × cumulative_gpu_ms(n) / 3,600,000)
//	amount_micros(n)     = cumulative_micros(n) − cumulative_micros(n−1)
//
// The rounding (up, to the micro-unit) is applied to the running total, never
// to each window, so however a lease is cut into windows its total is the
// same and at most 1 micro-unit above the exact price: a window's amount is
// ceil(price × gpu_ms / 3,600,000) or one less. (Rounding each window up
// would overcharge by up to a micro-unit per window — 40 micro-units an hour
// on a $2/GPU-hour lease billed every minute — and would let a provider gain
// by cutting windows short.)
//
// Windows lie on the lease's billing grid: the first starts at the lease
// start, each next one starts where the previous ended, and each ends at the
// next grid point start + k × billing interval, except the lease's last
// window, which ends at the lease's end or earlier when the lease closed
// early. A window that ends off the grid is therefore the last. Within a
// window, each GPU's gpu_ms is at most the window's length — less when the
// GPU was unavailable, which bills the buyer less.

// MillisPerHour is the divisor of the billing rule: prices are per GPU-hour,
// GPU time is metered in milliseconds.
const MillisPerHour = 3_600_000

// MaxUtilizationPermille is the most a GPU's mean utilization may be.
const MaxUtilizationPermille = 1000

// Reasons a lease's terms, a receipt or a countersignature are refused. Each
// is returned wrapped with detail; use errors.Is to tell them apart and
// Reason for a metrics label. Forged signatures are the p2p layer's to
// refuse: everything here has been decoded from a verified envelope.
var (
	// ErrLeaseTerms is returned when a lease's terms are missing or out of
	// bounds.
	ErrLeaseTerms = errors.New("market: lease terms invalid")
	// ErrReceiptSchema is returned when a receipt is missing, carries a nil
	// usage entry, or its hash is not a SHA-256.
	ErrReceiptSchema = errors.New("market: receipt malformed")
	// ErrReceiptLease is returned when a receipt names another lease or
	// another provider than the lease's.
	ErrReceiptLease = errors.New("market: receipt is for another lease")
	// ErrReceiptSeq is returned when a receipt's seq is not the next one:
	// replayed, stale (out of order) or leaving a gap.
	ErrReceiptSeq = errors.New("market: receipt out of sequence")
	// ErrReceiptChain is returned when a receipt's prev_hash does not name
	// the previous receipt.
	ErrReceiptChain = errors.New("market: receipt does not link to the previous one")
	// ErrReceiptWindow is returned when a receipt's window leaves a gap or
	// overlaps the previous one, is empty, leaves the billing grid or the
	// lease, follows the lease's last window, or lies in the future.
	ErrReceiptWindow = errors.New("market: receipt window invalid")
	// ErrReceiptGPUs is returned when a receipt's usage does not list
	// exactly the lease's GPUs, in the lease's order.
	ErrReceiptGPUs = errors.New("market: receipt GPUs differ from the lease's")
	// ErrReceiptUsage is returned when a GPU's metered time exceeds the
	// window, its utilization exceeds 1000‰, or the usage does not sum to
	// the receipt's gpu_ms.
	ErrReceiptUsage = errors.New("market: receipt usage invalid")
	// ErrReceiptAmount is returned when a receipt's amount over- or
	// under-charges the billing rule.
	ErrReceiptAmount = errors.New("market: receipt amount wrong")
	// ErrReceiptCumulative is returned when a receipt's cumulative GPU time
	// or amount is not the previous total plus this window's.
	ErrReceiptCumulative = errors.New("market: receipt cumulative total wrong")
	// ErrCountersign is returned when a countersignature does not name its
	// receipt (lease, seq, hash) or is not the lease's buyer's.
	ErrCountersign = errors.New("market: countersignature does not match its receipt")
	// ErrEquivocation is returned (as an *Evidence) when a provider signed
	// two different receipts for the same lease and seq.
	ErrEquivocation = errors.New("market: provider signed two receipts with the same seq")
)

// Evidence proves a provider equivocated: it signed two different receipts,
// Hashes[0] < Hashes[1], for the same lease and seq. Holding both envelopes
// (which the caller looks up by hash) convicts it. It is an error that
// matches ErrEquivocation.
type Evidence struct {
	LeaseID  string
	Seq      uint64
	Provider []byte
	Hashes   [2][]byte
}

func (e *Evidence) Error() string {
	return fmt.Sprintf("%v: lease %q seq %d: receipts %x and %x", ErrEquivocation, e.LeaseID, e.Seq, e.Hashes[0], e.Hashes[1])
}

// Unwrap returns ErrEquivocation.
func (e *Evidence) Unwrap() error { return ErrEquivocation }

func newEvidence(leaseID string, seq uint64, provider, a, b []byte) *Evidence {
	if bytes.Compare(a, b) > 0 {
		a, b = b, a
	}
	return &Evidence{LeaseID: leaseID, Seq: seq, Provider: bytes.Clone(provider),
		Hashes: [2][]byte{bytes.Clone(a), bytes.Clone(b)}}
}

// ValidateTerms checks a lease's terms are complete and within bounds: an
// ID, distinct provider and buyer, 1..MaxOrderQuantity distinct GPU UUIDs, a
// price in 1..MaxPriceMicros of a known currency, a known lease type, a
// duration in 1 s..MaxLeaseDuration, a billing interval of at least 1 s and
// a start time.
func ValidateTerms(terms *proto.Lease) error {
	if err := termsUsable(terms); err != nil {
		return err
	}
	switch {
	case len(terms.Id) > MaxOrderIDLen:
		return fmt.Errorf("%w: ID longer than %d bytes", ErrLeaseTerms, MaxOrderIDLen)
	case len(terms.Provider) == 0 || len(terms.Buyer) == 0 || len(terms.Provider) > MaxMakerLen || len(terms.Buyer) > MaxMakerLen:
		return fmt.Errorf("%w: provider or buyer missing or too long", ErrLeaseTerms)
	case bytes.Equal(terms.Provider, terms.Buyer):
		return fmt.Errorf("%w: provider and buyer are the same peer", ErrLeaseTerms)
	case !LeaseType(terms.LeaseType).valid():
		return fmt.Errorf("%w: lease type %d", ErrLeaseTerms, terms.LeaseType)
	case !ValidBillingIncrement(time.Duration(terms.BillingIncrementS) * time.Second):
		return fmt.Errorf("%w: billing increment %d s (want 0, 1, 60 or 3600)", ErrLeaseTerms, terms.BillingIncrementS)
	case len(terms.Schedule) > 0 && terms.BillingIncrementS > 0:
		return fmt.Errorf("%w: a price schedule bills each window to the millisecond: no billing increment with it", ErrLeaseTerms)
	}
	if err := ValidateSchedule(terms.Schedule, terms.UtcOffsetMinutes); err != nil {
		return fmt.Errorf("%w: %w", ErrLeaseTerms, err)
	}
	if _, err := LookupCurrency(terms.Currency); err != nil {
		return fmt.Errorf("%w: %w", ErrLeaseTerms, err)
	}
	seen := make(map[string]struct{}, len(terms.Gpus))
	for _, g := range terms.Gpus {
		if g == "" || len(g) > 128 {
			return fmt.Errorf("%w: GPU UUID %q", ErrLeaseTerms, g)
		}
		if _, dup := seen[g]; dup {
			return fmt.Errorf("%w: GPU %s leased twice", ErrLeaseTerms, g)
		}
		seen[g] = struct{}{}
	}
	return nil
}

// termsUsable is the part of ValidateTerms the receipt arithmetic relies on;
// it does not allocate.
func termsUsable(terms *proto.Lease) error {
	switch {
	case terms == nil:
		return fmt.Errorf("%w: missing", ErrLeaseTerms)
	case terms.Id == "":
		return fmt.Errorf("%w: no ID", ErrLeaseTerms)
	case len(terms.Gpus) == 0 || len(terms.Gpus) > MaxOrderQuantity:
		return fmt.Errorf("%w: %d GPUs, want 1..%d", ErrLeaseTerms, len(terms.Gpus), MaxOrderQuantity)
	case terms.PriceMicros <= 0 || terms.PriceMicros > MaxPriceMicros:
		return fmt.Errorf("%w: price %d micros", ErrLeaseTerms, terms.PriceMicros)
	case terms.DurationS <= 0 || terms.DurationS > int64(MaxLeaseDuration/time.Second):
		return fmt.Errorf("%w: duration %d s", ErrLeaseTerms, terms.DurationS)
	case terms.BillingIntervalS <= 0 || terms.BillingIntervalS > int64(MaxLeaseDuration/time.Second):
		return fmt.Errorf("%w: billing interval %d s", ErrLeaseTerms, terms.BillingIntervalS)
	case terms.StartUnixMs <= 0 || terms.StartUnixMs > math.MaxInt64/2:
		return fmt.Errorf("%w: start %d", ErrLeaseTerms, terms.StartUnixMs)
	case terms.BillingIncrementS < 0 || terms.BillingIncrementS > 3600:
		return fmt.Errorf("%w: billing increment %d s", ErrLeaseTerms, terms.BillingIncrementS)
	}
	return nil
}

// ValidBillingIncrement reports whether d is a billing increment leases
// may name: none (to the millisecond), a second, a minute or an hour.
func ValidBillingIncrement(d time.Duration) bool {
	return d == 0 || d == time.Second || d == time.Minute || d == time.Hour
}

// BillableGPUMillis is the GPU time charged for cumulativeGPUMillis of a
// lease: rounded up to whole billing increments of all its GPUs (per
// second, minute or hour, every started unit in full), or as metered when
// the lease names no increment.
func BillableGPUMillis(terms *proto.Lease, cumulativeGPUMillis uint64) uint64 {
	unit := uint64(terms.GetBillingIncrementS()) * 1000 * uint64(len(terms.GetGpus()))
	if unit == 0 || cumulativeGPUMillis == 0 {
		return cumulativeGPUMillis
	}
	return (cumulativeGPUMillis + unit - 1) / unit * unit
}

// LeaseCharge is what a lease owes once cumulativeGPUMillis have been
// metered: Charge of the billable time (BillableGPUMillis).
func LeaseCharge(terms *proto.Lease, cumulativeGPUMillis uint64) (int64, error) {
	return Charge(terms.PriceMicros, BillableGPUMillis(terms, cumulativeGPUMillis))
}

// leaseEndMs is the lease's end in Unix milliseconds: start + duration.
func leaseEndMs(terms *proto.Lease) int64 { return terms.StartUnixMs + terms.DurationS*1000 }

// Charge is what gpuMillis of GPU time costs at priceMicros per GPU-hour,
// rounded up to the micro-unit: ceil(priceMicros × gpuMillis / 3,600,000).
// It is exact (128-bit) and fails with ErrReceiptAmount only when the price
// is negative or the result does not fit in int64.
func Charge(priceMicros int64, gpuMillis uint64) (int64, error) {
	if priceMicros < 0 {
		return 0, fmt.Errorf("%w: negative price %d", ErrReceiptAmount, priceMicros)
	}
	hi, lo := bits.Mul64(uint64(priceMicros), gpuMillis)
	lo, carry := bits.Add64(lo, MillisPerHour-1, 0)
	hi += carry
	if hi >= MillisPerHour {
		return 0, fmt.Errorf("%w: %d GPU-ms at %d micros overflows", ErrReceiptAmount, gpuMillis, priceMicros)
	}
	q, _ := bits.Div64(hi, lo, MillisPerHour)
	if q > math.MaxInt64 {
		return 0, fmt.Errorf("%w: %d GPU-ms at %d micros overflows", ErrReceiptAmount, gpuMillis, priceMicros)
	}
	return int64(q), nil
}

// ReceiptState is what checking a lease's next receipt needs to know of the
// chain so far: its last receipt. The zero ReceiptState (or a nil one) is
// the chain before its first receipt.
type ReceiptState struct {
	Seq             uint64
	Hash            []byte // proto.ReceiptHash of the receipt's envelope
	WindowEndUnixMs int64
	GPUMillis       uint64 // cumulative
	Cumulative      int64  // micro-units, cumulative
}

// StateOf is the chain's state once r, whose envelope hashes to receiptHash,
// is its last receipt. It copies the hash.
func StateOf(r *proto.Receipt, receiptHash []byte) ReceiptState {
	return stateOf(r, bytes.Clone(receiptHash))
}

// stateOf is StateOf keeping the hash slice it is given.
func stateOf(r *proto.Receipt, receiptHash []byte) ReceiptState {
	return ReceiptState{
		Seq:             r.GetSeq(),
		Hash:            receiptHash,
		WindowEndUnixMs: r.GetWindowEndUnixMs(),
		GPUMillis:       r.GetCumulativeGpuMs(),
		Cumulative:      r.GetCumulativeMicros(),
	}
}

// Window is a billing window [Start, End).
type Window struct {
	Start, End time.Time
}

// NextWindow is the window the receipt after prev (nil: the first) must
// cover when the lease runs on: from where prev ended to the next point of
// the billing grid or the lease's end. ok is false when prev was the lease's
// last window (it ended at the lease's end or off the grid) or the terms are
// unusable.
func NextWindow(terms *proto.Lease, prev *ReceiptState) (w Window, ok bool) {
	if termsUsable(terms) != nil {
		return Window{}, false
	}
	start, end, ok := nextWindowMs(terms, prevEndMs(terms, prev))
	if !ok {
		return Window{}, false
	}
	return Window{time.UnixMilli(start).UTC(), time.UnixMilli(end).UTC()}, true
}

func prevEndMs(terms *proto.Lease, prev *ReceiptState) int64 {
	if prev == nil || prev.Seq == 0 {
		return terms.StartUnixMs
	}
	return prev.WindowEndUnixMs
}

// nextWindowMs is NextWindow in Unix milliseconds, after a window that ended
// at prevEnd. The terms must be usable.
//
// The grid is the lease's start plus whole billing intervals, and, with a
// price schedule, the schedule's boundaries too: a window never spans a
// price change.
func nextWindowMs(terms *proto.Lease, prevEnd int64) (start, end int64, ok bool) {
	s, e, iv := terms.StartUnixMs, leaseEndMs(terms), terms.BillingIntervalS*1000
	if prevEnd < s || prevEnd >= e || ((prevEnd-s)%iv != 0 && !isBoundary(terms, prevEnd)) {
		return 0, 0, false
	}
	end = min(s+((prevEnd-s)/iv+1)*iv, e)
	if len(terms.Schedule) > 0 {
		end = min(end, nextBoundaryMs(terms.Schedule, terms.UtcOffsetMinutes, prevEnd))
	}
	return prevEnd, end, true
}

// VerifyNext checks that r, whose signed envelope hashes to receiptHash
// (proto.ReceiptHash), is the lease's next receipt after prev (nil before the
// first): for this lease and its provider; seq prev+1 (ErrReceiptSeq for a
// replayed, stale or gap-leaving seq; an *Evidence, ErrEquivocation, for a
// different receipt with prev's seq); linked to prev by prev_hash
// (ErrReceiptChain); its window the next one on the billing grid, inside the
// lease, ended and signed by now (ErrReceiptWindow); usage for exactly the
// lease's GPUs in its order (ErrReceiptGPUs), each within the window and at
// most 1000‰ utilized, summing to gpu_ms (ErrReceiptUsage); cumulative GPU
// time and amount that add up (ErrReceiptCumulative); and an amount that
// follows the billing rule (ErrReceiptAmount). It neither allocates nor
// retains anything on success.
func VerifyNext(terms *proto.Lease, prev *ReceiptState, r *proto.Receipt, receiptHash []byte, now time.Time) error {
	return verifyNext(terms, prev, r, receiptHash, now, true)
}

// verifyNext is VerifyNext; checkClock false skips the checks against now,
// for re-verifying stored chains.
func verifyNext(terms *proto.Lease, prev *ReceiptState, r *proto.Receipt, hash []byte, now time.Time, checkClock bool) error {
	if err := termsUsable(terms); err != nil {
		return err
	}
	switch {
	case r == nil:
		return fmt.Errorf("%w: missing", ErrReceiptSchema)
	case len(hash) != proto.ReceiptHashSize:
		return fmt.Errorf("%w: receipt hash is %d bytes, want %d", ErrReceiptSchema, len(hash), proto.ReceiptHashSize)
	case r.LeaseId != terms.Id:
		return fmt.Errorf("%w: receipt for lease %q, want %q", ErrReceiptLease, r.LeaseId, terms.Id)
	case !bytes.Equal(r.Provider, terms.Provider):
		return fmt.Errorf("%w: receipt from a peer other than the lease's provider", ErrReceiptLease)
	}
	var p ReceiptState
	if prev != nil {
		p = *prev
	}
	pEnd := prevEndMs(terms, prev)

	// Sequence and link.
	switch {
	case r.Seq == 0:
		return fmt.Errorf("%w: seq 0; receipts count from 1", ErrReceiptSeq)
	case r.Seq == p.Seq && p.Seq > 0 && !bytes.Equal(hash, p.Hash):
		return newEvidence(r.LeaseId, r.Seq, r.Provider, hash, p.Hash)
	case r.Seq == p.Seq:
		return fmt.Errorf("%w: seq %d replayed", ErrReceiptSeq, r.Seq)
	case r.Seq < p.Seq:
		return fmt.Errorf("%w: seq %d is stale, chain is at %d", ErrReceiptSeq, r.Seq, p.Seq)
	case r.Seq-p.Seq != 1:
		return fmt.Errorf("%w: seq %d leaves a gap after %d", ErrReceiptSeq, r.Seq, p.Seq)
	}
	if r.Seq == 1 && len(r.PrevHash) != 0 {
		return fmt.Errorf("%w: first receipt has a prev_hash", ErrReceiptChain)
	}
	if r.Seq > 1 && !bytes.Equal(r.PrevHash, p.Hash) {
		return fmt.Errorf("%w: prev_hash %x, previous receipt is %x", ErrReceiptChain, r.PrevHash, p.Hash)
	}

	// Window.
	ws, we := r.WindowStartUnixMs, r.WindowEndUnixMs
	switch {
	case ws > pEnd:
		return fmt.Errorf("%w: starts at %d, leaving a gap after %d", ErrReceiptWindow, ws, pEnd)
	case ws < pEnd:
		return fmt.Errorf("%w: starts at %d, overlapping the time before %d", ErrReceiptWindow, ws, pEnd)
	case we <= ws:
		return fmt.Errorf("%w: empty or inverted [%d, %d)", ErrReceiptWindow, ws, we)
	}
	_, gridEnd, ok := nextWindowMs(terms, pEnd)
	switch {
	case !ok:
		return fmt.Errorf("%w: the lease's last window ended at %d", ErrReceiptWindow, pEnd)
	case we > leaseEndMs(terms):
		return fmt.Errorf("%w: ends at %d, after the lease's end %d", ErrReceiptWindow, we, leaseEndMs(terms))
	case we > gridEnd:
		return fmt.Errorf("%w: ends at %d, past the billing grid point %d", ErrReceiptWindow, we, gridEnd)
	case r.CreatedUnixMs < we:
		return fmt.Errorf("%w: signed at %d, before the window ended at %d", ErrReceiptWindow, r.CreatedUnixMs, we)
	}
	if checkClock {
		if limit := now.Add(MaxClockSkew).UnixMilli(); we > limit || r.CreatedUnixMs > limit {
			return fmt.Errorf("%w: window ending at %d or signed at %d is in the future", ErrReceiptWindow, we, r.CreatedUnixMs)
		}
	}

	// GPUs and usage.
	if len(r.Usage) != len(terms.Gpus) {
		return fmt.Errorf("%w: usage for %d GPUs, the lease has %d", ErrReceiptGPUs, len(r.Usage), len(terms.Gpus))
	}
	winMs := uint64(we - ws)
	var sum uint64
	for i, u := range r.Usage {
		switch {
		case u == nil:
			return fmt.Errorf("%w: usage %d missing", ErrReceiptSchema, i)
		case u.Uuid != terms.Gpus[i]:
			return fmt.Errorf("%w: usage %d is for %q, want %q", ErrReceiptGPUs, i, u.Uuid, terms.Gpus[i])
		case u.GpuMs > winMs:
			return fmt.Errorf("%w: %s metered %d ms in a %d ms window", ErrReceiptUsage, u.Uuid, u.GpuMs, winMs)
		case u.MeanUtilizationPermille > MaxUtilizationPermille:
			return fmt.Errorf("%w: %s utilization %d‰", ErrReceiptUsage, u.Uuid, u.MeanUtilizationPermille)
		}
		sum += u.GpuMs
	}
	if sum != r.GpuMs {
		return fmt.Errorf("%w: gpu_ms %d, usage sums to %d", ErrReceiptUsage, r.GpuMs, sum)
	}

	// Money.
	if r.CumulativeGpuMs != p.GPUMillis+r.GpuMs {
		return fmt.Errorf("%w: cumulative gpu_ms %d, want %d + %d", ErrReceiptCumulative, r.CumulativeGpuMs, p.GPUMillis, r.GpuMs)
	}
	total, err := ReceiptTotal(terms, p.Cumulative, p.GPUMillis, r.GpuMs, ws)
	if err != nil {
		return err
	}
	want := total - p.Cumulative
	switch {
	case r.AmountMicros > want:
		return fmt.Errorf("%w: over-charges %d micros for %d GPU-ms, want %d", ErrReceiptAmount, r.AmountMicros, r.GpuMs, want)
	case r.AmountMicros < want:
		return fmt.Errorf("%w: under-charges %d micros for %d GPU-ms, want %d", ErrReceiptAmount, r.AmountMicros, r.GpuMs, want)
	case r.CumulativeMicros != p.Cumulative+want:
		return fmt.Errorf("%w: cumulative %d micros, want %d + %d", ErrReceiptCumulative, r.CumulativeMicros, p.Cumulative, want)
	}
	return nil
}

// VerifyCountersign checks that c countersigns r, whose envelope hashes to
// receiptHash, for the lease's buyer: same lease and seq, the receipt's hash,
// the lease's buyer (ErrCountersign).
func VerifyCountersign(terms *proto.Lease, r *proto.Receipt, receiptHash []byte, c *proto.Countersign) error {
	switch {
	case terms == nil || r == nil || c == nil:
		return fmt.Errorf("%w: missing", ErrCountersign)
	case c.LeaseId != terms.Id || r.LeaseId != terms.Id:
		return fmt.Errorf("%w: countersigns lease %q, want %q", ErrCountersign, c.LeaseId, terms.Id)
	case c.Seq != r.Seq:
		return fmt.Errorf("%w: countersigns seq %d, want %d", ErrCountersign, c.Seq, r.Seq)
	case len(receiptHash) != proto.ReceiptHashSize || !bytes.Equal(c.ReceiptHash, receiptHash):
		return fmt.Errorf("%w: countersigns receipt %x, want %x", ErrCountersign, c.ReceiptHash, receiptHash)
	case !bytes.Equal(c.Buyer, terms.Buyer):
		return fmt.Errorf("%w: signed by a peer other than the lease's buyer", ErrCountersign)
	}
	return nil
}

// SignedReceiptDecoded is one link of a stored or exported receipt chain,
// decoded from verified envelopes: the provider's receipt, the hash of its
// envelope, and the buyer's countersignature (nil when there is none yet).
type SignedReceiptDecoded struct {
	Receipt     *proto.Receipt
	Hash        []byte // proto.ReceiptHash of the receipt envelope
	Countersign *proto.Countersign
}

// DetectEquivocation returns an *Evidence (matching ErrEquivocation) when a
// and b are different receipts — different hashes — the same provider signed
// for the same lease and seq, and nil otherwise.
func DetectEquivocation(a, b SignedReceiptDecoded) error {
	ra, rb := a.Receipt, b.Receipt
	if ra == nil || rb == nil || ra.LeaseId != rb.LeaseId || ra.Seq != rb.Seq ||
		!bytes.Equal(ra.Provider, rb.Provider) || bytes.Equal(a.Hash, b.Hash) {
		return nil
	}
	return newEvidence(ra.LeaseId, ra.Seq, ra.Provider, a.Hash, b.Hash)
}

// ChainSummary is what a verified receipt chain comes to.
type ChainSummary struct {
	// Last is the chain's last receipt (Seq 0 for an empty chain).
	Last ReceiptState
	// Countersigned is its last countersigned receipt (Seq 0 for none):
	// its Cumulative is what the buyer owes for the lease.
	Countersigned ReceiptState
}

// VerifyChain re-verifies a lease's whole receipt chain from scratch, in seq
// order from 1, as VerifyNext does except for the checks against a clock,
// and checks every countersignature present. Receipts after the last
// countersigned one may lack one; earlier ones may too, since countersigning
// a receipt accepts the chain it links to. Errors name the failing seq.
func VerifyChain(terms *proto.Lease, chain []SignedReceiptDecoded) (ChainSummary, error) {
	s, err := verifyChain(terms, chain)
	s.Last.Hash, s.Countersigned.Hash = bytes.Clone(s.Last.Hash), bytes.Clone(s.Countersigned.Hash)
	return s, err
}

func verifyChain(terms *proto.Lease, chain []SignedReceiptDecoded) (ChainSummary, error) {
	var s ChainSummary
	if err := ValidateTerms(terms); err != nil {
		return s, err
	}
	for i, e := range chain {
		if err := verifyNext(terms, &s.Last, e.Receipt, e.Hash, time.Time{}, false); err != nil {
			return s, fmt.Errorf("receipt %d of %d: %w", i+1, len(chain), err)
		}
		s.Last = stateOf(e.Receipt, e.Hash)
		if e.Countersign != nil {
			if err := VerifyCountersign(terms, e.Receipt, e.Hash, e.Countersign); err != nil {
				return s, fmt.Errorf("receipt %d of %d: %w", i+1, len(chain), err)
			}
			s.Countersigned = s.Last
		}
	}
	return s, nil
}

func init() {
	reasons = append(reasons, []struct {
		err   error
		label string
	}{
		{ErrLeaseTerms, "lease-terms"},
		{ErrBadTransition, "bad-transition"},
		{ErrReceiptSchema, "receipt-schema"},
		{ErrReceiptLease, "receipt-lease"},
		{ErrReceiptSeq, "receipt-seq"},
		{ErrReceiptChain, "receipt-chain"},
		{ErrReceiptWindow, "receipt-window"},
		{ErrReceiptGPUs, "receipt-gpus"},
		{ErrReceiptUsage, "receipt-usage"},
		{ErrReceiptAmount, "receipt-amount"},
		{ErrReceiptCumulative, "receipt-cumulative"},
		{ErrCountersign, "countersign"},
		{ErrEquivocation, "equivocation"},
		{ErrLedgerParty, "ledger-party"},
		{ErrLedgerConflict, "ledger-conflict"},
		{ErrLedgerOverflow, "ledger-overflow"},
		{ErrPayment, "bad-payment"},
	}...)
}
