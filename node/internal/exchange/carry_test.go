package exchange

import (
	"context"
	"crypto/rand"
	"slices"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// newKey is a fresh identity: what a Sybil makes for free.
func newKey(t *testing.T) (crypto.PrivKey, peer.ID) {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return k, id
}

// sealCancelBy signs k's cancel of order id as an event, as gossip would
// deliver it.
func sealCancelBy(t *testing.T, k crypto.PrivKey, id string) *p2p.BookEvent {
	t.Helper()
	maker, _ := peer.IDFromPrivateKey(k)
	c := &proto.Cancel{Maker: []byte(maker), OrderId: id, Market: mkt, CreatedUnixMs: time.Now().UnixMilli()}
	env, err := p2p.Seal(k, c, proto.MaxBookMessageSize)
	if err != nil {
		t.Fatal(err)
	}
	return &p2p.BookEvent{Kind: p2p.KindCancel, Cancel: c, Envelope: env}
}

// sortedIDs is the IDs of a replica's snapshot of the market.
func sortedIDs(p *netPeer) []elemID {
	set, _ := p.books.elements(mkt, false)
	return set.sorted().ids
}

// TestFreeKeysNotCarried: a replica that admitted, by gossip, the orders
// and a cancel of a free key (no stamp) and of a stamped key hands on by
// reconciliation the stamped key's only, each with its stamp; afterwards
// the two replicas' snapshots and digests agree (reconciliation is
// settled) although only one holds the free key's. A reconciliation
// answer's element without a stamp, or with one of too little work, is
// refused before it is verified (counted as unstamped); with the stamp it
// is taken (negative control). With admission off the free key's orders
// travel too (negative control).
func TestFreeKeysNotCarried(t *testing.T) {
	ctx := context.Background()
	freeKey, _ := newKey(t)
	paidKey, paid := newKey(t)
	paidStamp, err := p2p.GrindStamp(ctx, paid, testStampBits)
	if err != nil {
		t.Fatal(err)
	}
	_, relay := newKey(t) // the neighbour that relayed the gossip
	for _, off := range []bool{false, true} {
		a := newNetPeer(t, peerOpts{admission: AdmissionConfig{Off: off}})
		b := newNetPeer(t, peerOpts{admission: AdmissionConfig{Off: off}})
		var free, freeGone, kept, keptGone *p2p.BookEvent
		var freeEnv []byte
		freeEnv, free = sealOrderBy(t, freeKey, proto.Side_SIDE_BID, 1, 1_000_000, 1)
		_, freeGone = sealOrderBy(t, freeKey, proto.Side_SIDE_BID, 1, 1_000_000, 2)
		_, kept = sealOrderBy(t, paidKey, proto.Side_SIDE_BID, 1, 1_100_000, 3)
		_, keptGone = sealOrderBy(t, paidKey, proto.Side_SIDE_BID, 1, 1_100_000, 4)
		kept.MakerStamp, keptGone.MakerStamp = paidStamp, paidStamp
		for _, ev := range []*p2p.BookEvent{free, freeGone, kept, keptGone,
			sealCancelBy(t, freeKey, freeGone.Order.ID), sealCancelBy(t, paidKey, keptGone.Order.ID)} {
			if res := a.books.checkFrom(ctx, relay, ev); res != pubsub.ValidationAccept {
				t.Fatalf("off=%v: gossip of a %v refused: %v", off, ev.Kind, res)
			}
			a.books.Apply(mkt, ev)
		}
		if !a.books.Holds(mkt, "USD", free.Order.ID) || !a.books.Holds(mkt, "USD", kept.Order.ID) {
			t.Fatalf("off=%v: the first hop does not hold what it admitted", off)
		}
		connect(t, b, a)
		st, err := b.books.ReconcileWith(ctx, mkt, a.h.ID())
		if err != nil {
			t.Fatal(err)
		}
		if !b.books.Holds(mkt, "USD", kept.Order.ID) {
			t.Fatalf("off=%v: the stamped maker's order did not travel (%+v)", off, st)
		}
		if got := b.books.Holds(mkt, "USD", free.Order.ID); got != off {
			t.Fatalf("off=%v: the free key's order held by the peer: %v", off, got)
		}
		b.books.mu.Lock()
		_, keptCancel := b.books.tombsOf(mkt).cancels[cancelKey{paid.String(), keptGone.Order.ID}]
		freeCancels := 0
		for k := range b.books.tombsOf(mkt).cancels {
			if k.maker != paid.String() {
				freeCancels++
			}
		}
		b.books.mu.Unlock()
		if !keptCancel || (freeCancels > 0) != off {
			t.Fatalf("off=%v: the peer holds the stamped maker's cancel: %v, the free key's: %d", off, keptCancel, freeCancels)
		}
		if !slices.Equal(sortedIDs(a), sortedIDs(b)) || digest(a) != digest(b) {
			t.Fatalf("off=%v: the snapshots or the digests differ after a reconciliation", off)
		}
		if st, err := b.books.ReconcileWith(ctx, mkt, a.h.ID()); err != nil || st.Sent+st.Received != 0 || st.Rounds != 1 {
			t.Fatalf("off=%v: a second reconciliation: %+v, %v; want one round, nothing carried", off, st, err)
		}
		if off {
			continue
		}
		// Each element a's snapshot lists travels with its stamp.
		for _, m := range a.books.SyncAnswer(mkt) {
			if !slices.Equal(m.MakerStamp, paidStamp) {
				t.Fatalf("a listed element travels with stamp %x, want the maker's %x", m.MakerStamp, paidStamp)
			}
		}

		// A peer that offers the free key's order anyway.
		msg := func(stamp []byte) [][]byte {
			return [][]byte{mustMarshal(t, &proto.BookMessage{Body: &proto.BookMessage_Order{Order: freeEnv}, MakerStamp: stamp})}
		}
		freeID, _ := peer.IDFromPrivateKey(freeKey)
		weak := make([]byte, p2p.StampSize)
		for p2p.StampWork(freeID, weak) >= testStampBits {
			weak[0]++
		}
		for i, st := range [][]byte{nil, weak} {
			b.books.applyData(ctx, mkt, "reconcile", msg(st))
			if got := count(b.rejects, "reconcile", "unstamped"); got != float64(i+1) || b.books.Holds(mkt, "USD", free.Order.ID) {
				t.Fatalf("unstamped offer %d: held %v, rejects{reconcile,unstamped} = %v", i, b.books.Holds(mkt, "USD", free.Order.ID), got)
			}
		}
		freeStamp, err := p2p.GrindStamp(ctx, freeID, testStampBits)
		if err != nil {
			t.Fatal(err)
		}
		if b.books.applyData(ctx, mkt, "reconcile", msg(freeStamp)); !b.books.Holds(mkt, "USD", free.Order.ID) {
			t.Fatal("the order with its maker's stamp was not taken")
		}
	}
}

// FuzzRefuseUnstamped feeds refuseUnstamped any bytes. It must not panic,
// and it may refuse only a message whose envelopes name their signers
// (p2p.StampSigners), none of them with a stamp beside it or held;
// with admission off it refuses nothing.
func FuzzRefuseUnstamped(f *testing.F) {
	k1, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	k2, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	id1, _ := peer.IDFromPrivateKey(k1)
	st, err := p2p.GrindStamp(context.Background(), id1, testStampBits)
	if err != nil {
		f.Fatal(err)
	}
	order, err := p2p.Seal(k1, &proto.Order{Market: mkt}, proto.MaxBookMessageSize)
	if err != nil {
		f.Fatal(err)
	}
	for _, m := range []*proto.BookMessage{
		{Body: &proto.BookMessage_Order{Order: order}},
		{Body: &proto.BookMessage_Order{Order: order}, MakerStamp: st},
		{Body: &proto.BookMessage_Cancel{Cancel: order}, MakerStamp: st},
		{Body: &proto.BookMessage_Order{Order: []byte("sealed")}},
	} {
		data, err := p2p.MarshalBook(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add(fillMsg(f, k1, k2))
	f.Add([]byte{})
	b := New(Config{Admission: AdmissionConfig{StampBits: testStampBits}})
	off := New(Config{Admission: AdmissionConfig{Off: true}})
	f.Fuzz(func(t *testing.T, data []byte) {
		if why := off.refuseUnstamped(data); why != "" {
			t.Fatalf("admission off refused %x: %s", data, why)
		}
		why := b.refuseUnstamped(data)
		if why == "" {
			return
		}
		var m proto.BookMessage
		if err := gproto.Unmarshal(data, &m); err != nil {
			t.Fatalf("refused %x (%s), which does not decode", data, why)
		}
		signers := p2p.StampSigners(&m)
		if len(signers) == 0 {
			t.Fatalf("refused %x (%s), which names no signer", data, why)
		}
		for _, id := range signers {
			if p2p.VerifyStamp(id, m.MakerStamp, testStampBits) {
				t.Fatalf("refused %x (%s) with a stamp of %s beside it", data, why, id)
			}
		}
	})
}
