package node

import (
	"context"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// Discovery tuning: a node that completed a lookup of a market recently
// answers `offers` from its in-memory cache of validated offers and
// refreshes the lookup in the background.
const (
	// discoveryWarm is how long a completed lookup answers from memory.
	discoveryWarm = time.Minute
	// discoveryRefresh is the age after which a warm answer also starts a
	// background lookup (one per market at a time).
	discoveryRefresh = 5 * time.Second
	// discoveryTimeout bounds a background lookup.
	discoveryTimeout = time.Minute
)

// discovery (the zero value is ready) remembers, per market key, the providers the last complete
// lookup found. The offers themselves are in the node's offerCache (newest
// seq per provider).
type discovery struct {
	mu         sync.Mutex
	lookups    map[string]lookup
	refreshing map[string]bool
}

type lookup struct {
	at        time.Time
	providers []peer.ID
	partial   bool // some offers could not be fetched: refresh at once
}

// warmOffers returns the unexpired cached offers of the last complete
// lookup of key, if it is recent enough, and whether it answered; it starts
// a background refresh when the lookup is getting old.
func (n *Node) warmOffers(key string) (map[peer.ID]*proto.Offer, bool) {
	d := &n.disc
	now := n.now()
	d.mu.Lock()
	l, ok := d.lookups[key]
	if !ok || now.Sub(l.at) > discoveryWarm || now.Before(l.at) {
		d.mu.Unlock()
		return nil, false
	}
	refresh := (l.partial || now.Sub(l.at) > discoveryRefresh) && !d.refreshing[key] && n.ctx.Err() == nil
	if refresh {
		if d.refreshing == nil {
			d.refreshing = map[string]bool{}
		}
		d.refreshing[key] = true
	}
	d.mu.Unlock()
	if refresh {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			ctx, cancel := context.WithTimeout(n.ctx, discoveryTimeout)
			defer cancel()
			n.lookupOffers(ctx, key, true)
			d.mu.Lock()
			delete(d.refreshing, key)
			d.mu.Unlock()
		}()
	}
	out := make(map[peer.ID]*proto.Offer, len(l.providers))
	n.offerMu.Lock()
	defer n.offerMu.Unlock()
	for _, p := range l.providers {
		if o, ok := n.offerCache[p]; ok && time.UnixMilli(o.ExpiresUnixMs).After(now) {
			out[p] = o
		}
	}
	return out, true
}

// lookupOffers finds the providers of key in the DHT and fetches their
// offers (the first valid record of each; with newest, the best of a
// quorum), caching each validated offer in memory (newest seq wins) and
// Badger. A lookup that ran to its end is remembered for warmOffers.
func (n *Node) lookupOffers(ctx context.Context, key string, newest bool) (map[peer.ID]*proto.Offer, error) {
	now := n.now()
	offers := map[peer.ID]*proto.Offer{}
	found, err := n.dht.FindOffers(ctx, p2p.FindConfig{Market: key, Now: n.now, Newest: newest})
	for _, fo := range found {
		n.metrics.found.Inc()
		n.rememberOffer(fo.Provider, fo.Offer)
		offers[fo.Provider] = n.cachedOffer(fo.Provider, fo.Offer)
		if err := n.store.PutOffer(fo.Provider, fo.Envelope); err != nil {
			n.log.Warn("caching offer failed", "err", err)
		}
	}
	if ctx.Err() == nil {
		l := lookup{at: now, partial: err != nil}
		for p := range offers {
			l.providers = append(l.providers, p)
		}
		d := &n.disc
		d.mu.Lock()
		if d.lookups == nil {
			d.lookups = map[string]lookup{}
		}
		d.lookups[key] = l
		d.mu.Unlock()
	}
	return offers, err
}

// cachedOffer is the newest offer held of p: the cached one unless o is
// newer.
func (n *Node) cachedOffer(p peer.ID, o *proto.Offer) *proto.Offer {
	n.offerMu.Lock()
	defer n.offerMu.Unlock()
	if c, ok := n.offerCache[p]; ok && c.Seq > o.Seq && time.UnixMilli(c.ExpiresUnixMs).After(n.now()) {
		return c
	}
	return o
}
