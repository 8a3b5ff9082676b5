package exchange

import (
	"context"
	"fmt"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// sybilBids signs n valid bids, each by a brand new key, as book
// messages with their authors' keys.
func sybilBids(t *testing.T, n int) (data [][]byte, keys []crypto.PrivKey, ids []string) {
	t.Helper()
	now := time.Now()
	for i := range n {
		k, pid := newKey(t)
		o := &proto.Order{
			Maker: []byte(pid), Side: proto.Side_SIDE_BID, Market: mkt, Currency: "USD", Quantity: 1, PriceMicros: 1000 + int64(i),
			LeaseType: proto.LeaseType_LEASE_TYPE_ON_DEMAND, DurationS: 3600,
			CreatedUnixMs: now.UnixMilli(), ExpiresUnixMs: now.Add(time.Hour).UnixMilli(), Nonce: uint64(i),
		}
		env, err := p2p.Seal(k, o, proto.MaxBookMessageSize)
		if err != nil {
			t.Fatal(err)
		}
		msg := mustMarshal(t, &proto.BookMessage{Body: &proto.BookMessage_Order{Order: env}})
		ev, err := p2p.DecodeBook(msg, mkt, now)
		if err != nil {
			t.Fatal(err)
		}
		data, keys, ids = append(data, msg), append(keys, k), append(ids, ev.Order.ID)
	}
	return data, keys, ids
}

// hostileFlood starts a hostile host, a raw gossipsub peer of the
// topic with no validator of its own, linked to replica a only, and
// publishes n valid bids to a, each from a fresh key, in batches that
// gossipsub's outbound queue per peer (32) holds (a message it drops
// would never reach a), waiting after each batch until a has admitted or
// refused all of it. held counts the flood's bids a replica holds.
func hostileFlood(t *testing.T, a *netPeer, n int) (held func(*netPeer) int) {
	t.Helper()
	h := newNetPeer(t, peerOpts{noJoin: true})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	top, err := h.books.cfg.PubSub.Join(p2p.BookTopic(mkt))
	if err != nil {
		t.Fatal(err)
	}
	connect(t, h, a)
	waitUntil(t, "the hostile host to see A in the topic", func() bool {
		for _, p := range top.ListPeers() {
			if p == a.h.ID() {
				return true
			}
		}
		return false
	})
	data, keys, ids := sybilBids(t, n)
	held = func(p *netPeer) (k int) {
		for _, id := range ids {
			if p.books.Holds(mkt, "USD", id) {
				k++
			}
		}
		return k
	}
	seenByA := func() int {
		return held(a) + int(count(a.rejects, "book", "new-maker-peer-limited")+count(a.rejects, "book", "new-maker-limited"))
	}
	for i := range data {
		pid, _ := peer.IDFromPrivateKey(keys[i])
		if err := top.Publish(ctx, data[i], pubsub.WithSecretKeyAndPeerId(keys[i], pid)); err != nil {
			t.Fatal(err)
		}
		if i%10 == 9 {
			waitUntil(t, "A to see the batch", func() bool { return seenByA() == i+1 })
		}
	}
	return held
}

// TestSybilFloodStopsAtFirstHop: a hostile host H, linked to replica A
// only, gossips 40 valid bids each signed by a fresh key (a Sybil). A
// admits no more of H's new makers than the relaying peer's budget (the
// rest ignored, counted new-maker-peer-limited) and keeps what it admits
// without relaying it (new-maker-not-relayed: unstamped), so B holds
// none of the flood. An honest new maker N, linked
// to A only, still gets its bid into B after the flood spent the budgets:
// A admits it as its neighbour's own order, and B, whose gossip budget
// for A is spent, gets it by reconciliation. Negative control: with
// admission off, B holds the whole flood.
func TestSybilFloodStopsAtFirstHop(t *testing.T) {
	const flood, peerBurst = 40, 3
	for _, off := range []bool{false, true} {
		t.Run(fmt.Sprintf("off=%v", off), func(t *testing.T) {
			adm := AdmissionConfig{Off: off, Rate: slow, Burst: 10, PeerRate: slow, PeerBurst: peerBurst}
			a := newNetPeer(t, peerOpts{admission: adm})
			b := newNetPeer(t, peerOpts{admission: adm, reconcile: 200 * time.Millisecond})
			n := newNetPeer(t, peerOpts{admission: adm})
			connect(t, a, b)
			connect(t, n, a)
			meshed(t, a, b)
			meshed(t, n, a)

			held := hostileFlood(t, a, flood)
			if off {
				waitUntil(t, "B to hold the whole flood", func() bool { return held(b) == flood })
				return
			}
			if got := count(a.rejects, "book", "new-maker-peer-limited"); got != flood-peerBurst {
				t.Errorf("A counted new-maker-peer-limited %v, want %d", got, flood-peerBurst)
			}
			env, ev := n.sealOrder(t, proto.Side_SIDE_BID, 1, 2_000, 77)
			n.publish(t, env, ev, nil)
			waitUntil(t, "B to hold the honest new maker's bid", func() bool { return b.books.Holds(mkt, "USD", ev.Order.ID) })
			if got := held(a); got != peerBurst {
				t.Errorf("A holds %d of the flood, want %d", got, peerBurst)
			}
			if got := held(b); got != 0 {
				t.Errorf("B holds %d of the flood, want none", got)
			}
			if got := count(a.rejects, "book", "new-maker-not-relayed"); got != peerBurst {
				t.Errorf("A counted new-maker-not-relayed %v, want %d", got, peerBurst)
			}
		})
	}
}

// TestStampedNewcomerDuringFlood: a hostile host H, linked to replica B
// only, floods 40 valid bids each from a fresh key; B admits 3 of them
// (its budget for H, and all its budget for unstamped new makers). An
// honest newcomer N, linked to A only, then publishes a bid, which A
// relays to B: with its stamp beside it, B admits it by gossip in the
// stamped lane the flood could not touch. Control: the same newcomer
// without a stamp is kept by A, its neighbour, and not relayed
// (new-maker-not-relayed), so B does not hold it (no reconciliation runs
// in this test).
func TestStampedNewcomerDuringFlood(t *testing.T) {
	const flood, peerBurst = 40, 3
	for _, withStamp := range []bool{true, false} {
		t.Run(fmt.Sprintf("stamped=%v", withStamp), func(t *testing.T) {
			adm := AdmissionConfig{Rate: slow, Burst: peerBurst, PeerRate: slow, PeerBurst: peerBurst,
				StampedRate: slow, StampedBurst: 10, StampedPeerRate: slow, StampedPeerBurst: peerBurst, StampBits: testStampBits}
			a := newNetPeer(t, peerOpts{admission: adm})
			b := newNetPeer(t, peerOpts{admission: adm})
			var stamp []byte
			n := newNetPeer(t, peerOpts{admission: adm, stamp: func() []byte { return stamp }})
			if withStamp {
				st, err := p2p.GrindStamp(context.Background(), n.h.ID(), testStampBits)
				if err != nil {
					t.Fatal(err)
				}
				stamp = st
			}
			connect(t, a, b)
			connect(t, n, a)
			meshed(t, a, b)
			// Not meshed(n, a): its probes would make N known to B. N
			// publishes to every peer of its topic (gossipsub's flood
			// publishing), so A in its topic is enough.
			waitUntil(t, "N to see A in the topic", func() bool {
				n.books.mu.Lock()
				top := n.books.topics[mkt]
				n.books.mu.Unlock()
				for _, p := range top.ListPeers() {
					if p == a.h.ID() {
						return true
					}
				}
				return false
			})

			held := hostileFlood(t, b, flood)
			// B's budget for unstamped new makers is spent on the flood.
			waitUntil(t, "B to hold what it admitted of the flood", func() bool { return held(b) == peerBurst })
			refused := count(b.rejects, "book", "new-maker-peer-limited") + count(b.rejects, "book", "new-maker-limited")

			env, ev := n.sealOrder(t, proto.Side_SIDE_BID, 1, 2_000, 77)
			n.publish(t, env, ev, nil)
			if withStamp {
				waitUntil(t, "B to hold the stamped newcomer's bid", func() bool { return b.books.Holds(mkt, "USD", ev.Order.ID) })
				if got := count(b.rejects, "book", "new-maker-peer-limited") + count(b.rejects, "book", "new-maker-limited"); got != refused {
					t.Errorf("B refused %v new makers, want the flood's %v only", got, refused)
				}
				return
			}
			waitUntil(t, "A to keep the unstamped newcomer's bid without relaying it", func() bool {
				return count(a.rejects, "book", "new-maker-not-relayed") == 1
			})
			if b.books.Holds(mkt, "USD", ev.Order.ID) {
				t.Error("B holds the unstamped newcomer's bid A did not relay")
			}
			if !a.books.Holds(mkt, "USD", ev.Order.ID) {
				t.Error("A, the newcomer's neighbour, does not hold its bid")
			}
		})
	}
}
