package market

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/suanli/suanli/proto"
)

// Preemption rules: a provider whose GPUs are all leased may take a
// higher-priority trade by interrupting whole spot leases, the set that
// loses the least revenue (see ChoosePreempted).
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
//
// No executor can take GPUs away from a running workload, so a lease is
// interrupted whole; the choice is the set of spot leases that frees
// enough GPUs at the least revenue lost (the sum over victims of GPUs ×
// price per GPU-hour), then the fewest GPUs interrupted, then the
// cheapest and newest leases. A 2-GPU trade therefore interrupts a
// 2-GPU lease rather than a whole 8-GPU one, even one slightly cheaper
// per GPU. The set is found exactly (a knapsack cover over the
// candidates); past maxPreemptCells table cells, lowest price first.
func ChoosePreempted(running []Preemptible, free []string, need int, t LeaseType, price, marginBP int64) (victims []Preemptible, gpus []string, ok bool) {
	if need <= len(free) {
		return nil, free[:need], true
	}
	cands := preemptable(running, t, price, marginBP)
	slices.SortStableFunc(cands, func(a, b Preemptible) int {
		if c := cmpInt64(a.Price, b.Price); c != 0 {
			return c
		}
		if c := b.Since.Compare(a.Since); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	short := need - len(free)
	var chosen []bool
	if (len(cands)+1)*(short+1) <= maxPreemptCells {
		chosen = coverCheapest(cands, short)
	} else {
		chosen = make([]bool, len(cands))
		for i, got := 0, 0; i < len(cands) && got < short; i++ {
			chosen[i], got = true, got+len(cands[i].GPUs)
		}
	}
	gpus = append([]string(nil), free...)
	for i, c := range cands {
		if chosen != nil && chosen[i] {
			victims = append(victims, c)
			gpus = append(gpus, c.GPUs...)
		}
	}
	if len(gpus) < need {
		return nil, nil, false
	}
	return victims, gpus[:need], true
}

// preemptable are the leases of running a trade of type t at price may
// interrupt: spot leases, and, for a spot trade, only those it outbids by
// the margin.
func preemptable(running []Preemptible, t LeaseType, price, marginBP int64) []Preemptible {
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
	return cands
}

// PreemptibleGPUs counts the GPUs a trade of type t at price could free
// by preemption (the leases ChoosePreempted may pick from): a provider's
// capacity for such a trade is its free GPUs and these.
func PreemptibleGPUs(running []Preemptible, t LeaseType, price, marginBP int64) int {
	n := 0
	for _, l := range preemptable(running, t, price, marginBP) {
		n += len(l.GPUs)
	}
	return n
}

// maxPreemptCells bounds ChoosePreempted's table (candidates × GPUs
// short): 4 M cells, a few tens of milliseconds at most.
const maxPreemptCells = 4 << 20

// coverCost is what interrupting a set of leases costs: revenue lost per
// hour, then GPUs interrupted.
type coverCost struct {
	lost int64
	gpus int
}

func (a coverCost) less(b coverCost) bool {
	return a.lost < b.lost || a.lost == b.lost && a.gpus < b.gpus
}

// coverCheapest chooses among cands (in preference order) a set whose
// GPUs number at least short at the least coverCost; among equal costs
// it prefers the earlier candidates. It returns nil when the candidates
// cannot cover short.
func coverCheapest(cands []Preemptible, short int) []bool {
	inf := coverCost{lost: math.MaxInt64, gpus: math.MaxInt}
	// best[i][r]: the least cost of freeing r more GPUs from cands[i:].
	best := make([][]coverCost, len(cands)+1)
	for i := range best {
		best[i] = make([]coverCost, short+1)
	}
	for r := 1; r <= short; r++ {
		best[len(cands)][r] = inf
	}
	for i := len(cands) - 1; i >= 0; i-- {
		for r := 0; r <= short; r++ {
			best[i][r], _ = coverStep(best[i+1], cands[i], r, inf)
		}
	}
	if best[0][short] == inf {
		return nil
	}
	chosen := make([]bool, len(cands))
	for i, r := 0, short; i < len(cands) && r > 0; i++ {
		if _, take := coverStep(best[i+1], cands[i], r, inf); take {
			chosen[i], r = true, max(0, r-len(cands[i].GPUs))
		}
	}
	return chosen
}

// coverStep is one cell of coverCheapest's table: the least cost of
// freeing r GPUs from c and the candidates after it (whose costs are
// next), and whether that takes c. Taking wins ties, so earlier
// (cheaper, newer) candidates are preferred.
func coverStep(next []coverCost, c Preemptible, r int, inf coverCost) (coverCost, bool) {
	skip := next[r]
	if r == 0 {
		return skip, false
	}
	rest := next[max(0, r-len(c.GPUs))]
	if rest == inf {
		return skip, false
	}
	take := coverCost{lost: satAdd(rest.lost, satMul(c.Price, int64(len(c.GPUs)))), gpus: rest.gpus + len(c.GPUs)}
	if skip.less(take) {
		return skip, false
	}
	return take, true
}

func satMul(a, b int64) int64 {
	if a != 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
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
