package node

import (
	"context"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/internal/lease"
	"github.com/suanli/suanli/node/internal/provider"
	"github.com/suanli/suanli/node/internal/view"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// Offers implements API: it finds the providers of the queried market in
// the DHT (all providers when the GPU filter is not an exact market key),
// fetches and validates each offer, caches it in memory and Badger, and
// filters and sorts. After a complete lookup, calls answer from memory for
// a while and refresh in the background (exchange.Offers). If the network
// yields nothing, unexpired offers cached in Badger are used.
func (n *Node) Offers(ctx context.Context, q api.OfferQuery) (_ []api.OfferView, err error) {
	defer classified(&err)
	f, err := view.OfferFilter(q)
	if err != nil {
		return nil, err
	}
	now := n.now()
	f.Now = now
	key := p2p.AnyMarket
	if market.IsFullMarketKey(q.GPU) {
		key = q.GPU
	}
	// A read-only request starts no lookup and no refresh: it gets the
	// offers this node stored.
	offers, warm := map[peer.ID]*proto.Offer{}, true
	if !api.ReadOnly(ctx) {
		offers, warm = n.offers.Warm(key)
	}
	if !warm {
		var ferr error
		offers, ferr = n.offers.Lookup(ctx, key, false)
		if ferr != nil {
			n.log.Debug("some offers could not be fetched", "err", ferr)
		}
	}
	if len(offers) == 0 {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		n.offers.FromStore(offers)
	}
	list := make([]*proto.Offer, 0, len(offers))
	for _, o := range offers {
		if f.Match(o) && lease.IsolationAtLeast(o.Isolation, q.MinIsolation) {
			list = append(list, o)
		}
	}
	if err := market.SortOffers(list, q.Sort); err != nil {
		return nil, api.BadRequest("%v", err)
	}
	out := make([]api.OfferView, 0, len(list))
	for _, o := range list {
		out = append(out, provider.WithCapacity(view.Offer(o, f), o, f, now))
	}
	return out, nil
}
