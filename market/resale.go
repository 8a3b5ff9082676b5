package market

import (
	"bytes"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"

	"github.com/suanli/suanli/proto"
)

// Resale of reserved time, as a reserved-instance marketplace sells it: the
// holder H of a reserved lease L (provider P → H, block [s, e), price p)
// sells the rest of the block. The provider is indifferent: a new buyer B
// gets a new lease L' of the same GPUs from the handover t to e at p, and L
// ends at t as resold, so P is paid p for every millisecond of the block,
// by H then by B. What H asked over p (or gave under it) is a premium
// between H and B alone (ResalePremium).

// ErrResale is returned (wrapped in a *ResaleError) for a resale that does
// not hold.
var ErrResale = errors.New("market: bad resale")

// ResaleError is a refused resale: a label for the rejects metric and the
// reason in words.
type ResaleError struct {
	Label  string // e.g. not-reserved, not-holder, ended, already-resold
	Reason string
}

func (e *ResaleError) Error() string        { return "market: resale refused: " + e.Reason }
func (e *ResaleError) Is(target error) bool { return target == ErrResale }

func resaleErr(label, format string, args ...any) error {
	return &ResaleError{Label: label, Reason: fmt.Sprintf(format, args...)}
}

// ResaleReason is the metric label of a resale refusal: its ResaleError's
// label, or "other".
func ResaleReason(err error) string {
	var re *ResaleError
	if errors.As(err, &re) {
		return re.Label
	}
	return "other"
}

// CheckResellable checks that holder may resell the lease on terms at now:
// a reserved lease it bought whose block has begun and has at least a
// second left.
func CheckResellable(terms *proto.Lease, holder []byte, now time.Time) error {
	if terms == nil {
		return resaleErr("schema", "no lease terms")
	}
	start, end := time.UnixMilli(terms.StartUnixMs), LeaseEnd(terms)
	switch {
	case LeaseType(terms.LeaseType) != Reserved:
		return resaleErr("not-reserved", "lease %s is %s: only reserved time is resold", terms.Id, LeaseType(terms.LeaseType))
	case !bytes.Equal(terms.Buyer, holder):
		return resaleErr("not-holder", "lease %s is not held by the seller", terms.Id)
	case now.Before(start):
		return resaleErr("not-started", "lease %s's block begins at %s: resell it once it has begun", terms.Id, start.UTC().Format(time.RFC3339))
	case end.Sub(now) < time.Second:
		return resaleErr("ended", "lease %s's block ended at %s", terms.Id, end.Format(time.RFC3339))
	}
	return nil
}

// HandoverAt is when a resale of the lease on terms hands over at now: the
// last whole second of the block at or before now, so that the rest is a
// whole number of seconds (a lease's duration). A receipt already signed
// for time after it (chainEndMs: the chain's last window end) refuses it.
func HandoverAt(terms *proto.Lease, chainEndMs int64, now time.Time) (time.Time, error) {
	s, e := terms.StartUnixMs, LeaseEnd(terms).UnixMilli()
	ms := now.UnixMilli()
	if ms < s || ms >= e {
		return time.Time{}, resaleErr("ended", "now is outside lease %s's block", terms.Id)
	}
	t := s + (ms-s)/1000*1000
	if chainEndMs > t {
		return time.Time{}, resaleErr("billing", "lease %s is billed to %d, after the handover at %d; retry in a second", terms.Id, chainEndMs, t)
	}
	if e-t < 1000 {
		return time.Time{}, resaleErr("ended", "lease %s has under a second left", terms.Id)
	}
	return time.UnixMilli(t), nil
}

// ResoldTerms are the terms of the lease a resale of l gives buyer from
// the handover at on: l's own, for the rest of its block, under the new ID.
func ResoldTerms(l *proto.Lease, buyer []byte, id string, at time.Time) *proto.Lease {
	n := &proto.Lease{
		Id: id, Provider: l.Provider, Buyer: buyer, Gpus: slices.Clone(l.Gpus), PriceMicros: l.PriceMicros,
		Currency: l.Currency, LeaseType: l.LeaseType, BillingIntervalS: l.BillingIntervalS, StartUnixMs: at.UnixMilli(),
		Market: l.Market, PreemptionNoticeS: l.PreemptionNoticeS, BillingIncrementS: l.BillingIncrementS,
		UtcOffsetMinutes: l.UtcOffsetMinutes,
	}
	for _, w := range l.Schedule {
		n.Schedule = append(n.Schedule, &proto.PriceWindow{FromMinute: w.FromMinute, ToMinute: w.ToMinute, BasisPoints: w.BasisPoints})
	}
	n.DurationS = (LeaseEnd(l).UnixMilli() - n.StartUnixMs) / 1000
	return n
}

// CheckResoldTerms checks that n is the lease a resale of l gives buyer:
// from the same provider, on the same GPUs, at the same price and terms,
// from a handover on l's whole-second grid within the block to its end.
func CheckResoldTerms(l, n *proto.Lease, buyer []byte) error {
	if l == nil || n == nil {
		return resaleErr("schema", "no lease terms")
	}
	if err := ValidateTerms(n); err != nil {
		return resaleErr("wrong-terms", "new lease: %v", err)
	}
	sameSchedule := slices.EqualFunc(l.Schedule, n.Schedule, func(a, b *proto.PriceWindow) bool {
		return a.FromMinute == b.FromMinute && a.ToMinute == b.ToMinute && a.BasisPoints == b.BasisPoints
	})
	switch {
	case !bytes.Equal(n.Provider, l.Provider):
		return resaleErr("bad-provider", "new lease's provider is not the resold lease's")
	case !bytes.Equal(n.Buyer, buyer):
		return resaleErr("wrong-terms", "new lease's buyer is not the taker")
	case !slices.Equal(n.Gpus, l.Gpus):
		return resaleErr("wrong-gpus", "new lease is on GPUs %v, the resold lease on %v", n.Gpus, l.Gpus)
	case n.PriceMicros != l.PriceMicros || n.Currency != l.Currency:
		return resaleErr("wrong-price", "new lease at %d %s, the resold lease at %d %s", n.PriceMicros, n.Currency, l.PriceMicros, l.Currency)
	case n.LeaseType != l.LeaseType || n.Market != l.Market:
		return resaleErr("wrong-terms", "new lease's type or market differs")
	case n.BillingIntervalS != l.BillingIntervalS || n.BillingIncrementS != l.BillingIncrementS ||
		n.PreemptionNoticeS != l.PreemptionNoticeS || n.UtcOffsetMinutes != l.UtcOffsetMinutes || !sameSchedule:
		return resaleErr("wrong-terms", "new lease's billing terms differ")
	case n.StartUnixMs < l.StartUnixMs || (n.StartUnixMs-l.StartUnixMs)%1000 != 0:
		return resaleErr("wrong-duration", "new lease starts at %d, not on the block's seconds from %d", n.StartUnixMs, l.StartUnixMs)
	case n.DurationS < 1 || !LeaseEnd(n).Equal(LeaseEnd(l)):
		return resaleErr("wrong-duration", "new lease ends %s, the block %s", LeaseEnd(n).Format(time.RFC3339), LeaseEnd(l).Format(time.RFC3339))
	}
	return nil
}

// ResaleDurationSlack is how far a bid taking a resale ask may want more
// or less than what is left of the block: a buyer types a duration (say
// the rest rounded to the minute) while the rest shrinks every second.
// The new lease always runs the rest of the block.
const ResaleDurationSlack = time.Minute

// ResalePremium is what a resale at resalePrice of gpus GPUs leased at
// leasePrice (both micro-units per GPU-hour) is worth over ms milliseconds:
// (resalePrice − leasePrice) × gpus × ms / 3,600,000, rounded half away
// from zero. Positive: the new buyer pays the holder; negative: the holder
// pays the new buyer.
func ResalePremium(resalePrice, leasePrice int64, gpus uint32, ms int64) (int64, error) {
	switch {
	case resalePrice <= 0 || resalePrice > MaxPriceMicros || leasePrice <= 0 || leasePrice > MaxPriceMicros:
		return 0, resaleErr("bad-price", "prices %d and %d", resalePrice, leasePrice)
	case gpus == 0 || gpus > MaxOrderQuantity:
		return 0, resaleErr("bad-quantity", "%d GPUs", gpus)
	case ms < 0 || ms > MaxLeaseDuration.Milliseconds():
		return 0, resaleErr("wrong-duration", "%d ms", ms)
	}
	num := big.NewInt(resalePrice - leasePrice)
	num.Mul(num, big.NewInt(int64(gpus)))
	num.Mul(num, big.NewInt(ms))
	const hour = 3_600_000
	neg := num.Sign() < 0
	num.Abs(num)
	q, r := new(big.Int).QuoRem(num, big.NewInt(hour), new(big.Int))
	if r.Int64()*2 >= hour {
		q.Add(q, big.NewInt(1))
	}
	if !q.IsInt64() {
		return 0, resaleErr("bad-price", "premium overflows")
	}
	if neg {
		return -q.Int64(), nil
	}
	return q.Int64(), nil
}

// NewPremium is the premium record of a resale of l as n to buyer by
// holder at resalePrice, created at now.
func NewPremium(l, n *proto.Lease, resalePrice int64, now time.Time) (*proto.Premium, error) {
	end := LeaseEnd(l).UnixMilli()
	amount, err := ResalePremium(resalePrice, l.PriceMicros, uint32(len(l.Gpus)), end-n.StartUnixMs)
	if err != nil {
		return nil, err
	}
	return &proto.Premium{
		LeaseId: l.Id, NewLeaseId: n.Id, Holder: l.Buyer, Buyer: n.Buyer, Provider: l.Provider, Gpus: uint32(len(l.Gpus)),
		FromUnixMs: n.StartUnixMs, EndUnixMs: end, LeasePriceMicros: l.PriceMicros, ResalePriceMicros: resalePrice,
		Currency: l.Currency, PremiumMicros: amount, CreatedUnixMs: now.UnixMilli(),
	}, nil
}

// CheckPremium checks a premium signed by signer for the resale of l as n
// at resalePrice: signed by l's holder, naming both leases and parties, and
// its amount what ResalePremium gives.
func CheckPremium(p *proto.Premium, signer []byte, l, n *proto.Lease, resalePrice int64, now time.Time) error {
	if p == nil || l == nil || n == nil {
		return resaleErr("schema", "no premium")
	}
	want, err := NewPremium(l, n, resalePrice, time.UnixMilli(p.CreatedUnixMs))
	if err != nil {
		return err
	}
	created := time.UnixMilli(p.CreatedUnixMs)
	switch {
	case !bytes.Equal(signer, l.Buyer) || !bytes.Equal(p.Holder, l.Buyer):
		return resaleErr("not-holder", "premium not signed by the lease's holder")
	case p.LeaseId != want.LeaseId || p.NewLeaseId != want.NewLeaseId || !bytes.Equal(p.Buyer, want.Buyer) ||
		!bytes.Equal(p.Provider, want.Provider) || p.Gpus != want.Gpus:
		return resaleErr("bad-premium", "premium names other leases or parties")
	case p.FromUnixMs != want.FromUnixMs || p.EndUnixMs != want.EndUnixMs:
		return resaleErr("bad-premium", "premium covers %d–%d, the resale %d–%d", p.FromUnixMs, p.EndUnixMs, want.FromUnixMs, want.EndUnixMs)
	case p.LeasePriceMicros != want.LeasePriceMicros || p.ResalePriceMicros != want.ResalePriceMicros || p.Currency != want.Currency:
		return resaleErr("wrong-price", "premium prices %d/%d %s, the resale's %d/%d %s", p.ResalePriceMicros, p.LeasePriceMicros,
			p.Currency, want.ResalePriceMicros, want.LeasePriceMicros, want.Currency)
	case p.PremiumMicros != want.PremiumMicros:
		return resaleErr("bad-premium", "premium of %d, the resale's is %d", p.PremiumMicros, want.PremiumMicros)
	case created.Sub(now) > MaxClockSkew || now.Sub(created) > MaxClockSkew:
		return resaleErr("stale", "premium created %s, now %s", created.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	return nil
}

// CheckHandover checks a holder's handover, signed by signer, of the lease
// on terms at now: the lease's buyer's own, fresh, naming a new buyer that
// is neither party to the lease.
func CheckHandover(h *proto.Handover, signer []byte, terms *proto.Lease, now time.Time) error {
	if h == nil || terms == nil {
		return resaleErr("schema", "no handover")
	}
	created := time.UnixMilli(h.CreatedUnixMs)
	switch {
	case h.LeaseId != terms.Id:
		return resaleErr("schema", "handover of lease %q, not %q", h.LeaseId, terms.Id)
	case !bytes.Equal(signer, terms.Buyer) || !bytes.Equal(h.Holder, terms.Buyer):
		return resaleErr("not-holder", "handover of lease %s not signed by its holder", terms.Id)
	case len(h.Buyer) == 0 || len(h.Buyer) > MaxMakerLen || bytes.Equal(h.Buyer, terms.Buyer) || bytes.Equal(h.Buyer, terms.Provider):
		return resaleErr("bad-buyer", "handover to a party of the lease, or to no one")
	case len(h.Take) == 0 || h.AskId == "" || len(h.AskId) > MaxOrderIDLen:
		return resaleErr("schema", "handover without the take or the ask")
	case created.Sub(now) > MaxClockSkew || now.Sub(created) > MaxClockSkew:
		return resaleErr("stale", "handover created %s, now %s", created.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	return CheckResellable(terms, h.Holder, now)
}
