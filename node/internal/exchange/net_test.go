package exchange

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"
	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// Multi-peer tests of the exchange on real libp2p hosts on 127.0.0.1
// (TCP, noise, gossipsub with StrictSign), each with its own Books; every
// assertion about another replica polls to a deadline.

// netPeer is one host with its replicas.
type netPeer struct {
	key     crypto.PrivKey
	h       host.Host
	books   *Books
	offers  *Offers
	rejects *prometheus.CounterVec
	fake    *fakeDHT // noDHT's
}

// peerOpts configure newNetPeer.
type peerOpts struct {
	dht       bool          // a real DHT (alone: it serves no offer)
	noDHT     bool          // offers, from a DHT that holds none and dials no one
	reconcile time.Duration // ReconcileEvery; 0: never periodically
	// providers, when set, is the provider-record lookup sync uses.
	providers func(ctx context.Context, mkt string, max int) []peer.AddrInfo
	noJoin    bool // the test joins the market itself
	admission AdmissionConfig
	// stamp is Config.Stamp; nil: a stamp of testStampBits, ground for
	// the peer's key (the admission then asks that much work), unless
	// unstamped.
	stamp     func() []byte
	unstamped bool
	// offerFor, when set, is Hooks.OfferFor: the offer a published ask
	// carries.
	offerFor func(po *proto.Order) []byte
	// inlineMax is Config.InlineOfferMax.
	inlineMax int
	// ahead sets the peer's clock (its books' and offers') that far
	// ahead of the others'.
	ahead time.Duration
}

// coverCheck is the ask rule the node applies (askFacts), reduced to what
// these tests need: the maker's offer, from offers, has as many GPUs in
// the market as the ask sells.
func coverCheck(offers *Offers) func(ctx context.Context, o *market.Order, po *proto.Order) error {
	return func(ctx context.Context, o *market.Order, po *proto.Order) error {
		p, err := peer.Decode(o.Maker)
		if err != nil {
			return err
		}
		off, err := offers.Of(ctx, p, po.GetOfferSeq())
		if err != nil {
			return err
		}
		n := 0
		for _, g := range off.Gpus {
			if g.Market == o.Market {
				n++
			}
		}
		if uint32(n) < o.Quantity {
			return fmt.Errorf("ask for %d GPUs, offer has %d", o.Quantity, n)
		}
		return nil
	}
}

func newNetPeer(t *testing.T, opts peerOpts) *netPeer {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	h, err := p2p.NewHost(p2p.HostConfig{Key: k, Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	np := &netPeer{key: k, h: h, rejects: rejectsVec()}
	ps, err := p2p.NewPubSub(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	var d *p2p.DHT
	if opts.dht {
		if d, err = p2p.NewDHT(p2p.DHTConfig{Host: h}); err != nil {
			t.Fatal(err)
		}
		np.offers = NewOffers(ctx, OffersConfig{DHT: d, Self: h.ID()})
	}
	now := func() time.Time { return time.Now().Add(opts.ahead) }
	if opts.noDHT {
		np.fake = &fakeDHT{}
		np.offers = NewOffers(ctx, OffersConfig{DHT: np.fake, Self: h.ID(), Now: now})
	}
	if np.offers != nil {
		p2p.HandleOfferDigest(h, np.offers.Held, nil) // as the node does
	}
	every := opts.reconcile
	if every == 0 {
		every = -1
	}
	if opts.stamp == nil && !opts.unstamped {
		st, err := p2p.GrindStamp(ctx, h.ID(), testStampBits)
		if err != nil {
			t.Fatal(err)
		}
		opts.stamp = func() []byte { return st }
	}
	if opts.admission.StampBits == 0 {
		opts.admission.StampBits = testStampBits
	}
	cfg := Config{Host: h, PubSub: ps, Rejects: np.rejects, ReconcileEvery: every, Offers: np.offers, Log: slog.New(slog.DiscardHandler), Providers: opts.providers,
		Admission: opts.admission, Stamp: opts.stamp, InlineOfferMax: opts.inlineMax, Now: now}
	if np.offers != nil {
		cfg.Hooks.CheckAsk = coverCheck(np.offers)
	}
	cfg.Hooks.OfferFor = opts.offerFor
	np.books = New(cfg)
	np.books.Start(ctx)
	p2p.HandleSync(h, np.books.AnswerSync) // as the node does
	t.Cleanup(func() {
		cancel()
		np.books.Wait()
		if np.offers != nil {
			np.offers.Wait()
		}
		if d != nil {
			d.Close()
		}
		h.Close()
	})
	if opts.noJoin {
		return np
	}
	jctx, jcancel := context.WithTimeout(ctx, 10*time.Second)
	defer jcancel()
	if err := np.books.JoinMarket(jctx, mkt); err != nil {
		t.Fatal(err)
	}
	return np
}

func connect(t *testing.T, a, b *netPeer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.h.Connect(ctx, peer.AddrInfo{ID: b.h.ID(), Addrs: b.h.Addrs()}); err != nil {
		t.Fatal(err)
	}
}

// waitUntil polls cond until it holds, failing the test at the deadline.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// meshed waits until a bid of each of two peers reaches the other by
// gossip: the first messages after a connection may go before the
// gossipsub mesh forms (a node's replica gets those by sync).
func meshed(t *testing.T, a, b *netPeer) {
	t.Helper()
	nonce := uint64(1 << 40)
	for _, pair := range [][2]*netPeer{{a, b}, {b, a}} {
		from, to := pair[0], pair[1]
		var ids []string
		waitUntil(t, "a probe bid to cross the mesh", func() bool {
			for _, id := range ids {
				if to.books.Holds(mkt, "USD", id) {
					return true
				}
			}
			nonce++
			env, ev := from.sealOrder(t, proto.Side_SIDE_BID, 1, 10_000, nonce)
			from.publish(t, env, ev, nil)
			ids = append(ids, ev.Order.ID)
			time.Sleep(100 * time.Millisecond)
			return false
		})
	}
}

// sealOrder signs an order of p's: an ask of qty GPUs or a bid, at price
// micro-USD, unique by nonce.
func (p *netPeer) sealOrder(t *testing.T, side proto.Side, qty uint32, price int64, nonce uint64) ([]byte, *p2p.BookEvent) {
	t.Helper()
	return sealOrderBy(t, p.key, side, qty, price, nonce)
}

// sealOrderBy is sealOrder for the maker of key k.
func sealOrderBy(t *testing.T, k crypto.PrivKey, side proto.Side, qty uint32, price int64, nonce uint64) ([]byte, *p2p.BookEvent) {
	t.Helper()
	maker, err := peer.IDFromPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	o := &proto.Order{
		Maker: []byte(maker), Side: side, Market: mkt, Currency: "USD", Quantity: qty, PriceMicros: price,
		LeaseType: proto.LeaseType_LEASE_TYPE_ON_DEMAND, CreatedUnixMs: now.UnixMilli(), ExpiresUnixMs: now.Add(time.Hour).UnixMilli(),
		Nonce: nonce, OfferSeq: 1,
	}
	if side == proto.Side_SIDE_ASK {
		o.MinDurationS, o.MaxDurationS = 60, 3600
	} else {
		o.DurationS = 3600
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

func mustMarshal(t *testing.T, m *proto.BookMessage) []byte {
	t.Helper()
	b, err := p2p.MarshalBook(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sealOffer is an offer of signer's naming provider, with gpus H100s.
func sealOffer(t *testing.T, signer crypto.PrivKey, provider peer.ID, gpus int) []byte {
	t.Helper()
	return sealOfferSeq(t, signer, provider, gpus, 1)
}

// sealOfferSeq is sealOffer with the offer's seq (a provider's newer offer
// has a larger one).
func sealOfferSeq(t *testing.T, signer crypto.PrivKey, provider peer.ID, gpus int, seq uint64) []byte {
	t.Helper()
	return sealOfferTTL(t, signer, provider, gpus, seq, time.Hour)
}

// sealOfferTTL is sealOfferSeq with the offer's time to live.
func sealOfferTTL(t *testing.T, signer crypto.PrivKey, provider peer.ID, gpus int, seq uint64, ttl time.Duration) []byte {
	t.Helper()
	now := time.Now()
	o := &proto.Offer{
		Provider: []byte(provider), Seq: seq, CreatedUnixMs: now.UnixMilli(), ExpiresUnixMs: now.Add(ttl).UnixMilli(),
		Region: "CN-GZ", Host: &proto.Host{Backend: "sim", CpuCores: 64, MemoryBytes: 1 << 40},
		Pricing:     &proto.Pricing{Currency: "USD", OnDemandMicros: 2_490_000},
		Terms:       &proto.LeaseTerms{MinDurationS: 60, MaxDurationS: 3600, BillingIncrementS: 60},
		Attestation: proto.AttestationLevel_ATTESTATION_LEVEL_SELF_REPORTED,
	}
	for i := range gpus {
		o.Gpus = append(o.Gpus, &proto.GPU{Uuid: fmt.Sprintf("GPU-%08x-0000-0000-0000-000000000000", i), Name: "NVIDIA H100 80GB HBM3",
			Market: mkt, MemoryBytes: 80 << 30})
	}
	env, err := p2p.SealOffer(signer, o)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// publish gossips an order of p's with offer beside it (nil: none), and
// rests it in p's own replica as a node does.
func (p *netPeer) publish(t *testing.T, env []byte, ev *p2p.BookEvent, offer []byte) {
	t.Helper()
	p.publishMsg(t, &proto.BookMessage{Body: &proto.BookMessage_Order{Order: env}, Offer: offer}, ev)
}

// publishMsg gossips a book message of p's whose event is ev.
func (p *netPeer) publishMsg(t *testing.T, m *proto.BookMessage, ev *p2p.BookEvent) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.books.Publish(ctx, mkt, m, ev); err != nil {
		t.Fatal(err)
	}
}

// TestAskCarriesItsOffer: a replica whose DHT cannot serve the provider's
// offer (a real DHT with no peer holding it) accepts an ask that carries
// the offer, without counting it unknown; an ask with an offer signed by
// another key is refused (bad-offer), and one its offer does not cover
// (9 GPUs of 8) is refused (offer-mismatch). Negative control: the
// honest ask before them is held.
func TestAskCarriesItsOffer(t *testing.T) {
	maker := newNetPeer(t, peerOpts{})
	replica := newNetPeer(t, peerOpts{dht: true})
	connect(t, replica, maker)
	meshed(t, maker, replica)

	offer := sealOffer(t, maker.key, maker.h.ID(), 8)
	env, ev := maker.sealOrder(t, proto.Side_SIDE_ASK, 4, 2_000_000, 1)
	maker.publish(t, env, ev, offer)
	waitUntil(t, "the replica to hold the ask", func() bool { return replica.books.Holds(mkt, "USD", ev.Order.ID) })
	if n := count(replica.rejects, "book", "offer-unknown"); n != 0 {
		t.Errorf("offer-unknown counted %v times for an ask that carried its offer", n)
	}
	if o := replica.offers.Cached(maker.h.ID()); o == nil || o.Seq != 1 {
		t.Errorf("the replica did not keep the offer that travelled with the ask: %v", o)
	}

	third, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	thirdID, _ := peer.IDFromPrivateKey(third)
	forgedEnv, forgedEv := maker.sealOrder(t, proto.Side_SIDE_ASK, 4, 2_000_000, 2)
	maker.publish(t, forgedEnv, forgedEv, sealOffer(t, third, thirdID, 8))
	waitUntil(t, "the forged offer to be refused", func() bool { return count(replica.rejects, "book", "bad-offer") == 1 })

	bigEnv, bigEv := maker.sealOrder(t, proto.Side_SIDE_ASK, 9, 2_000_000, 3)
	maker.publish(t, bigEnv, bigEv, offer)
	waitUntil(t, "the uncovered ask to be refused", func() bool { return count(replica.rejects, "book", "offer-mismatch") == 1 })
	if replica.books.Holds(mkt, "USD", forgedEv.Order.ID) || replica.books.Holds(mkt, "USD", bigEv.Order.ID) {
		t.Fatal("the replica holds a refused ask")
	}
}

// TestAskRetriedUntilOfferKnown: an ask whose offer the replica cannot
// find (no offer beside it, a DHT that cannot serve it) is not refused for
// good: it waits, and is held once the offer arrives with another ask of
// the same provider.
func TestAskRetriedUntilOfferKnown(t *testing.T) {
	maker := newNetPeer(t, peerOpts{})
	replica := newNetPeer(t, peerOpts{dht: true})
	connect(t, replica, maker)
	meshed(t, maker, replica)

	env1, ev1 := maker.sealOrder(t, proto.Side_SIDE_ASK, 2, 2_000_000, 1)
	maker.publish(t, env1, ev1, nil)
	waitUntil(t, "the ask without its offer to wait", func() bool {
		return count(replica.rejects, "book", "offer-unknown") >= 1 && replica.books.Retrying() == 1
	})
	if replica.books.Holds(mkt, "USD", ev1.Order.ID) {
		t.Fatal("an ask whose offer is unknown is held")
	}
	env2, ev2 := maker.sealOrder(t, proto.Side_SIDE_ASK, 2, 2_100_000, 2)
	maker.publish(t, env2, ev2, sealOffer(t, maker.key, maker.h.ID(), 8))
	waitUntil(t, "both asks to be held", func() bool {
		return replica.books.Holds(mkt, "USD", ev1.Order.ID) && replica.books.Holds(mkt, "USD", ev2.Order.ID)
	})
	if n := replica.books.Retrying(); n != 0 {
		t.Errorf("%d asks still wait", n)
	}
}

// TestLateReplicaTakesAskOnExpiredOffer: a replica hands on the offer an
// ask travelled with for as long as the ask is open; a node that syncs
// after that offer expired takes the ask on it, as the replica did, with
// no DHT lookup (the 1,000-node stall: late nodes refused every
// ask, then looked each provider up). Asks made on two offers of one
// provider each travel with their own. Negative control: outside an ask's
// check the expired offer is not current (Of looks it up, and fails).
func TestLateReplicaTakesAskOnExpiredOffer(t *testing.T) {
	maker := newNetPeer(t, peerOpts{})
	replica := newNetPeer(t, peerOpts{noDHT: true})
	connect(t, replica, maker)
	meshed(t, maker, replica)

	offer1 := sealOfferTTL(t, maker.key, maker.h.ID(), 8, 1, time.Minute)
	offer2 := sealOfferTTL(t, maker.key, maker.h.ID(), 8, 2, time.Minute)
	var ids []string
	for i, off := range [][]byte{offer1, offer1, offer2} {
		env, ev := maker.sealOrder(t, proto.Side_SIDE_ASK, 4, 2_000_000+int64(i), uint64(i+1))
		maker.publish(t, env, ev, off)
		ids = append(ids, ev.Order.ID)
	}
	waitUntil(t, "the replica to hold the asks", func() bool {
		for _, id := range ids {
			if !replica.books.Holds(mkt, "USD", id) {
				return false
			}
		}
		return true
	})

	late := newNetPeer(t, peerOpts{noDHT: true, noJoin: true, ahead: 5 * time.Minute}) // both offers expired
	connect(t, late, replica)
	waitUntil(t, "the replica's subscription", func() bool { return subscribed(late, replica.h.ID()) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := late.books.JoinMarket(ctx, mkt); err != nil { // syncs from the replica
		t.Fatal(err)
	}
	for _, id := range ids {
		if !late.books.Holds(mkt, "USD", id) {
			t.Errorf("the late node does not hold ask %s", id)
		}
	}
	for _, why := range []string{"offer-unknown", "bad-offer", "offer-mismatch"} {
		if n := count(late.rejects, "book", why) + count(late.rejects, "sync", why) + count(late.rejects, "reconcile", why); n != 0 {
			t.Errorf("the late node counted %s %v times", why, n)
		}
	}
	if n := late.fake.count(); n != 0 {
		t.Errorf("the late node looked up offers %d times", n)
	}
	if o := late.offers.Cached(maker.h.ID()); o == nil || o.Seq != 2 {
		t.Errorf("the late node keeps offer %v, want the newest (seq 2)", o)
	}

	if _, err := late.offers.Of(context.Background(), maker.h.ID(), 1); !errors.Is(err, ErrOfferUnknown) || late.fake.count() == 0 {
		t.Fatalf("the expired offer outside an ask's check = %v after %d lookups, want %v after one", err, late.fake.count(), ErrOfferUnknown)
	}
}

// holdOffer makes p hold a sealed offer, as a node holds its own and
// those it validated: what it answers pulls of by digest with. It
// returns the offer's digest.
func (p *netPeer) holdOffer(t *testing.T, env []byte) []byte {
	t.Helper()
	o, signer, err := p2p.OpenOffer(env, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p.offers.RememberSealed(signer, o, env)
	d := p2p.OfferDigest(env)
	return d[:]
}

// publishDigest gossips an ask of p's with its offer's digest beside it,
// as a node's Publish does.
func (p *netPeer) publishDigest(t *testing.T, env []byte, ev *p2p.BookEvent, digest []byte) {
	t.Helper()
	p.publishMsg(t, &proto.BookMessage{Body: &proto.BookMessage_Order{Order: env}, OfferDigest: digest}, ev)
}

// TestFirstAskCarriesItsOffer: a node's first ask in a market carries its
// offer whole, the asks after it with the same offer only its digest, and
// the first ask with a new offer that offer whole again; an offer larger
// than InlineOfferMax goes by digest from the first ask on. The replica
// holds every ask. What travels is read off the replica's own
// subscription to the topic, after validation.
func TestFirstAskCarriesItsOffer(t *testing.T) {
	var offer atomic.Pointer[[]byte]
	maker := newNetPeer(t, peerOpts{noDHT: true, offerFor: func(*proto.Order) []byte { return *offer.Load() }, inlineMax: 2000})
	// Admission off: the maker's five asks and the probes are more
	// orders than a maker with no fill may rest.
	replica := newNetPeer(t, peerOpts{noDHT: true, admission: AdmissionConfig{Off: true}})
	connect(t, replica, maker)
	meshed(t, maker, replica)
	replica.books.mu.Lock()
	sub, err := replica.books.topics[mkt].Subscribe()
	replica.books.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Cancel()
	// next returns what beside the ask id reached the replica.
	next := func(id string) *proto.BookMessage {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for {
			msg, err := sub.Next(ctx)
			if err != nil {
				t.Fatalf("ask %s did not arrive: %v", id, err)
			}
			var m proto.BookMessage
			if err := gproto.Unmarshal(msg.Data, &m); err != nil {
				t.Fatal(err)
			}
			if ev, ok := msg.ValidatorData.(*p2p.BookEvent); ok && ev.Kind == p2p.KindOrder && ev.Order.ID == id {
				return &m
			}
		}
	}
	off1, off2 := sealOfferSeq(t, maker.key, maker.h.ID(), 8, 1), sealOfferSeq(t, maker.key, maker.h.ID(), 6, 2)
	maker.holdOffer(t, off1)
	offer.Store(&off1)
	d1 := p2p.OfferDigest(off1)
	for i, want := range []struct {
		offer  []byte
		digest []byte
	}{{off1, nil}, {nil, d1[:]}, {nil, d1[:]}} {
		env, ev := maker.sealOrder(t, proto.Side_SIDE_ASK, 4, 2_000_000, uint64(i+1))
		maker.publishMsg(t, &proto.BookMessage{Body: &proto.BookMessage_Order{Order: env}}, ev)
		m := next(ev.Order.ID)
		if !bytes.Equal(m.Offer, want.offer) || !bytes.Equal(m.OfferDigest, want.digest) {
			t.Fatalf("ask %d carried an offer of %d bytes and a digest of %d, want %d and %d", i+1, len(m.Offer), len(m.OfferDigest), len(want.offer), len(want.digest))
		}
		waitUntil(t, "the replica to hold the ask", func() bool { return replica.books.Holds(mkt, "USD", ev.Order.ID) })
	}
	maker.holdOffer(t, off2)
	offer.Store(&off2)
	env, ev := maker.sealOrder(t, proto.Side_SIDE_ASK, 4, 2_000_000, 9)
	maker.publishMsg(t, &proto.BookMessage{Body: &proto.BookMessage_Order{Order: env}}, ev)
	if m := next(ev.Order.ID); !bytes.Equal(m.Offer, off2) || m.OfferDigest != nil {
		t.Fatalf("the first ask with a new offer carried an offer of %d bytes and a digest of %d, want the new offer whole", len(m.Offer), len(m.OfferDigest))
	}
	big := sealOfferSeq(t, maker.key, maker.h.ID(), 40, 3)
	if len(off2) > 2000 || len(big) <= 2000 {
		t.Fatalf("offers of %d and %d bytes: the test needs one under 2000 and one over", len(off2), len(big))
	}
	maker.holdOffer(t, big)
	offer.Store(&big)
	env, ev = maker.sealOrder(t, proto.Side_SIDE_ASK, 4, 2_000_000, 10)
	maker.publishMsg(t, &proto.BookMessage{Body: &proto.BookMessage_Order{Order: env}}, ev)
	if m, d := next(ev.Order.ID), p2p.OfferDigest(big); m.Offer != nil || !bytes.Equal(m.OfferDigest, d[:]) {
		t.Fatalf("the first ask with a large offer carried an offer of %d bytes and a digest of %d, want the digest", len(m.Offer), len(m.OfferDigest))
	}
	waitUntil(t, "the replica to hold the ask of the large offer (pulled)", func() bool { return replica.books.Holds(mkt, "USD", ev.Order.ID) })
	if n := count(replica.rejects, "book", "offer-unknown") + count(replica.rejects, "book", "offer-pull-failed"); n != 0 {
		t.Errorf("the replica counted %v offers unknown or failed pulls", n)
	}
}

// TestAskPullsItsOffer: an ask gossiped with its offer's digest reaches a
// replica two hops from its maker, which can get the offer neither from
// the maker nor from a DHT: it pulls it from the peer that relayed the ask
// and holds the ask without counting the offer unknown, and then holds
// the offer under its digest for its own peers. An ask whose offer nobody
// holds yet waits and is held once the relay can pull it (the retry pulls
// again). Negative control: with the relay's digest handler gone, the
// replica cannot get a new offer, and the ask waits until the replica can
// reach the maker, which its retry asks next. An ask whose digest
// names an offer signed by another key is refused at the first hop
// (bad-offer).
func TestAskPullsItsOffer(t *testing.T) {
	maker := newNetPeer(t, peerOpts{noDHT: true})
	relay := newNetPeer(t, peerOpts{noDHT: true})
	replica := newNetPeer(t, peerOpts{noDHT: true})
	connect(t, relay, maker)
	connect(t, replica, relay)
	meshed(t, maker, relay)
	meshed(t, relay, replica)
	if replica.h.Network().Connectedness(maker.h.ID()) == network.Connected {
		t.Fatal("the replica is connected to the maker: nothing is relayed")
	}

	d1 := maker.holdOffer(t, sealOffer(t, maker.key, maker.h.ID(), 8))
	env, ev := maker.sealOrder(t, proto.Side_SIDE_ASK, 4, 2_000_000, 1)
	maker.publishDigest(t, env, ev, d1)
	waitUntil(t, "the replica to hold the ask", func() bool { return replica.books.Holds(mkt, "USD", ev.Order.ID) })
	for _, p := range []*netPeer{relay, replica} {
		if n := count(p.rejects, "book", "offer-unknown") + count(p.rejects, "book", "offer-pull-failed"); n != 0 {
			t.Errorf("an offer pulled by digest was counted unknown or failed %v times", n)
		}
		if p.offers.Held([p2p.OfferDigestSize]byte(d1)) == nil {
			t.Error("a replica does not hold the offer it pulled under its digest")
		}
	}

	// Another maker, whose offer nobody holds yet (a replica that
	// holds an offer of the maker checks the ask against that one): the
	// relay waits, then pulls it.
	maker2 := newNetPeer(t, peerOpts{noDHT: true})
	connect(t, relay, maker2)
	meshed(t, maker2, relay)
	off2 := sealOffer(t, maker2.key, maker2.h.ID(), 8)
	d2 := p2p.OfferDigest(off2)
	env, ev = maker2.sealOrder(t, proto.Side_SIDE_ASK, 4, 2_000_000, 1)
	maker2.publishDigest(t, env, ev, d2[:])
	waitUntil(t, "the relay to wait for the offer", func() bool {
		return count(relay.rejects, "book", "offer-pull-failed") >= 1 && relay.books.Retrying() == 1
	})
	if relay.books.Holds(mkt, "USD", ev.Order.ID) {
		t.Fatal("the relay holds an ask whose offer it could not get")
	}
	maker2.holdOffer(t, off2)
	waitUntil(t, "the relay to hold the ask once it could pull its offer", func() bool { return relay.books.Holds(mkt, "USD", ev.Order.ID) })

	// Negative control: the relay answers no pulls; a third maker.
	relay.h.RemoveStreamHandler(p2p.OfferDigestProtocol)
	maker3 := newNetPeer(t, peerOpts{noDHT: true})
	connect(t, relay, maker3)
	meshed(t, maker3, relay)
	d3 := maker3.holdOffer(t, sealOffer(t, maker3.key, maker3.h.ID(), 8))
	env, ev = maker3.sealOrder(t, proto.Side_SIDE_ASK, 4, 2_000_000, 1)
	maker3.publishDigest(t, env, ev, d3)
	waitUntil(t, "the relay to hold the third maker's ask", func() bool { return relay.books.Holds(mkt, "USD", ev.Order.ID) })
	waitUntil(t, "the replica to fail to pull its offer", func() bool {
		return count(replica.rejects, "book", "offer-pull-failed") >= 1 && replica.books.Retrying() == 1
	})
	if replica.books.Holds(mkt, "USD", ev.Order.ID) {
		t.Fatal("the replica holds an ask whose offer no one would give it")
	}
	// Its retry asks the maker too, once the replica can reach it.
	replica.h.Peerstore().AddAddrs(maker3.h.ID(), maker3.h.Addrs(), time.Hour)
	waitUntil(t, "the replica to pull the offer from the maker on a retry", func() bool { return replica.books.Holds(mkt, "USD", ev.Order.ID) })

	third, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	thirdID, _ := peer.IDFromPrivateKey(third)
	dx := maker.holdOffer(t, sealOffer(t, third, thirdID, 8))
	env, ev = maker.sealOrder(t, proto.Side_SIDE_ASK, 4, 2_000_000, 2)
	maker.publishDigest(t, env, ev, dx)
	waitUntil(t, "the relay to refuse an ask naming another's offer", func() bool { return count(relay.rejects, "book", "bad-offer") == 1 })
	if relay.books.Holds(mkt, "USD", ev.Order.ID) {
		t.Fatal("the relay holds an ask naming another's offer")
	}
}

// cancel withdraws p's order id and gossips the cancel, as the node's
// CancelOrder does.
func (p *netPeer) cancel(t *testing.T, id string) {
	t.Helper()
	var err error
	p.books.With(mkt, "USD", func(s *Replica) { err = s.Cancel(id, p.h.ID().String()) })
	if err != nil {
		t.Fatal(err)
	}
	c := &proto.Cancel{Maker: []byte(p.h.ID()), OrderId: id, Market: mkt, CreatedUnixMs: time.Now().UnixMilli()}
	env, err := p2p.Seal(p.key, c, proto.MaxBookMessageSize)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.books.Publish(ctx, mkt, &proto.BookMessage{Body: &proto.BookMessage_Cancel{Cancel: env}}, &p2p.BookEvent{Kind: p2p.KindCancel, Cancel: c}); err != nil {
		t.Fatal(err)
	}
}

func digest(p *netPeer) string { d, _, _ := p.books.Digest(mkt, "USD"); return d }

// TestPartitionCancelConverges: two replicas hold a bid; they are cut
// apart; on one side its maker cancels it and places another bid, on the
// other side a third bid is placed. While cut off the other side still
// holds the cancelled bid (the control: nothing but reconciliation brings
// the cancel). Once they reconnect, the reconciliation on reconnect (no
// periodic one runs) leaves both with the same book: the cancelled bid
// gone from both, both new bids on both.
func TestPartitionCancelConverges(t *testing.T) {
	a, b := newNetPeer(t, peerOpts{}), newNetPeer(t, peerOpts{})
	connect(t, a, b)
	meshed(t, a, b)
	env, ev := a.sealOrder(t, proto.Side_SIDE_BID, 1, 1_000_000, 1)
	a.publish(t, env, ev, nil)
	waitUntil(t, "both to hold the bid", func() bool { return a.books.Holds(mkt, "USD", ev.Order.ID) && b.books.Holds(mkt, "USD", ev.Order.ID) })

	a.h.Network().ClosePeer(b.h.ID())
	waitUntil(t, "the partition", func() bool {
		for _, p := range []*netPeer{a, b} {
			p.books.mu.Lock()
			top := p.books.topics[mkt]
			p.books.mu.Unlock()
			if len(top.ListPeers()) != 0 {
				return false
			}
		}
		return len(a.h.Network().ConnsToPeer(b.h.ID())) == 0
	})
	a.cancel(t, ev.Order.ID)
	envA, evA := a.sealOrder(t, proto.Side_SIDE_BID, 1, 1_100_000, 2)
	a.publish(t, envA, evA, nil)
	envB, evB := b.sealOrder(t, proto.Side_SIDE_BID, 1, 1_200_000, 3)
	b.publish(t, envB, evB, nil)
	waitUntil(t, "each side's own bid", func() bool { return a.books.Holds(mkt, "USD", evA.Order.ID) && b.books.Holds(mkt, "USD", evB.Order.ID) })
	if a.books.Holds(mkt, "USD", ev.Order.ID) || !b.books.Holds(mkt, "USD", ev.Order.ID) {
		t.Fatal("before the heal, the cancel should be on its maker's side only")
	}
	if digest(a) == digest(b) {
		t.Fatal("the replicas agree while cut apart")
	}

	connect(t, b, a)
	waitUntil(t, "the books to converge", func() bool { return digest(a) == digest(b) })
	for _, p := range []*netPeer{a, b} {
		if p.books.Holds(mkt, "USD", ev.Order.ID) || !p.books.Holds(mkt, "USD", evA.Order.ID) || !p.books.Holds(mkt, "USD", evB.Order.ID) {
			t.Fatalf("converged book is not the cancel and both new bids")
		}
	}
}

// TestPeriodicReconcile: a bid one replica got outside gossip (applied
// directly) reaches a peer by the periodic reconciliation, and its
// cancel, applied the same way, follows; the peer's rejects count nothing.
func TestPeriodicReconcile(t *testing.T) {
	a := newNetPeer(t, peerOpts{reconcile: 200 * time.Millisecond})
	b := newNetPeer(t, peerOpts{reconcile: 200 * time.Millisecond})
	connect(t, a, b)
	meshed(t, a, b)
	env, ev := a.sealOrder(t, proto.Side_SIDE_BID, 1, 1_000_000, 1)
	a.books.Apply(mkt, ev)
	waitUntil(t, "the peer to get the bid", func() bool { return b.books.Holds(mkt, "USD", ev.Order.ID) })
	_ = env
	c := &proto.Cancel{Maker: []byte(a.h.ID()), OrderId: ev.Order.ID, Market: mkt, CreatedUnixMs: time.Now().UnixMilli()}
	cenv, err := p2p.Seal(a.key, c, proto.MaxBookMessageSize)
	if err != nil {
		t.Fatal(err)
	}
	a.books.Apply(mkt, &p2p.BookEvent{Kind: p2p.KindCancel, Cancel: c, Envelope: cenv})
	waitUntil(t, "the peer to drop the cancelled bid", func() bool { return !b.books.Holds(mkt, "USD", ev.Order.ID) })
	waitUntil(t, "the digests to agree", func() bool { return digest(a) == digest(b) })
	for _, p := range []*netPeer{a, b} {
		for _, kind := range []string{"book", "reconcile"} {
			for _, reason := range []string{"schema", "bad-envelope", "wrong-signer"} {
				if n := count(p.rejects, kind, reason); n != 0 {
					t.Errorf("%s %s counted %v", kind, reason, n)
				}
			}
		}
	}
}

// TestSyncDoesNotWaitForLookup: a node joining a market with fewer topic
// peers than it syncs from starts a provider-record lookup, but syncs
// from each peer as soon as it is found — a topic peer it already has, or
// one whose subscription arrives during the lookup — and returns with
// their orders while the lookup is still running (it ends cancelled, not
// at its own deadline). Without the early return (a sync that waits for
// the lookup) the lookup ends at its deadline instead.
func TestSyncDoesNotWaitForLookup(t *testing.T) {
	for _, tc := range []struct {
		name        string
		connectLate bool // connect to the holder only once the lookup runs
	}{{"topic peer known", false}, {"topic peer arrives during the lookup", true}} {
		t.Run(tc.name, func(t *testing.T) {
			holder := newNetPeer(t, peerOpts{})
			env, ev := holder.sealOrder(t, proto.Side_SIDE_BID, 1, 10_000, 7)
			holder.publish(t, env, ev, nil)
			started := make(chan struct{})
			ended := make(chan error, 1)
			var once sync.Once
			lookup := func(ctx context.Context, mkt string, max int) []peer.AddrInfo {
				first := false
				once.Do(func() { close(started); first = true })
				<-ctx.Done() // a lookup that finds nobody before its deadline
				if first {
					ended <- ctx.Err()
				}
				return nil
			}
			joiner := newNetPeer(t, peerOpts{providers: lookup, noJoin: true})
			if !tc.connectLate {
				connect(t, joiner, holder)
				waitUntil(t, "the holder's subscription", func() bool {
					return len(joiner.h.Network().Peers()) == 1 && subscribed(joiner, holder.h.ID())
				})
			} else {
				go func() {
					<-started
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					joiner.h.Connect(ctx, peer.AddrInfo{ID: holder.h.ID(), Addrs: holder.h.Addrs()})
				}()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := joiner.books.JoinMarket(ctx, mkt); err != nil {
				t.Fatal(err)
			}
			if !joiner.books.Holds(mkt, "USD", ev.Order.ID) {
				t.Error("JoinMarket returned without the holder's order")
			}
			select {
			case err := <-ended:
				if err != context.Canceled {
					t.Errorf("the lookup ended with %v, want cancelled by the sync's return", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the lookup never ended")
			}
		})
	}
}

// subscribed reports whether p's subscription to the market's topic has
// reached np.
func subscribed(np *netPeer, p peer.ID) bool {
	np.books.mu.Lock()
	tp := np.books.topics[mkt]
	np.books.mu.Unlock()
	if tp == nil {
		return len(np.books.cfg.PubSub.ListPeers(p2p.BookTopic(mkt))) > 0
	}
	for _, q := range tp.ListPeers() {
		if q == p {
			return true
		}
	}
	return false
}
