package exchange

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	recordpb "github.com/libp2p/go-libp2p/core/record/pb"
	gproto "google.golang.org/protobuf/proto"

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

// TestOfferVerifiedOnce: an offer that travels beside each of its
// provider's asks (gossip, sync, reconciliation) costs a replica one
// signature check, not one per ask: the node's Verified cache holds each
// ask once and the offer once, and a sync that brings them all again adds
// nothing. A tampered copy of that offer beside another ask is still
// refused (bad-offer), as without the cache. Negative control: without a
// cache nothing is remembered and the same asks are held.
func TestOfferVerifiedOnce(t *testing.T) {
	for _, cached := range []bool{true, false} {
		k, _, err := crypto.GenerateEd25519Key(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		maker, _ := peer.IDFromPrivateKey(k)
		var v *p2p.Verified
		if cached {
			v = p2p.NewVerified(p2p.DefaultVerifiedEntries)
		}
		offers := NewOffers(context.Background(), OffersConfig{DHT: &fakeDHT{offers: map[peer.ID]*proto.Offer{}}, Verified: v})
		rejects := rejectsVec()
		b := New(Config{Offers: offers, Rejects: rejects, Log: slog.New(slog.DiscardHandler), Hooks: Hooks{CheckAsk: coverCheck(offers)},
			Admission: AdmissionConfig{StampBits: testStampBits}})
		stamp, err := p2p.GrindStamp(context.Background(), maker, testStampBits)
		if err != nil {
			t.Fatal(err)
		}
		offer := sealOffer(t, k, maker, 8)
		const asks = 5
		var msgs [][]byte
		var ids []string
		for i := range asks + 1 {
			env, ev := sealAsk(t, k, maker, uint64(i+1))
			off := offer
			if i == asks {
				off = bookFlipSig(t, offer) // the last ask carries a forged copy
			}
			msgs = append(msgs, mustMarshal(t, &proto.BookMessage{Body: &proto.BookMessage_Order{Order: env}, Offer: off, MakerStamp: stamp}))
			ids = append(ids, ev.Order.ID)
		}
		for pass := range 2 {
			b.applyData(context.Background(), mkt, "sync", msgs)
			for _, id := range ids[:asks] {
				if !b.Holds(mkt, "USD", id) {
					t.Fatalf("cached %v pass %d: ask %s not held", cached, pass, id)
				}
			}
			if b.Holds(mkt, "USD", ids[asks]) {
				t.Fatalf("cached %v: the ask beside a forged offer is held", cached)
			}
			if n := count(rejects, "sync", "bad-offer"); n != float64(pass+1) {
				t.Fatalf("cached %v pass %d: bad-offer counted %v times, want %d", cached, pass, n, pass+1)
			}
			want := 0
			if cached {
				want = asks + 1 + 1 // the asks, the offer, and the last ask's envelope (checked before its offer)
			}
			if n := v.Len(); n != want {
				t.Fatalf("cached %v pass %d: %d envelopes remembered, want %d", cached, pass, n, want)
			}
		}
	}
}

// sealAsk is a sealed ask of maker's for 4 GPUs, unique by nonce, and its
// event.
func sealAsk(t *testing.T, k crypto.PrivKey, maker peer.ID, nonce uint64) ([]byte, *p2p.BookEvent) {
	t.Helper()
	now := time.Now()
	o := &proto.Order{
		Maker: []byte(maker), Side: proto.Side_SIDE_ASK, Market: mkt, Currency: "USD", Quantity: 4, PriceMicros: 2_000_000,
		LeaseType: proto.LeaseType_LEASE_TYPE_ON_DEMAND, CreatedUnixMs: now.UnixMilli(), ExpiresUnixMs: now.Add(time.Hour).UnixMilli(),
		Nonce: nonce, OfferSeq: 1, MinDurationS: 60, MaxDurationS: 3600,
	}
	env, err := p2p.Seal(k, o, proto.MaxBookMessageSize)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := p2p.DecodeBook(mustMarshal(t, &proto.BookMessage{Body: &proto.BookMessage_Order{Order: env}}), mkt, now)
	if err != nil {
		t.Fatal(err)
	}
	return env, ev
}

// bookFlipSig is env with one bit of its signature flipped.
func bookFlipSig(t *testing.T, env []byte) []byte {
	t.Helper()
	var e recordpb.Envelope
	if err := gproto.Unmarshal(env, &e); err != nil {
		t.Fatal(err)
	}
	e.Signature[0] ^= 1
	b, err := gproto.Marshal(&e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
