package p2p

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/libp2p/go-libp2p/core/routing"

	"github.com/suanli/suanli/proto"
)

// ProtocolPrefix keeps Suanli's DHT apart from the public IPFS one.
const ProtocolPrefix = "/suanli"

// AnyMarket names the provider record every provider announces besides its
// own markets, so a buyer searching by model substring or with no filter can
// list all providers. Fine for networks of thousands of providers; a larger
// network would shard it.
const AnyMarket = "*"

// DHTConfig configures NewDHT.
type DHTConfig struct {
	Host host.Host
	// Validator checks offer records; every server must use the same rules.
	Validator OfferValidator
	// Client runs the DHT in client mode (a short-lived CLI); daemons serve.
	Client bool
	// Bootstrap peers are dialled by Bootstrap; no public peers are used.
	Bootstrap []peer.AddrInfo
}

// DHT is the private Suanli Kademlia DHT: it stores signed offers and the
// provider records of markets. Safe for concurrent use.
type DHT struct {
	h         host.Host
	dht       *dht.IpfsDHT
	bootstrap []peer.AddrInfo
}

// NewDHT creates the DHT on a host. It does not dial anyone: call Bootstrap.
func NewDHT(cfg DHTConfig) (*DHT, error) {
	mode := dht.ModeServer
	if cfg.Client {
		mode = dht.ModeClient
	}
	d, err := dht.New(cfg.Host,
		dht.Mode(mode),
		dht.ProtocolPrefix(ProtocolPrefix),
		dht.NamespacedValidator(proto.OfferNamespace, cfg.Validator),
		dht.BootstrapPeers(cfg.Bootstrap...),
	)
	if err != nil {
		return nil, fmt.Errorf("p2p: dht: %w", err)
	}
	return &DHT{h: cfg.Host, dht: d, bootstrap: cfg.Bootstrap}, nil
}

// Close stops the DHT (not the host).
func (d *DHT) Close() error { return d.dht.Close() }

// RoutingTableSize is the number of peers in the routing table.
func (d *DHT) RoutingTableSize() int { return d.dht.RoutingTable().Size() }

// ErrNoBootstrap is returned when none of the bootstrap peers could be reached.
var ErrNoBootstrap = errors.New("p2p: no bootstrap peer reachable")

// Bootstrap connects to the configured bootstrap peers concurrently and
// refreshes the routing table. It fails only if peers were configured and
// none answered.
func (d *DHT) Bootstrap(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make([]error, len(d.bootstrap))
	for i, ai := range d.bootstrap {
		if ai.ID == d.h.ID() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = d.h.Connect(ctx, ai)
		}()
	}
	wg.Wait()
	if len(d.bootstrap) > 0 {
		ok := false
		for _, err := range errs {
			ok = ok || err == nil
		}
		if !ok {
			return fmt.Errorf("%w: %w", ErrNoBootstrap, errors.Join(errs...))
		}
	}
	return d.dht.Bootstrap(ctx)
}

// Refresh refreshes the routing table and waits for it to finish.
func (d *DHT) Refresh(ctx context.Context) error {
	select {
	case err := <-d.dht.ForceRefresh():
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// PublishOffer stores the sealed offer under the signer's key and announces
// the node as a provider of each market and of AnyMarket. The DHT neither
// republishes values nor keeps them past their age: call it again before the
// offer expires.
func (d *DHT) PublishOffer(ctx context.Context, env []byte, markets []string) error {
	if err := d.dht.PutValue(ctx, proto.OfferKey(d.h.ID()), env); err != nil {
		return fmt.Errorf("p2p: put offer: %w", err)
	}
	for _, m := range slices.Concat(markets, []string{AnyMarket}) {
		if err := d.dht.Provide(ctx, proto.MarketCID(m), true); err != nil {
			return fmt.Errorf("p2p: provide market %s: %w", m, err)
		}
	}
	return nil
}

// Found is one offer found in the DHT, already validated.
type Found struct {
	Provider peer.ID
	Envelope []byte
	Offer    *proto.Offer
}

// FindConfig bounds FindOffers.
type FindConfig struct {
	// Market is an exact market key, or AnyMarket ("" means AnyMarket).
	Market string
	// Concurrency bounds parallel offer fetches. Default 32.
	Concurrency int
	// Now is the clock offers are validated against; nil means time.Now.
	Now func() time.Time
	// Newest fetches each offer with a quorum of answers and keeps the
	// best (as FetchOffer), instead of taking the first valid record: for
	// background refreshes, which must see a republished seq but keep
	// nobody waiting.
	Newest bool
}

// FindOffers finds the providers of a market and fetches and validates each
// one's offer. Providers whose offer cannot be fetched or fails validation
// are reported in the joined error, beside the offers that were found. The
// provider channel is always drained.
func (d *DHT) FindOffers(ctx context.Context, cfg FindConfig) ([]Found, error) {
	market := cfg.Market
	if market == "" {
		market = AnyMarket
	}
	conc := cfg.Concurrency
	if conc <= 0 {
		conc = 32
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	var (
		mu    sync.Mutex
		found []Found
		errs  []error
		wg    sync.WaitGroup
		sem   = make(chan struct{}, conc)
		seen  = map[peer.ID]bool{}
	)
	for ai := range d.dht.FindProvidersAsync(ctx, proto.MarketCID(market), 0) {
		if seen[ai.ID] {
			continue
		}
		seen[ai.ID] = true
		if len(ai.Addrs) > 0 && ai.ID != d.h.ID() {
			d.h.Peerstore().AddAddrs(ai.ID, ai.Addrs, peerstore.TempAddrTTL)
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			fetch := d.fetch
			if cfg.Newest {
				fetch = d.fetchBest
			}
			f, err := fetch(ctx, ai.ID, now())
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("provider %s: %w", ai.ID, err))
				return
			}
			found = append(found, f)
		}()
	}
	wg.Wait()
	return found, errors.Join(errs...)
}

// FetchOfferFirst gets one provider's offer: the first record found that
// validates, without waiting for a quorum (see fetch). Its seq may be older
// than the newest: callers that need a seq check it and fall back to
// FetchOffer.
func (d *DHT) FetchOfferFirst(ctx context.Context, p peer.ID) (Found, error) {
	return d.fetch(ctx, p, time.Now())
}

// FetchOffer gets and validates one provider's current offer: the best
// record of a quorum of answers, for callers that need the newest seq.
func (d *DHT) FetchOffer(ctx context.Context, p peer.ID) (Found, error) {
	return d.fetchBest(ctx, p, time.Now())
}

func (d *DHT) fetchBest(ctx context.Context, p peer.ID, now time.Time) (Found, error) {
	env, err := d.dht.GetValue(ctx, proto.OfferKey(p))
	if err != nil {
		return Found{}, fmt.Errorf("get offer: %w", err)
	}
	o, signer, err := OpenOffer(env, now)
	if err != nil {
		return Found{}, err
	}
	if signer != p {
		return Found{}, fmt.Errorf("%w: asked for %s", ErrOfferSigner, p)
	}
	return Found{Provider: p, Envelope: env, Offer: o}, nil
}

// DirectHedge is how long fetch waits for a provider's own answer before it
// also searches the DHT for the provider's record. A direct answer takes a
// dial and one round trip; a DHT search takes log N hops and makes every
// record holder on its path send the whole signed offer, so starting both
// at once (as fetch did) spends a lookup per provider that is almost never
// used: a cold buyer fetching 75 offers made ~1,500 DHT requests. Past
// this delay, or as soon as the direct request fails, the search runs; a
// provider that is gone costs DirectHedge more than the search alone.
const DirectHedge = 500 * time.Millisecond

// fetch gets a provider's offer: the first record that validates and is
// signed by the provider, from the provider itself (OfferProtocol, when
// this host knows an address of it) or else the DHT's value search
// (search), hedged: the search starts when the direct request fails or
// has not answered within DirectHedge, and then whichever validates first
// wins. Offers carry their own signature, seq and expiry, so one valid
// record is a usable answer, and the caller keeps the newest seq it has
// seen. When both fail, the error is the DHT's (routing.ErrNotFound for no
// record), with the direct request's reason beside it.
func (d *DHT) fetch(ctx context.Context, p peer.ID, now time.Time) (Found, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		f      Found
		err    error
		direct bool
	}
	results := make(chan result, 2)
	search := func() {
		go func() {
			f, err := d.search(ctx, p, now)
			results <- result{f, err, false}
		}()
	}
	var dhtErr, directErr error
	paths := 1
	if p != d.h.ID() && (d.h.Network().Connectedness(p) == network.Connected || len(d.h.Peerstore().Addrs(p)) > 0) {
		paths++
		go func() {
			f, err := d.fetchDirect(ctx, p, now)
			results <- result{f, err, true}
		}()
		hedge := time.NewTimer(DirectHedge)
		select {
		case r := <-results:
			hedge.Stop()
			if r.err == nil {
				return r.f, nil
			}
			directErr = r.err
			paths--
		case <-hedge.C:
		case <-ctx.Done():
			hedge.Stop()
			return Found{}, fmt.Errorf("get offer: %w", ctx.Err())
		}
	}
	search()
	for range paths {
		r := <-results
		if r.err == nil {
			return r.f, nil
		}
		if r.direct {
			directErr = r.err
		} else {
			dhtErr = r.err
		}
	}
	if directErr != nil {
		return Found{}, fmt.Errorf("%w (from the provider: %v)", dhtErr, directErr)
	}
	return Found{}, dhtErr
}

// fetchDirect asks p itself for its offer (RequestOffer) and checks it as
// a DHT record is checked.
func (d *DHT) fetchDirect(ctx context.Context, p peer.ID, now time.Time) (Found, error) {
	env, err := RequestOffer(ctx, d.h, p)
	if err != nil {
		return Found{}, err
	}
	o, signer, err := OpenOffer(env, now)
	if err == nil && signer != p {
		err = fmt.Errorf("%w: asked for %s", ErrOfferSigner, p)
	}
	if err != nil {
		return Found{}, err
	}
	return Found{Provider: p, Envelope: env, Offer: o}, nil
}

// search searches the DHT for a provider's offer and returns the first
// record that validates and is signed by the provider, without waiting for
// a quorum of answers (records with a lower seq than one already held are
// harmless: they expire). The search stops once it has an answer.
func (d *DHT) search(ctx context.Context, p peer.ID, now time.Time) (Found, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	vals, err := d.dht.SearchValue(ctx, proto.OfferKey(p))
	if err != nil {
		return Found{}, fmt.Errorf("get offer: %w", err)
	}
	var last error
	for env := range vals {
		o, signer, err := OpenOffer(env, now)
		if err == nil && signer != p {
			err = fmt.Errorf("%w: asked for %s", ErrOfferSigner, p)
		}
		if err != nil {
			last = err
			continue
		}
		return Found{Provider: p, Envelope: env, Offer: o}, nil
	}
	if last != nil {
		return Found{}, last
	}
	if ctx.Err() != nil {
		return Found{}, fmt.Errorf("get offer: %w", ctx.Err())
	}
	return Found{}, fmt.Errorf("get offer: %w", routing.ErrNotFound)
}

// Providers finds up to max providers of a market (or AnyMarket) and adds
// their addresses to the peerstore. The provider channel is always drained.
func (d *DHT) Providers(ctx context.Context, market string, max int) []peer.AddrInfo {
	var out []peer.AddrInfo
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for ai := range d.dht.FindProvidersAsync(ctx, proto.MarketCID(market), max) {
		if ai.ID == d.h.ID() {
			continue
		}
		if len(ai.Addrs) > 0 {
			d.h.Peerstore().AddAddrs(ai.ID, ai.Addrs, peerstore.TempAddrTTL)
		}
		out = append(out, ai)
	}
	return out
}
