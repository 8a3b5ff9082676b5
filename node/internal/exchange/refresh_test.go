package exchange

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"

	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// TestOfferRefresh: a provider that republishes refreshes its offer in
// the book (Books.Refresh): a replica two hops away keeps the new offer
// beside the ask and in its cache, and a node that syncs later gets it,
// so discovery from the book stays current. Negative controls: a replay
// of the ask with its older offer, or again with the offer kept, is
// ignored and leaves the kept offer; a maker that refreshes faster than
// refreshRate is cut off.
func TestOfferRefresh(t *testing.T) {
	var cur atomic.Pointer[[]byte]
	maker := newNetPeer(t, peerOpts{noDHT: true, offerFor: func(*proto.Order) []byte { return *cur.Load() }})
	relay := newNetPeer(t, peerOpts{noDHT: true})
	replica := newNetPeer(t, peerOpts{noDHT: true})
	connect(t, relay, maker)
	connect(t, replica, relay)
	meshed(t, maker, relay)
	meshed(t, relay, replica)

	off1 := sealOfferSeq(t, maker.key, maker.h.ID(), 8, 1)
	maker.holdOffer(t, off1)
	cur.Store(&off1)
	env, ev := maker.sealOrder(t, proto.Side_SIDE_ASK, 4, 2_000_000, 1)
	maker.publish(t, env, ev, nil) // by digest (Publish attaches it)
	waitUntil(t, "the replica to hold the ask", func() bool { return replica.books.Holds(mkt, "USD", ev.Order.ID) })
	if k := replica.books.kept(ev.Order); k.seq != 1 {
		t.Fatalf("the replica keeps offer seq %d beside the ask, want 1", k.seq)
	}

	off2 := sealOfferSeq(t, maker.key, maker.h.ID(), 8, 2)
	maker.holdOffer(t, off2)
	cur.Store(&off2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	maker.books.Refresh(ctx, mkt)
	waitUntil(t, "the refresh to reach the replica", func() bool { return replica.books.kept(ev.Order).seq == 2 })
	for _, p := range []*netPeer{relay, replica} {
		if o := p.offers.Cached(maker.h.ID()); o == nil || o.Seq != 2 {
			t.Errorf("a replica caches offer %v, want seq 2", o)
		}
	}

	late := newNetPeer(t, peerOpts{noDHT: true, noJoin: true})
	connect(t, late, replica)
	waitUntil(t, "the replica's subscription", func() bool { return subscribed(late, replica.h.ID()) })
	if err := late.books.JoinMarket(ctx, mkt); err != nil {
		t.Fatal(err)
	}
	if o := late.offers.Cached(maker.h.ID()); !late.books.Holds(mkt, "USD", ev.Order.ID) || o == nil || o.Seq != 2 {
		t.Fatalf("the late node holds the ask: %v, with offer %v; want seq 2", late.books.Holds(mkt, "USD", ev.Order.ID), o)
	}

	// Replays: the ask with its first offer, and with the offer kept.
	for _, off := range [][]byte{off1, off2} {
		again := withOffer(t, env, off)
		if res := replica.books.checkRefresh(ctx, relay.h.ID(), again); res != pubsub.ValidationIgnore {
			t.Errorf("a replay with offer seq %d = %v, want ignored", again.Offer.Seq, res)
		}
	}
	if k := replica.books.kept(ev.Order); k.seq != 2 {
		t.Fatalf("after the replays the replica keeps seq %d, want 2", k.seq)
	}

	// The maker's own replica keeps the offer it refreshed with.
	if k := maker.books.kept(ev.Order); string(k.env) != string(off2) {
		t.Fatal("the maker's own replica does not keep its current offer")
	}

	// A maker refreshing faster than refreshRate is cut off past the
	// burst (the refreshes above spent some of it on the replica).
	for seq := uint64(3); seq < 3+refreshBurst+1; seq++ {
		again := withOffer(t, env, sealOfferSeq(t, maker.key, maker.h.ID(), 8, seq))
		replica.books.checkRefresh(ctx, relay.h.ID(), again)
	}
	if n := count(replica.rejects, "book", "refresh-rate-limited"); n == 0 {
		t.Error("a maker refreshing without pause was never limited")
	}
	if k := replica.books.kept(ev.Order); k.seq < 3 {
		t.Errorf("the replica keeps seq %d: the refreshes within the limit were not taken", k.seq)
	}
}

// TestRefreshReconciled: a replica that missed its provider's refresh
// gets the newer offer by reconciliation, since asks are named by the
// seq of the offer kept beside them; the replica that had it keeps it
// (the older one it is sent back is ignored), and both then list the
// same elements. Negative control: the refresh changes what the replica
// that took it lists.
func TestRefreshReconciled(t *testing.T) {
	a := newNetPeer(t, peerOpts{noDHT: true, reconcile: 200 * time.Millisecond})
	b := newNetPeer(t, peerOpts{noDHT: true, reconcile: 200 * time.Millisecond})
	connect(t, a, b)
	meshed(t, a, b)

	off1 := sealOfferSeq(t, a.key, a.h.ID(), 8, 1)
	env1, ev1 := a.sealOrder(t, proto.Side_SIDE_ASK, 4, 2_000_000, 1)
	env2, ev2 := a.sealOrder(t, proto.Side_SIDE_ASK, 4, 2_100_000, 2)
	a.publish(t, env1, ev1, off1)
	a.publish(t, env2, ev2, off1)
	waitUntil(t, "b to hold both asks", func() bool {
		return b.books.Holds(mkt, "USD", ev1.Order.ID) && b.books.Holds(mkt, "USD", ev2.Order.ID)
	})
	ids := func(p *netPeer) string { return string(bytes.Join(toSlices(p.books.reconcileSet(mkt).ids), nil)) }
	waitUntil(t, "the replicas to list the same elements", func() bool { return ids(a) == ids(b) })
	agreed := ids(a)

	// b gets the refresh of both asks outside gossip, as one that got the
	// provider's refresh while a was cut off.
	off2 := sealOfferSeq(t, a.key, a.h.ID(), 8, 2)
	for _, env := range [][]byte{env1, env2} {
		ev := withOffer(t, env, off2)
		b.offers.RememberSealed(ev.OfferProvider, ev.Offer, ev.OfferEnvelope) // as checkRelay does first
		// Accepted, or (the second) ignored if a reconciliation between
		// the two calls brought it up to the cached offer already.
		b.books.checkRefresh(context.Background(), "", ev)
	}
	if b.books.kept(ev1.Order).seq != 2 || b.books.kept(ev2.Order).seq != 2 {
		t.Fatal("the refresh did not take on b")
	}
	if ids(b) == agreed {
		t.Fatal("a replica that took a refresh lists the same elements as before it")
	}
	waitUntil(t, "reconciliation to bring a the newer offer", func() bool {
		return a.books.kept(ev1.Order).seq == 2 && a.books.kept(ev2.Order).seq == 2
	})
	waitUntil(t, "the replicas to list the same elements again", func() bool { return ids(a) == ids(b) })
	if b.books.kept(ev1.Order).seq != 2 || b.books.kept(ev2.Order).seq != 2 {
		t.Fatal("the replica that had the newer offer went back to the older")
	}
}

func toSlices(ids []elemID) [][]byte {
	out := make([][]byte, len(ids))
	for i := range ids {
		out[i] = ids[i][:]
	}
	return out
}

// withOffer is ask env as a replica decodes it with offer beside it.
func withOffer(t *testing.T, env, offer []byte) *p2p.BookEvent {
	t.Helper()
	msg, err := p2p.MarshalBook(&proto.BookMessage{Body: &proto.BookMessage_Order{Order: env}, Offer: offer})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := p2p.DecodeBook(msg, mkt, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ev
}
