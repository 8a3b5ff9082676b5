package market

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/suanli/suanli/proto"
)

// Preemption rules: a provider whose GPUs are all leased may take a
// higher-priority trade by interrupting spot leases, lowest price first.
// On-demand and reserved trades outrank every spot lease; a spot trade
// outranks a spot lease only when it pays at least DefaultPreemptMarginBP
// (or the provider's margin) more per GPU-hour. On-demand and reserved
// leases are never preempted.

// DefaultPreemptMarginBP is how much more, in basis points, a spot trade
// must pay per GPU-hour to preempt a running spot lease.
const DefaultPreemptMarginBP = 2000

// MaxPreemptionNotice bounds the notice a lease's terms may ask for.
const MaxPreemptionNotice = time.Hour

// ErrPreemption is returned for a preemption notice that does not hold.
var ErrPreemption = errors.New("market: bad preemption notice")

// Preemptible is a running lease as preemption sees it.
type Preemptible struct {
	ID    string
	GPUs  []string
	Price int64 // per GPU-hour, micro-units
	Type  LeaseType
	// Since is when it started; among equal prices the newest goes first.
	Since time.Time
}

// ChoosePreempted picks the leases to interrupt so that need more GPUs
// come free for a trade of type t at price, given free GPUs already free.
// It returns the victims (lowest price first) and the GPUs the trade gets
// (the free ones first), or ok false when no such choice exists.
func ChoosePreempted(running []Preemptible, free []string, need int, t LeaseType, price, marginBP int64) (victims []Preemptible, gpus []string, ok bool) {
	if need <= len(free) {
		return nil, free[:need], true
	}
	var cands []Preemptible
	for _, l := range running {
		if !l.Type.Interruptible() || len(l.GPUs) == 0 {
			continue
		}
		if t.Interruptible() && price*10_000 < l.Price*(10_000+marginBP) {
			continue // a spot trade must pay the margin more
		}
		cands = append(cands, l)
	}
	slices.SortStableFunc(cands, func(a, b Preemptible) int {
		if c := cmpInt64(a.Price, b.Price); c != 0 {
			return c
		}
		return b.Since.Compare(a.Since)
	})
	gpus = append([]string(nil), free...)
	for _, c := range cands {
		if len(gpus) >= need {
			break
		}
		victims = append(victims, c)
		gpus = append(gpus, c.GPUs...)
	}
	if len(gpus) < need {
		return nil, nil, false
	}
	return victims, gpus[:need], true
}

// LeaseNotice is the preemption notice a lease's terms give: its own, or
// PreemptionNotice.
func LeaseNotice(terms *proto.Lease) time.Duration {
	if s := terms.GetPreemptionNoticeS(); s > 0 {
		return time.Duration(s) * time.Second
	}
	return PreemptionNotice
}

// CheckPreemption checks a notice signed by signer for the lease on terms
// at now: the provider's own, for a spot lease, giving at least the
// lease's notice, neither from the future nor stale.
func CheckPreemption(terms *proto.Lease, p *proto.Preemption, signer []byte, now time.Time) error {
	created, ends := time.UnixMilli(p.CreatedUnixMs), time.UnixMilli(p.EndsUnixMs)
	switch {
	case p.LeaseId != terms.Id:
		return fmt.Errorf("%w: for lease %q, not %q", ErrPreemption, p.LeaseId, terms.Id)
	case !bytes.Equal(signer, terms.Provider) || !bytes.Equal(p.Provider, terms.Provider):
		return fmt.Errorf("%w: not signed by the lease's provider", ErrPreemption)
	case !LeaseType(terms.LeaseType).Interruptible():
		return fmt.Errorf("%w: a %s lease is never preempted", ErrPreemption, LeaseType(terms.LeaseType))
	case created.Sub(now) > MaxClockSkew || now.Sub(created) > MaxClockSkew+LeaseNotice(terms):
		return fmt.Errorf("%w: notice created %s, now %s", ErrPreemption, created.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	case ends.Sub(created) < LeaseNotice(terms):
		return fmt.Errorf("%w: %s of notice, the lease's terms give %s", ErrPreemption, ends.Sub(created), LeaseNotice(terms))
	case len(p.Reason) > 256:
		return fmt.Errorf("%w: reason of %d bytes", ErrPreemption, len(p.Reason))
	}
	return nil
}
