package provider

import (
	"fmt"
	"time"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
)

// The GPU calendar: reserved time sold ahead. A forward block is kept per
// GPU beside the current holds (store.ReserveBlock, keys in
// internal/store/keys.go). Blocks of one GPU never overlap one another nor
// a current hold; a block counts as a hold from its start
// (store.ReservedGPUs, store.GPUHolds), and the lease it belongs to starts
// then. When a forward lease starts is market's rule (market.WantStart,
// market.LeaseStartFor).

// ReservedAskPrice derives a reserved ask's price from the published
// offer: the on-demand price with the discount its minimum duration earns
// (minDuration empty: DefaultMinLease).
func (p *Provider) ReservedAskPrice(minDuration string) (string, error) {
	offer := p.Published()
	if offer == nil {
		return "", fmt.Errorf("%w: an ask needs a published offer", api.ErrNoGPUs)
	}
	if minDuration == "" {
		minDuration = DefaultMinLease.String()
	}
	minD, err := time.ParseDuration(minDuration)
	if err != nil {
		return "", api.BadRequest("min-duration: %v", err)
	}
	var ds []market.Discount
	for _, d := range offer.GetPricing().GetReserved() {
		ds = append(ds, market.Discount{MinDuration: time.Duration(d.MinDurationS) * time.Second, BasisPoints: d.BasisPoints})
	}
	pr, err := market.ReservedPrice(offer.GetPricing().GetOnDemandMicros(), minD, ds)
	if err != nil {
		return "", api.BadRequest("reserved price: %v", err)
	}
	return market.FormatMicros(pr, offer.GetPricing().GetCurrency()), nil
}

// FreeGPUsFor lists this provider's GPUs in mkt free over [from, end):
// neither held nor blocked by the calendar then.
func (p *Provider) FreeGPUsFor(mkt string, from, end time.Time) ([]string, error) {
	offer := p.Published()
	if offer == nil {
		return nil, fmt.Errorf("%w: %v", api.ErrNoGPUs, errNoOffer)
	}
	busy, err := p.cfg.Store.BusyBetween(from, end)
	if err != nil {
		return nil, err
	}
	return market.FreeIn(offer, mkt, busy), nil
}

// FreeGPUs lists this provider's GPUs in mkt that no lease holds now: no
// current hold, no forward block under way.
func (p *Provider) FreeGPUs(mkt string) ([]string, error) {
	offer := p.Published()
	if offer == nil {
		return nil, fmt.Errorf("%w: %v", api.ErrNoGPUs, errNoOffer)
	}
	busy, err := p.cfg.Store.ReservedGPUs(p.cfg.Clock.Now())
	if err != nil {
		return nil, err
	}
	return market.FreeIn(offer, mkt, busy), nil
}

// FreeFor lists the GPUs in mkt free for a lease over [start, end): the
// ones free now (FreeGPUs) when it starts by now, else the ones free over
// its whole span (FreeGPUsFor).
func (p *Provider) FreeFor(mkt string, start, end, now time.Time) ([]string, error) {
	if start.After(now) {
		return p.FreeGPUsFor(mkt, start, end)
	}
	return p.FreeGPUs(mkt)
}
