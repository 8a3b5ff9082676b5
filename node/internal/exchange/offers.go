package exchange

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// Discovery tuning: a node that completed a lookup of a market recently
// answers from its in-memory cache of validated offers and refreshes the
// lookup in the background.
const (
	// discoveryWarm is how long a completed lookup answers from memory.
	discoveryWarm = time.Minute
	// discoveryRefresh is the age after which a warm answer also starts a
	// background lookup (one per market at a time).
	discoveryRefresh = 5 * time.Second
	// discoveryTimeout bounds a background lookup.
	discoveryTimeout = time.Minute
	// maxCachedOffers bounds the in-memory cache; past it, it starts over.
	maxCachedOffers = 100_000
)

// OfferDHT is what Offers needs of the DHT (p2p.DHT has it).
type OfferDHT interface {
	FindOffers(ctx context.Context, cfg p2p.FindConfig) ([]p2p.Found, error)
	FetchOfferFirst(ctx context.Context, p peer.ID) (p2p.Found, error)
	FetchOffer(ctx context.Context, p peer.ID) (p2p.Found, error)
}

// OfferStore keeps validated offers' envelopes across restarts (the
// node's store has it).
type OfferStore interface {
	PutOffer(p peer.ID, env []byte) error
	CachedOffers() (map[peer.ID][]byte, error)
}

// OffersConfig is what Offers needs from its node.
type OffersConfig struct {
	DHT   OfferDHT
	Store OfferStore
	// Self is this node's ID and Published its own current offer (nil
	// when it has none): its own offer is never fetched.
	Self      peer.ID
	Published func() *proto.Offer
	Now       func() time.Time
	Log       *slog.Logger
	// Found counts the valid offers fetched from the DHT (optional).
	Found prometheus.Counter
	// Verified is the node's cache of checked signatures (optional): an
	// offer that travels with each of its provider's asks, or comes again
	// by sync, costs a hash. The replicas' book messages use it too.
	Verified *p2p.Verified
}

// Offers is the cache of validated offers, newest seq per provider, and
// the lookups that fill it. Its methods are safe for concurrent use.
type Offers struct {
	cfg OffersConfig
	ctx context.Context
	wg  sync.WaitGroup

	mu    sync.Mutex
	cache map[peer.ID]*proto.Offer
	envs  map[peer.ID][]byte // the sealed form of cache's offers, when known
	// byDigest indexes envs by their SHA-256 (p2p.OfferDigest), which
	// asks travel with on gossip: what this node answers on
	// p2p.OfferDigestProtocol. digests is each provider's key in it.
	byDigest map[[p2p.OfferDigestSize]byte][]byte
	digests  map[peer.ID][p2p.OfferDigestSize]byte
	own      struct {
		offer  *proto.Offer
		env    []byte
		digest [p2p.OfferDigestSize]byte
	}
	// pulls are the offers being pulled by digest, so that the asks of
	// one provider arriving together pull its offer once.
	pulls map[[p2p.OfferDigestSize]byte]*pull

	dmu        sync.Mutex
	lookups    map[string]lookup // the providers the last complete lookup of a key found
	refreshing map[string]bool
}

type lookup struct {
	at        time.Time
	providers []peer.ID
	partial   bool // some offers could not be fetched: refresh at once
}

// NewOffers returns an empty cache. Background refreshes run under ctx;
// Wait waits for them once it has ended.
func NewOffers(ctx context.Context, cfg OffersConfig) *Offers {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Published == nil {
		cfg.Published = func() *proto.Offer { return nil }
	}
	return &Offers{cfg: cfg, ctx: ctx, cache: map[peer.ID]*proto.Offer{}, envs: map[peer.ID][]byte{},
		byDigest: map[[p2p.OfferDigestSize]byte][]byte{}, digests: map[peer.ID][p2p.OfferDigestSize]byte{},
		pulls: map[[p2p.OfferDigestSize]byte]*pull{}, lookups: map[string]lookup{}, refreshing: map[string]bool{}}
}

// Wait waits for the background refreshes.
func (x *Offers) Wait() { x.wg.Wait() }

// Of returns a provider's offer, with at least seq minSeq: this node's
// own, the cached one while unexpired, or the DHT's (bounded by
// OfferFetchTimeout). An offer not found wraps ErrOfferUnknown. Under a
// context from askContext (the replica checking an ask), a cached offer
// that has expired since the ask was made will do: the one it travelled
// with (p2p.BookEvent.OfferExpired).
func (x *Offers) Of(ctx context.Context, p peer.ID, minSeq uint64) (*proto.Offer, error) {
	if p == x.cfg.Self {
		if o := x.cfg.Published(); o != nil {
			return o, nil
		}
	}
	at := x.cfg.Now()
	if made, ok := ctx.Value(askMadeKey{}).(time.Time); ok && made.Before(at) {
		at = made
	}
	x.mu.Lock()
	o, ok := x.cache[p]
	x.mu.Unlock()
	if ok && o.Seq >= minSeq && time.UnixMilli(o.ExpiresUnixMs).After(at) {
		return o, nil
	}
	ctx, cancel := context.WithTimeout(ctx, OfferFetchTimeout)
	defer cancel()
	// The first valid record does unless it is older than the order needs.
	f, err := x.cfg.DHT.FetchOfferFirst(ctx, p)
	if err != nil || f.Offer.Seq < minSeq {
		f, err = x.cfg.DHT.FetchOffer(ctx, p)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrOfferUnknown, p, err)
	}
	x.RememberSealed(f.Provider, f.Offer, f.Envelope)
	return f.Offer, nil
}

// askMadeKey is the context key of askContext.
type askMadeKey struct{}

// askContext is ctx for checking ask o (Hooks.CheckAsk): Of then takes a
// cached offer of its maker that was unexpired when o was made, as
// p2p.DecodeBook takes the offer o travelled with.
func askContext(ctx context.Context, o *market.Order) context.Context {
	return context.WithValue(ctx, askMadeKey{}, o.Created)
}

// Remember caches a validated offer unless a newer one of p is held.
func (x *Offers) Remember(p peer.ID, o *proto.Offer) { x.RememberSealed(p, o, nil) }

// RememberSealed is Remember with the offer's sealed envelope (nil if
// unknown), which Sealed then hands out.
func (x *Offers) RememberSealed(p peer.ID, o *proto.Offer, env []byte) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if cur, ok := x.cache[p]; !ok || cur.Seq < o.Seq || (cur.Seq == o.Seq && x.envs[p] == nil && env != nil) {
		if len(x.cache) > maxCachedOffers {
			clear(x.cache)
			clear(x.envs)
			clear(x.byDigest)
			clear(x.digests)
		}
		x.cache[p] = o
		if d, ok := x.digests[p]; ok {
			delete(x.byDigest, d)
			delete(x.digests, p)
		}
		if env != nil {
			x.envs[p] = env
			d := p2p.OfferDigest(env)
			x.byDigest[d], x.digests[p] = env, d
		} else {
			delete(x.envs, p)
		}
	}
}

// Held is the sealed offer this node holds (its own, or a provider's it
// cached with its envelope) whose digest is d, expired or not, or nil:
// what it answers on p2p.OfferDigestProtocol.
func (x *Offers) Held(d [p2p.OfferDigestSize]byte) []byte {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.own.env != nil && x.own.digest == d {
		return x.own.env
	}
	return x.byDigest[d]
}

// Sealed is the sealed envelope of p's cached offer while it is
// unexpired, or nil: what a replica hands on beside p's asks.
func (x *Offers) Sealed(p peer.ID) []byte {
	x.mu.Lock()
	defer x.mu.Unlock()
	o, ok := x.cache[p]
	if !ok || !time.UnixMilli(o.ExpiresUnixMs).After(x.cfg.Now()) {
		return nil
	}
	return x.envs[p]
}

// OwnSealed is this node's published offer sealed by seal, sealed once
// per offer published, or nil when it publishes none.
func (x *Offers) OwnSealed(seal func(*proto.Offer) ([]byte, error)) []byte {
	o := x.cfg.Published()
	if o == nil {
		return nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.own.offer != o {
		env, err := seal(o)
		if err != nil {
			x.cfg.Log.Warn("sealing own offer failed", "err", err)
			return nil
		}
		x.own.offer, x.own.env, x.own.digest = o, env, p2p.OfferDigest(env)
	}
	return x.own.env
}

// Cached is the cached offer of p, expired or not, or nil.
func (x *Offers) Cached(p peer.ID) *proto.Offer {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.cache[p]
}

// newest is the newest unexpired offer held of p: the cached one unless o
// is newer.
func (x *Offers) newest(p peer.ID, o *proto.Offer) *proto.Offer {
	x.mu.Lock()
	defer x.mu.Unlock()
	if c, ok := x.cache[p]; ok && c.Seq > o.Seq && time.UnixMilli(c.ExpiresUnixMs).After(x.cfg.Now()) {
		return c
	}
	return o
}

// Warm returns the unexpired cached offers of the last complete lookup of
// key, if it is recent enough, and whether it answered; it starts a
// background refresh when the lookup is getting old.
func (x *Offers) Warm(key string) (map[peer.ID]*proto.Offer, bool) {
	now := x.cfg.Now()
	x.dmu.Lock()
	l, ok := x.lookups[key]
	if !ok || now.Sub(l.at) > discoveryWarm || now.Before(l.at) {
		x.dmu.Unlock()
		return nil, false
	}
	refresh := (l.partial || now.Sub(l.at) > discoveryRefresh) && !x.refreshing[key] && x.ctx.Err() == nil
	if refresh {
		x.refreshing[key] = true
	}
	x.dmu.Unlock()
	if refresh {
		x.wg.Add(1)
		go func() {
			defer x.wg.Done()
			ctx, cancel := context.WithTimeout(x.ctx, discoveryTimeout)
			defer cancel()
			x.Lookup(ctx, key, true)
			x.dmu.Lock()
			delete(x.refreshing, key)
			x.dmu.Unlock()
		}()
	}
	out := make(map[peer.ID]*proto.Offer, len(l.providers))
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, p := range l.providers {
		if o, ok := x.cache[p]; ok && time.UnixMilli(o.ExpiresUnixMs).After(now) {
			out[p] = o
		}
	}
	return out, true
}

// Lookup finds the providers of key (a market key or p2p.AnyMarket) in
// the DHT and fetches their offers (the first valid record of each; with
// newest, the best of a quorum), caching each validated offer in memory
// (newest seq wins) and the store. A lookup that ran to its end is
// remembered for Warm. The error says some offers could not be fetched;
// the map holds those that could.
func (x *Offers) Lookup(ctx context.Context, key string, newest bool) (map[peer.ID]*proto.Offer, error) {
	now := x.cfg.Now()
	offers := map[peer.ID]*proto.Offer{}
	found, err := x.cfg.DHT.FindOffers(ctx, p2p.FindConfig{Market: key, Now: x.cfg.Now, Newest: newest})
	for _, fo := range found {
		inc(x.cfg.Found)
		x.RememberSealed(fo.Provider, fo.Offer, fo.Envelope)
		offers[fo.Provider] = x.newest(fo.Provider, fo.Offer)
		if x.cfg.Store != nil {
			if err := x.cfg.Store.PutOffer(fo.Provider, fo.Envelope); err != nil {
				x.cfg.Log.Warn("caching offer failed", "err", err)
			}
		}
	}
	if ctx.Err() == nil {
		l := lookup{at: now, partial: err != nil}
		for p := range offers {
			l.providers = append(l.providers, p)
		}
		x.dmu.Lock()
		x.lookups[key] = l
		x.dmu.Unlock()
	}
	return offers, err
}

// FromStore adds to into the offers kept in the store that still
// validate, signed by the provider they are kept under.
func (x *Offers) FromStore(into map[peer.ID]*proto.Offer) {
	if x.cfg.Store == nil {
		return
	}
	cached, err := x.cfg.Store.CachedOffers()
	if err != nil {
		x.cfg.Log.Warn("reading offer cache failed", "err", err)
		return
	}
	now := x.cfg.Now()
	for p, env := range cached {
		o, signer, err := x.cfg.Verified.OpenOffer(env, now)
		if err != nil || signer != p {
			continue
		}
		into[p] = o
	}
}

// Find is the DHT's answer for key (a market key or p2p.AnyMarket):
// warm from the cache, else a lookup, else (nothing found) the offers kept
// in the store. With readOnly it starts no lookup and no refresh and
// answers with the offers this node stored. Offers that could not be
// fetched are logged, not returned as an error: the map holds the rest.
func (x *Offers) Find(ctx context.Context, key string, readOnly bool) (map[peer.ID]*proto.Offer, error) {
	offers, warm := map[peer.ID]*proto.Offer{}, true
	if !readOnly {
		offers, warm = x.Warm(key)
	}
	if !warm {
		var ferr error
		offers, ferr = x.Lookup(ctx, key, false)
		if ferr != nil {
			x.cfg.Log.Debug("some offers could not be fetched", "err", ferr)
		}
	}
	if len(offers) == 0 {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		x.FromStore(offers)
	}
	return offers, nil
}

// FromBook adds to into the unexpired offer of the maker of each open ask
// in the replicas of market key (every market for p2p.AnyMarket) that
// books keeps: the offers those asks were validated against when they
// arrived, or that their providers refreshed since (refresh.go; the
// cache keeps each provider's newest), and this node's own published
// offer for its own asks. A newer offer already in into stays. A resale
// ask's maker is not a provider and adds nothing.
func (x *Offers) FromBook(books *Books, key string, into map[peer.ID]*proto.Offer) {
	makers := map[string]bool{}
	books.Each(func(r *Replica) {
		if key != p2p.AnyMarket && r.Book.Market() != key {
			return
		}
		for o := range r.Book.Orders(market.Ask) {
			makers[o.Maker] = true
		}
	})
	now := x.cfg.Now()
	for m := range makers {
		p, err := peer.Decode(m)
		if err != nil {
			continue
		}
		o := x.Cached(p)
		if p == x.cfg.Self {
			o = x.cfg.Published()
		}
		if o == nil || !time.UnixMilli(o.ExpiresUnixMs).After(now) {
			continue
		}
		if have, ok := into[p]; ok && have.Seq >= o.Seq {
			continue
		}
		into[p] = o
	}
}

// verified is the node's cache of checked signatures, nil when x is nil
// or has none.
func (x *Offers) verified() *p2p.Verified {
	if x == nil {
		return nil
	}
	return x.cfg.Verified
}
