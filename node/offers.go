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

// Offers implements API. By default it finds the providers of the
// queried market in the DHT (all providers when the GPU filter is not an
// exact market key), fetches and validates each offer, caches it in
// memory and Badger, and adds the offers that back the open asks of the
// market's book when this node replicates it; then it filters and sorts.
// After a complete lookup, calls answer from memory for a while and
// refresh in the background (exchange.Offers). If the network yields
// nothing, unexpired offers cached in Badger are used.
//
// With q.From "book" no DHT value is looked up: the node joins the
// market's book (a provider-record lookup for a few of its peers and one
// sync, as any replica does) and answers with the offers its open asks
// travelled with — the discovery that scales with a market's size, not
// the network's (BENCHMARKS.md, internet-scale estimate). A provider with
// no open ask is not listed then. With "dht" the book is not consulted.
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
	var offers map[peer.ID]*proto.Offer
	switch q.From {
	case api.OffersFromBook:
		if key == p2p.AnyMarket {
			return nil, api.BadRequest("offers from the book: gpu %q must be a full market key, like nvidia-h100-sxm5-80gb", q.GPU)
		}
		if err := n.JoinMarket(ctx, key); err != nil {
			return nil, err
		}
		offers = map[peer.ID]*proto.Offer{}
	case "", api.OffersFromDHT:
		offers, err = n.offers.Find(ctx, key, api.ReadOnly(ctx))
		if err != nil {
			return nil, err
		}
	default:
		return nil, api.BadRequest("from %q: want dht or book (or nothing for both)", q.From)
	}
	if q.From != api.OffersFromDHT {
		n.offers.FromBook(n.books, key, offers)
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
