package exchange

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// fakeDHT serves one offer per provider and counts fetches.
type fakeDHT struct {
	mu      sync.Mutex
	offers  map[peer.ID]*proto.Offer
	fetches int
}

func (d *fakeDHT) FindOffers(_ context.Context, cfg p2p.FindConfig) ([]p2p.Found, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []p2p.Found
	for p, o := range d.offers {
		out = append(out, p2p.Found{Provider: p, Offer: o})
	}
	return out, nil
}

func (d *fakeDHT) FetchOfferFirst(ctx context.Context, p peer.ID) (p2p.Found, error) {
	return d.FetchOffer(ctx, p)
}

func (d *fakeDHT) FetchOffer(_ context.Context, p peer.ID) (p2p.Found, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fetches++
	o, ok := d.offers[p]
	if !ok {
		return p2p.Found{}, errors.New("routing: not found")
	}
	return p2p.Found{Provider: p, Offer: o}, nil
}

func (d *fakeDHT) set(p peer.ID, o *proto.Offer) { d.mu.Lock(); d.offers[p] = o; d.mu.Unlock() }
func (d *fakeDHT) count() int                    { d.mu.Lock(); defer d.mu.Unlock(); return d.fetches }

func offer(seq uint64, expires time.Time) *proto.Offer {
	return &proto.Offer{Seq: seq, ExpiresUnixMs: expires.UnixMilli()}
}

func TestOffersOf(t *testing.T) {
	clk := &clock{t: t0}
	const self, prov = peer.ID("self"), peer.ID("provider")
	own := offer(7, t0.Add(time.Hour))
	dht := &fakeDHT{offers: map[peer.ID]*proto.Offer{prov: offer(1, t0.Add(time.Hour))}}
	x := NewOffers(context.Background(), OffersConfig{DHT: dht, Self: self, Published: func() *proto.Offer { return own }, Now: clk.now})
	ctx := context.Background()

	if o, err := x.Of(ctx, self, 0); err != nil || o != own || dht.count() != 0 {
		t.Fatalf("own offer: %v, %v, %d fetches", o, err, dht.count())
	}
	if o, err := x.Of(ctx, prov, 0); err != nil || o.Seq != 1 {
		t.Fatalf("first fetch: %v, %v", o, err)
	}
	if _, err := x.Of(ctx, prov, 0); err != nil || dht.count() != 1 {
		t.Fatalf("second call fetched again (%d fetches): %v", dht.count(), err)
	}
	// An order naming a newer seq than the cached one fetches.
	dht.set(prov, offer(2, t0.Add(time.Hour)))
	if o, err := x.Of(ctx, prov, 2); err != nil || o.Seq != 2 || dht.count() != 2 {
		t.Fatalf("min seq 2: %v, %v, %d fetches", o, err, dht.count())
	}
	// An expired cached offer is fetched again; one the DHT lacks is unknown.
	clk.set(t0.Add(2 * time.Hour))
	if _, err := x.Of(ctx, prov, 0); err != nil || dht.count() != 3 {
		t.Fatalf("expired cache: %v, %d fetches", err, dht.count())
	}
	if _, err := x.Of(ctx, "stranger", 0); !errors.Is(err, ErrOfferUnknown) {
		t.Fatalf("unknown provider: %v, want ErrOfferUnknown", err)
	}
	// An older offer never replaces a newer one in the cache.
	x.Remember(prov, offer(1, t0.Add(3*time.Hour)))
	if c := x.Cached(prov); c.Seq != 2 {
		t.Fatalf("cache holds seq %d after an older offer, want 2", c.Seq)
	}
}

func TestOffersWarm(t *testing.T) {
	clk := &clock{t: t0}
	dht := &fakeDHT{offers: map[peer.ID]*proto.Offer{"p1": offer(1, t0.Add(time.Hour)), "p2": offer(1, t0.Add(30*time.Second))}}
	ctx, cancel := context.WithCancel(context.Background())
	x := NewOffers(ctx, OffersConfig{DHT: dht, Now: clk.now})
	defer func() { cancel(); x.Wait() }()

	if _, warm := x.Warm(mkt); warm {
		t.Fatal("warm before any lookup")
	}
	if got, err := x.Lookup(ctx, mkt, false); err != nil || len(got) != 2 {
		t.Fatalf("lookup: %d offers, %v", len(got), err)
	}
	clk.set(t0.Add(discoveryRefresh - time.Second)) // young enough not to refresh
	got, warm := x.Warm(mkt)
	if !warm || len(got) != 2 {
		t.Fatalf("right after a lookup: warm %v, %d offers", warm, len(got))
	}
	clk.set(t0.Add(discoveryWarm + time.Second))
	if _, warm = x.Warm(mkt); warm {
		t.Fatal("a lookup older than the warm window still answered")
	}
	// A fresh lookup answers warm, without the offers that expired since.
	if _, err := x.Lookup(ctx, mkt, false); err != nil {
		t.Fatal(err)
	}
	clk.set(t0.Add(discoveryWarm + 2*time.Second))
	if got, warm = x.Warm(mkt); !warm || len(got) != 1 || got["p1"] == nil {
		t.Fatalf("after p2 expired: warm %v, %v", warm, got)
	}
}
