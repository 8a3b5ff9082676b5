package market

import (
	"slices"
	"time"
)

// Reasons a resting order at or better than a taker's price was passed
// over (PassedOver.Reason).
const (
	PassMinDuration = "min-duration" // the bid's duration is under the ask's minimum
	PassMaxDuration = "max-duration" // ... over the ask's maximum
	PassLeaseType   = "lease-type"   // the ask sells another lease type
	PassVRAM        = "vram"         // the ask's GPUs have less memory than asked
	PassAttestation = "attestation"  // the ask's attestation is weaker than asked
	PassRegion      = "region"       // the ask's GPUs are in no region asked for
	PassOwnOrder    = "own-order"    // the resting order is the taker's own
	PassAllOrNone   = "all-or-none"  // one side is all-or-none and the quantities do not fit
	PassStart       = "start"        // the ask's reserved blocks start after the bid's
)

// PassedOver counts the opposite orders at or better than a taker's
// price that it could not trade with, for one reason.
type PassedOver struct {
	Reason string
	Orders int
	GPUs   uint32
	// Example is one of them, for telling the user what it wanted.
	Example Order
}

// Explain says why o, at its price, would leave crossing opposite orders
// untaken: per reason, how many orders and GPUs (the first reason each
// order fails, in the book's priority order). Expired orders are left out.
// It changes nothing.
func (b *Book) Explain(o *Order, now time.Time) []PassedOver {
	n := now.UnixNano()
	opp := b.sideOf(o.Side.Opposite())
	by := map[string]*PassedOver{}
	var order []string
	for i := len(opp.levels) - 1; i >= 0; i-- {
		l := opp.levels[i]
		if !crosses(o.Side, o.Price, l.price) {
			break
		}
		for e := l.head; e != nil; e = e.next {
			if e.exp <= n {
				continue
			}
			bid, ask := o, &e.o
			if o.Side == Ask {
				bid, ask = ask, bid
			}
			why := mismatch(bid, ask)
			switch {
			case why != "":
			case e.o.Maker == o.Maker:
				why = PassOwnOrder
			case e.o.AllOrNone && e.remaining > o.Quantity, o.AllOrNone && e.remaining < o.Quantity:
				why = PassAllOrNone
			default:
				continue
			}
			p := by[why]
			if p == nil {
				p = &PassedOver{Reason: why, Example: e.o}
				by[why] = p
				order = append(order, why)
			}
			p.Orders++
			p.GPUs += e.remaining
		}
	}
	out := make([]PassedOver, 0, len(order))
	for _, why := range order {
		out = append(out, *by[why])
	}
	slices.SortStableFunc(out, func(a, b PassedOver) int { return b.Orders - a.Orders })
	return out
}

// MatchWhole is the first resting order, in priority, that fills all of
// o's quantity on its own (skip, when not nil, leaves some out). An
// all-or-none taker trades only so: its trades are agreed one maker at a
// time, and a second maker refusing after a first accepted would leave it
// part-filled.
func (b *Book) MatchWhole(o *Order, now time.Time, skip func(orderID string) bool) (Match, bool) {
	n := now.UnixNano()
	opp := b.sideOf(o.Side.Opposite())
	for i := len(opp.levels) - 1; i >= 0; i-- {
		l := opp.levels[i]
		if !crosses(o.Side, o.Price, l.price) {
			break
		}
		for e := l.head; e != nil; e = e.next {
			if e.exp <= n || e.o.Maker == o.Maker || e.remaining < o.Quantity || (e.o.AllOrNone && e.remaining != o.Quantity) {
				continue
			}
			if skip != nil && skip(e.o.ID) {
				continue
			}
			bid, ask := o, &e.o
			if o.Side == Ask {
				bid, ask = ask, bid
			}
			if accepts(bid, ask) {
				return Match{OrderID: e.o.ID, Maker: e.o.Maker, Quantity: o.Quantity, Price: l.price, LeaseType: ask.LeaseType}, true
			}
		}
	}
	return Match{}, false
}
