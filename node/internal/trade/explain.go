package trade

import (
	"cmp"
	"fmt"
	"time"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/internal/exchange"
)

// PassedOver explains o's untaken crossing orders in the replica of books
// at now; left is how much of o is still wanted.
func PassedOver(books *exchange.Books, o market.Order, left uint32, now time.Time) []api.PassView {
	o.Quantity = max(left, 1)
	var ps []market.PassedOver
	books.With(o.Market, o.Currency, func(s *exchange.Replica) { ps = s.Book.Explain(&o, now) })
	var out []api.PassView
	for _, p := range ps {
		out = append(out, api.PassView{Reason: p.Reason, Orders: p.Orders, GPUs: p.GPUs, Detail: passDetail(o, p)})
	}
	return out
}

// passDetail says in words what the example order wanted.
func passDetail(o market.Order, p market.PassedOver) string {
	bid, ask := o, p.Example
	if o.Side == market.Ask {
		bid, ask = ask, bid
	}
	switch p.Reason {
	case market.PassMinDuration:
		return fmt.Sprintf("the ask leases at least %s; the bid wants %s", ask.MinDuration, bid.Duration)
	case market.PassMaxDuration:
		return fmt.Sprintf("the ask leases at most %s; the bid wants %s", ask.MaxDuration, bid.Duration)
	case market.PassLeaseType:
		return fmt.Sprintf("the ask sells %s; the bid wants %s", ask.LeaseType, bid.LeaseType)
	case market.PassVRAM:
		return fmt.Sprintf("the ask's GPUs have %d GiB; the bid wants at least %d GiB", ask.Facts.MemoryBytes>>30, bid.Constraints.MinMemoryBytes>>30)
	case market.PassAttestation:
		return fmt.Sprintf("the ask is %s; the bid wants %s", cmp.Or(ask.Facts.Attestation, "unattested"), bid.Constraints.MinAttestation)
	case market.PassRegion:
		return fmt.Sprintf("the ask is in %s; the bid wants %v", ask.Facts.Region, bid.Constraints.Regions)
	case market.PassStart:
		return fmt.Sprintf("the ask's blocks start at %s; the bid's block starts at %s",
			ask.BlockStart().UTC().Format(time.RFC3339), bid.BlockStart().UTC().Format(time.RFC3339))
	case market.PassOwnOrder:
		return "this node's own order: it never trades with itself"
	case market.PassAllOrNone:
		if o.AllOrNone {
			return fmt.Sprintf("all-or-none: no single order has all %d GPUs", o.Quantity)
		}
		return fmt.Sprintf("the other order is all-or-none for %d GPUs", p.Example.Quantity)
	}
	return p.Reason
}
