package node

import (
	"fmt"
	"strings"
	"time"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
)

// The GPU calendar: reserved time sold ahead. A forward block is kept per
// GPU beside the current holds (store.ReserveBlock, keys in
// internal/store/keys.go). Blocks of one GPU never overlap one another nor
// a current hold; a block counts as a hold from its start
// (store.ReservedGPUs, store.GPUHolds), and the lease it belongs to starts
// then.

// parseStart reads a forward start: RFC 3339, or "+D" after now.
func parseStart(s string, now time.Time) (time.Time, error) {
	if d, ok := strings.CutPrefix(s, "+"); ok {
		dd, err := time.ParseDuration(d)
		if err != nil || dd < 0 {
			return time.Time{}, fmt.Errorf("%q: want RFC 3339 or +DURATION", s)
		}
		return now.Add(dd), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q: want RFC 3339 or +DURATION", s)
	}
	return t, nil
}

// reservedAskPrice derives a reserved ask's price from the offer: the
// on-demand price with the discount its minimum duration earns.
func (n *Node) reservedAskPrice(req api.OrderRequest) (string, error) {
	offer := n.Published()
	if offer == nil {
		return "", fmt.Errorf("%w: an ask needs a published offer", api.ErrNoGPUs)
	}
	minD, err := time.ParseDuration(cmpOr(req.MinDuration, defaultMinLease.String()))
	if err != nil {
		return "", api.BadRequest("min-duration: %v", err)
	}
	var ds []market.Discount
	for _, d := range offer.GetPricing().GetReserved() {
		ds = append(ds, market.Discount{MinDuration: time.Duration(d.MinDurationS) * time.Second, BasisPoints: d.BasisPoints})
	}
	p, err := market.ReservedPrice(offer.GetPricing().GetOnDemandMicros(), minD, ds)
	if err != nil {
		return "", api.BadRequest("reserved price: %v", err)
	}
	return market.FormatMicros(p, offer.GetPricing().GetCurrency()), nil
}

// freeGPUsFor lists this provider's GPUs in mkt free over [from, end).
func (n *Node) freeGPUsFor(mkt string, from, end time.Time) ([]string, error) {
	offer := n.Published()
	if offer == nil {
		return nil, fmt.Errorf("%w: no published offer", api.ErrNoGPUs)
	}
	busy, err := n.store.BusyBetween(from, end)
	if err != nil {
		return nil, err
	}
	var free []string
	for _, g := range offer.Gpus {
		if g.Market == mkt && !busy[g.Uuid] {
			free = append(free, g.Uuid)
		}
	}
	return free, nil
}

// leaseStartFor is when a trade of the bid starts: its block's start when
// that is ahead, else now.
func leaseStartFor(bid *market.Order, now time.Time) time.Time {
	if !bid.Start.IsZero() && bid.Start.After(now) {
		return bid.Start
	}
	return now
}

// wantStart is when the lease of a take by o must start, when that is
// fixed: a bid's forward block, or the resting bid's block a provider
// takes; zero when the lease starts now.
func wantStart(o *market.Order, blockStart, now time.Time) time.Time {
	if o.Side == market.Bid && !o.Start.IsZero() && o.Start.After(now) {
		return time.UnixMilli(o.Start.UnixMilli())
	}
	if blockStart.After(now) {
		return time.UnixMilli(blockStart.UnixMilli())
	}
	return time.Time{}
}
