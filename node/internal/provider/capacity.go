package provider

import (
	"errors"
	"time"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/internal/store"
	"github.com/suanli/suanli/proto"
)

// Free capacity. The offer lists every GPU of the provider; a GPU held by
// a lease carries the lease's end (GPU.leased_until_unix_ms), so buyers
// see what is free now and when the rest frees up. The provider publishes
// a fresh offer whenever a lease takes or frees GPUs, besides its timer.

// MarkLeased marks the offer's GPUs held by a lease with the lease's end
// (market.MarkLeased). The end is the agreed one; a hold without stored
// terms (a take still in flight) counts until the hold lapses.
func (p *Provider) MarkLeased(gpus []*proto.GPU, now time.Time) error {
	holds, err := p.cfg.Store.GPUHolds(now)
	if err != nil {
		return err
	}
	ends := make(map[string]time.Time, len(holds))
	for uuid, h := range holds {
		ends[uuid] = h.Until
		if terms, err := p.cfg.Store.GetLease(h.Lease); err == nil {
			ends[uuid] = market.LeaseEnd(terms)
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	market.MarkLeased(gpus, ends, now)
	return nil
}

// CapacityChanged asks Run to publish a fresh offer now: a trade leased
// GPUs or a lease freed them. It never blocks; changes in a burst make
// one offer. A node without GPUs publishes nothing.
func (p *Provider) CapacityChanged() {
	if p.cfg.GPUs == nil {
		return
	}
	select {
	case p.republish <- struct{}{}:
	default:
	}
}

// WithCapacity adds to an offer's view what of it is free at now, for the
// GPUs passing the query's filters.
func WithCapacity(v api.OfferView, o *proto.Offer, f market.OfferFilter, now time.Time) api.OfferView {
	v.FreeGPUs = f.FreeGPUs(o, now)
	v.Capacity = []api.CapacityView{}
	for _, c := range f.MatchingCapacity(o, now) {
		cv := api.CapacityView{Market: c.Market, Total: c.Total, Free: c.Free}
		for _, r := range c.Releases {
			cv.Releases = append(cv.Releases, api.ReleaseView{At: r.At, Count: r.Count})
		}
		v.Capacity = append(v.Capacity, cv)
	}
	byUUID := make(map[string]*proto.GPU, len(o.Gpus))
	for _, g := range o.Gpus {
		byUUID[g.Uuid] = g
	}
	for i := range v.GPUs {
		if g := byUUID[v.GPUs[i].UUID]; g != nil && !market.GPUFree(g, now) {
			at := time.UnixMilli(g.LeasedUntilUnixMs).UTC()
			v.GPUs[i].LeasedUntil = &at
		}
	}
	return v
}
