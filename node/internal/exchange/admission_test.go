package exchange

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"
	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// slow is a refill rate no test outlives: the buckets give their burst
// and then nothing, so what a test sees does not depend on its speed.
const slow rate.Limit = 1e-9

// Parties to trade's fill.
const (
	fillBuyer    = "buyer-x"
	fillProvider = "provider-x"
)

// trade rests an ask of fillProvider in b and fills part of it for
// fillBuyer.
func trade(b *Books) {
	b.Apply(mkt, orderEvent(ask("ask-x", fillProvider, 3, 2_000_000)))
	f := market.Fill{ID: "fill-x", Market: mkt, Currency: "USD", BidID: "bid-x", AskID: "ask-x", Buyer: fillBuyer, Provider: fillProvider,
		Quantity: 1, Price: 2_000_000, LeaseType: market.Spot, Time: t0}
	b.ApplyFill(&p2p.BookEvent{Kind: p2p.KindFill, Fill: &f, Lease: &proto.Lease{Id: "lease-x"}, Raw: &proto.Fill{}})
}

// TestNewMakerAdmission: gossiped orders of makers a replica does not
// know are admitted up to the relaying peer's budget (then
// new-maker-peer-limited) and the replica's (then new-maker-limited),
// ignored past them, never rejected; makers already known (an order
// resting, a fill party, admitted before), a neighbour publishing its own
// order and sync answers are not held to the gossip budgets. With
// admission off the same flood is admitted (negative control).
func TestNewMakerAdmission(t *testing.T) {
	ctx := context.Background()
	flood := func(b *Books, from peer.ID, prefix string, n int) (admitted int) {
		for i := range n {
			id := fmt.Sprintf("%s-%03d", prefix, i)
			if b.checkFrom(ctx, from, bid(id, "fresh-"+id)) == pubsub.ValidationAccept {
				admitted++
			}
		}
		return admitted
	}
	rejects := rejectsVec()
	b := New(Config{Now: (&clock{t: t0}).now, Rejects: rejects, Admission: AdmissionConfig{
		Rate: slow, Burst: 5, PeerRate: slow, PeerBurst: 3, SyncRate: slow, SyncBurst: 4}})
	b.Apply(mkt, bid("resting", "known-maker"))
	trade(b)

	if got := flood(b, "relay-1", "a", 50); got != 3 {
		t.Fatalf("one relaying peer's fresh makers admitted: %d, want its burst 3", got)
	}
	if got := count(rejects, "book", "new-maker-peer-limited"); got != 47 {
		t.Errorf("new-maker-peer-limited = %v, want 47", got)
	}
	if got := flood(b, "relay-2", "b", 50); got != 2 {
		t.Fatalf("another peer's fresh makers admitted: %d, want the replica's 2 left", got)
	}
	if got := count(rejects, "book", "new-maker-limited"); got != 48 {
		t.Errorf("new-maker-limited = %v, want 48", got)
	}
	// Budgets spent: known makers still get in, whoever relays them.
	for _, maker := range []string{"known-maker", "fresh-a-000", fillBuyer, fillProvider} {
		if res := b.checkFrom(ctx, "relay-1", bid("more-"+maker, maker)); res != pubsub.ValidationAccept {
			t.Errorf("known maker %s: %v, want Accept", maker, res)
		}
	}
	// A neighbour's own order: its first hop admits it.
	if res := b.checkFrom(ctx, "neighbour", bid("own", peer.ID("neighbour").String())); res != pubsub.ValidationAccept {
		t.Errorf("a neighbour's own order: %v, want Accept", res)
	}
	// Sync and reconciliation have their own bucket.
	if got := flood(b, "", "s", 10); got != 4 {
		t.Errorf("fresh makers from sync answers: %d, want 4", got)
	}

	off := New(Config{Now: (&clock{t: t0}).now, Admission: AdmissionConfig{Off: true,
		Rate: slow, Burst: 5, PeerRate: slow, PeerBurst: 3}})
	if got := flood(off, "relay-1", "a", 50); got != 50 {
		t.Fatalf("admission off: %d of 50 fresh makers admitted, want all", got)
	}

	// An unstamped maker's order is kept, not relayed, whether admitted
	// in the free lane or known (a resting order); a stamped maker's and
	// an established one's (a fill party's) are relayed.
	c := New(Config{Now: (&clock{t: t0}).now, Admission: AdmissionConfig{StampBits: testStampBits}})
	c.Apply(mkt, bid("resting", "known-maker"))
	trade(c)
	stampedBid := bid("stamped", "stamped-maker")
	stampedBid.MakerStamp = stampOf(t, "stamped-maker")
	for _, tc := range []struct {
		ev    *p2p.BookEvent
		local bool
	}{{bid("free", "free-maker"), true}, {stampedBid, false}, {bid("more", "known-maker"), true}, {bid("more-b", fillBuyer), false}} {
		if res, local := c.checkRelay(ctx, "relay", tc.ev); res != pubsub.ValidationAccept || local != tc.local {
			t.Errorf("%s's order: %v, kept local %v; want Accept, %v", tc.ev.Order.Maker, res, local, tc.local)
		}
	}
	if res, local := off.checkRelay(ctx, "relay", bid("free-off", "free-maker-2")); res != pubsub.ValidationAccept || local {
		t.Errorf("admission off: a fresh maker's order %v, kept local %v; want relayed", res, local)
	}
}

// TestNewMakerCap: a maker not yet established rests MaxOrdersNewMaker
// orders in a replica (then maker-full), and once a party to a fill up to
// MaxOrdersPerMaker (past the cap a replica keeps the smallest IDs, as
// TestMakerCap checks); with admission off the low cap is off too (negative
// control).
func TestNewMakerCap(t *testing.T) {
	ctx := context.Background()
	fill := func(b *Books, maker, prefix string) (held int) {
		for i := range MaxOrdersPerMaker + 10 {
			if b.apply(mkt, bid(fmt.Sprintf("%s%03d", prefix, i), maker)) {
				held++
			}
		}
		return held
	}
	rejects := rejectsVec()
	b := New(Config{Now: (&clock{t: t0}).now, Rejects: rejects})
	if got := fill(b, "newbie", "n"); got != MaxOrdersNewMaker {
		t.Fatalf("a new maker rests %d orders, want %d", got, MaxOrdersNewMaker)
	}
	if res := b.check(ctx, bid("n999", "newbie")); res != pubsub.ValidationIgnore || count(rejects, "book", "maker-full") != 1 {
		t.Errorf("a new maker's order past its cap: %v (maker-full %v), want Ignore, counted", res, count(rejects, "book", "maker-full"))
	}
	trade(b)
	if got := fill(b, fillBuyer, "e"); got != MaxOrdersPerMaker {
		t.Fatalf("an established maker rests %d orders, want %d", got, MaxOrdersPerMaker)
	}
	off := New(Config{Now: (&clock{t: t0}).now, Admission: AdmissionConfig{Off: true}})
	if got := fill(off, "newbie", "n"); got != MaxOrdersPerMaker {
		t.Fatalf("admission off: a new maker rests %d orders, want %d", got, MaxOrdersPerMaker)
	}
}

// TestFillAdmission: a gossiped fill between two makers a replica does
// not know spends a new-maker token like an order (two fresh keys can
// sign one as cheaply), and is ignored past the budget, counted; a fill
// with a known party, or relayed by its party, is admitted with the
// budget spent, and a stamped party has the stamped lane; with admission
// off every fill is admitted (negative control).
func TestFillAdmission(t *testing.T) {
	ctx := context.Background()
	fillOf := func(buyer, provider string) *p2p.BookEvent {
		return &p2p.BookEvent{Kind: p2p.KindFill, Fill: &market.Fill{ID: "f-" + buyer + provider, Market: mkt, Currency: "USD",
			BidID: "bid-" + buyer, AskID: "ask-" + provider, Buyer: buyer, Provider: provider, Quantity: 1, Price: 2_000_000,
			LeaseType: market.Spot, Time: t0}}
	}
	flood := func(b *Books) (admitted int) {
		for i := range 10 {
			if b.checkFrom(ctx, "relay", fillOf(fmt.Sprint("sybil-b-", i), fmt.Sprint("sybil-p-", i))) == pubsub.ValidationAccept {
				admitted++
			}
		}
		return admitted
	}
	rejects := rejectsVec()
	b := New(Config{Now: (&clock{t: t0}).now, Rejects: rejects, Admission: AdmissionConfig{Rate: slow, Burst: 3, PeerRate: slow, PeerBurst: 10,
		StampedRate: slow, StampedBurst: 1, StampedPeerRate: slow, StampedPeerBurst: 1, StampBits: testStampBits}})
	b.Apply(mkt, bid("rest", "resting-maker"))
	if got := flood(b); got != 3 {
		t.Fatalf("fills of fresh parties admitted: %d, want the budget's 3", got)
	}
	if got := count(rejects, "fill", "new-maker-limited"); got != 7 {
		t.Errorf("rejects{fill,new-maker-limited} = %v, want 7", got)
	}
	if res := b.checkFrom(ctx, "relay", fillOf("fresh-buyer", "resting-maker")); res != pubsub.ValidationAccept {
		t.Errorf("a fill with a known party: %v, want Accept", res)
	}
	if res := b.checkFrom(ctx, "neighbour", fillOf(peer.ID("neighbour").String(), "fresh-provider")); res != pubsub.ValidationAccept {
		t.Errorf("a fill relayed by its party: %v, want Accept", res)
	}
	ev := fillOf("fresh-buyer-2", "stamped-provider")
	ev.MakerStamp = stampOf(t, "stamped-provider")
	if res := b.checkFrom(ctx, "relay", ev); res != pubsub.ValidationAccept {
		t.Errorf("a fill with a stamped party: %v, want Accept", res)
	}
	ev = fillOf("fresh-buyer-3", "stamped-provider-2")
	ev.MakerStamp = stampOf(t, "stamped-provider-2")
	if res := b.checkFrom(ctx, "relay", ev); res != pubsub.ValidationIgnore || count(rejects, "fill", "stamped-limited") != 1 {
		t.Errorf("past the stamped lane's burst: %v, stamped-limited %v; want Ignore, 1", res, count(rejects, "fill", "stamped-limited"))
	}
	off := New(Config{Now: (&clock{t: t0}).now, Admission: AdmissionConfig{Off: true, Rate: slow, Burst: 3, PeerRate: slow, PeerBurst: 10}})
	if got := flood(off); got != 10 {
		t.Fatalf("admission off: %d of 10 fills admitted, want all", got)
	}
}

// fillMsg is a gossiped fill whose take k1 signed and whose accept k2
// did: enough for RefuseEarly, which reads the parties unverified.
func fillMsg(t testing.TB, k1, k2 crypto.PrivKey) []byte {
	t.Helper()
	take, err := p2p.Seal(k1, &proto.Take{Market: mkt}, proto.MaxBookMessageSize)
	if err != nil {
		t.Fatal(err)
	}
	accept, err := p2p.Seal(k2, &proto.Accept{TakeId: "x"}, proto.MaxBookMessageSize)
	if err != nil {
		t.Fatal(err)
	}
	data, err := gproto.Marshal(&proto.BookMessage{Body: &proto.BookMessage_Fill{Fill: &proto.Fill{Take: take, Accept: accept}}})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestRefuseEarly: once a budget is spent, a gossiped order of an
// unknown maker, or a fill of two, is refused before its signature is
// checked; a cancel is left to the full validation, a known maker's
// order and a fill with a known party are not refused, and nothing is
// refused while the budgets have tokens (negative control).
func TestRefuseEarly(t *testing.T) {
	order, err := gproto.Marshal(&proto.BookMessage{Body: &proto.BookMessage_Order{Order: []byte("sealed")}})
	if err != nil {
		t.Fatal(err)
	}
	cancel, err := gproto.Marshal(&proto.BookMessage{Body: &proto.BookMessage_Cancel{Cancel: []byte("sealed")}})
	if err != nil {
		t.Fatal(err)
	}
	b := New(Config{Now: (&clock{t: t0}).now, Admission: AdmissionConfig{Rate: slow, Burst: 2, PeerRate: slow, PeerBurst: 1}})
	if why := b.RefuseEarly(order, "sybil-0", "relay-1"); why != "" {
		t.Fatalf("with tokens left: refused early (%s)", why)
	}
	if b.checkFrom(context.Background(), "relay-1", bid("x0", peer.ID("sybil-0").String())) != pubsub.ValidationAccept {
		t.Fatal("first new maker of relay-1 not admitted")
	}
	if why := b.RefuseEarly(order, "sybil-1", "relay-1"); why != "new-maker-peer-limited" {
		t.Errorf("relay-1's budget spent: %q, want new-maker-peer-limited", why)
	}
	if why := b.RefuseEarly(order, "sybil-1", "relay-2"); why != "" {
		t.Errorf("another relay with tokens: refused early (%s)", why)
	}
	b.checkFrom(context.Background(), "relay-2", bid("x1", peer.ID("sybil-1").String()))
	if why := b.RefuseEarly(order, "sybil-2", "relay-3"); why != "new-maker-limited" {
		t.Errorf("replica's budget spent: %q, want new-maker-limited", why)
	}
	if why := b.RefuseEarly(cancel, "sybil-2", "relay-3"); why != "" {
		t.Errorf("a cancel refused early (%s)", why)
	}
	if why := b.RefuseEarly(order, "sybil-0", "relay-3"); why != "" {
		t.Errorf("an admitted maker refused early (%s)", why)
	}
	k1, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	k2, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	id1, _ := peer.IDFromPrivateKey(k1)
	id2, _ := peer.IDFromPrivateKey(k2)
	fill := fillMsg(t, k1, k2)
	if why := b.RefuseEarly(fill, id1, "relay-3"); why != "new-maker-limited" {
		t.Errorf("a fill of two unknown parties: %q, want new-maker-limited", why)
	}
	b.Apply(mkt, bid("resting", id2.String()))
	if why := b.RefuseEarly(fill, id1, "relay-3"); why != "" {
		t.Errorf("a fill whose accepting party rests an order: refused early (%s)", why)
	}
}

// FuzzRefuseEarly feeds RefuseEarly any bytes, author and relay once the
// replica's new-maker budget is spent. It must not panic or spend a
// token, and it may refuse only what decodes as an order or a fill of a
// maker the replica does not know, relayed by someone other than that maker, with
// the replica's reason; everything else is left to the full validation
// (DecodeBook says why the rest is bad).
func FuzzRefuseEarly(f *testing.F) {
	order, err := gproto.Marshal(&proto.BookMessage{Body: &proto.BookMessage_Order{Order: []byte("sealed")}})
	if err != nil {
		f.Fatal(err)
	}
	cancel, err := gproto.Marshal(&proto.BookMessage{Body: &proto.BookMessage_Cancel{Cancel: []byte("sealed")}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(order, "sybil", "relay")
	f.Add(order, "first", "relay")
	f.Add(order, "self-relayed", "self-relayed")
	f.Add(cancel, "sybil", "relay")
	k1, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	k2, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	f.Add(fillMsg(f, k1, k2), "sybil", "relay")
	f.Add([]byte{}, "", "")
	f.Add(order[:len(order)-2], "sybil", "relay") // truncated
	f.Add([]byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f}, "sybil", "relay")
	f.Fuzz(func(t *testing.T, data []byte, author, from string) {
		b := New(Config{Now: (&clock{t: t0}).now, Admission: AdmissionConfig{Rate: slow, Burst: 1, PeerRate: slow, PeerBurst: 1}})
		if b.checkFrom(context.Background(), "relay-0", bid("x0", peer.ID("first").String())) != pubsub.ValidationAccept {
			t.Fatal("the first new maker was not admitted")
		}
		before := b.adm.all.Tokens()
		why := b.RefuseEarly(data, peer.ID(author), peer.ID(from))
		if after := b.adm.all.Tokens(); after < before-1e-6 {
			t.Fatalf("RefuseEarly spent a token: %v -> %v", before, after)
		}
		var msg proto.BookMessage
		isOrder := false
		if gproto.Unmarshal(data, &msg) == nil {
			switch msg.Body.(type) {
			case *proto.BookMessage_Order, *proto.BookMessage_Fill:
				isOrder = true // a fill: its parties are unknown too
			}
		}
		want := "new-maker-limited"
		if !isOrder || author == "first" || (from != "" && from == author) {
			want = ""
		}
		if why != want {
			t.Fatalf("RefuseEarly(%x, %q, %q) = %q, want %q", data, author, from, why, want)
		}
	})
}
