package exchange

import (
	"context"
	"fmt"
	"testing"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// testStampBits is the stamp work these tests ask for: 256 hashes.
const testStampBits = 8

// stampOf grinds a stamp of testStampBits for the test maker name (as
// the admission reads a maker that is not a peer ID: its string's bytes).
func stampOf(t testing.TB, maker string) []byte {
	t.Helper()
	st, err := p2p.GrindStamp(context.Background(), peer.ID(maker), testStampBits)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// knowStamps has b hold a stamp for each of makers, as if it had learnt
// them from their messages (carry.go: anti-entropy carries only the
// elements of makers with one). The stamps prove no work: these tests'
// makers are names, and nothing here checks them again.
func knowStamps(b *Books, makers ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range makers {
		b.stamps[m] = make([]byte, p2p.StampSize)
	}
}

// weakStamp is a stamp of maker with less than testStampBits of work.
func weakStamp(t testing.TB, maker string) []byte {
	t.Helper()
	for {
		st, err := p2p.GrindStamp(context.Background(), peer.ID(maker), 0)
		if err != nil {
			t.Fatal(err)
		}
		if p2p.StampWork(peer.ID(maker), st) < testStampBits {
			return st
		}
	}
}

func stamped(ev *p2p.BookEvent, st []byte) *p2p.BookEvent { ev.MakerStamp = st; return ev }

// TestStampedLane: a flood of free keys spends the new-maker lane (the
// relaying peer's bucket, then the replica's), and an honest newcomer
// without a stamp is refused after it (the control: what the flood does
// without stamps); the same newcomer with a stamp gets in, early peek
// included. A stamp of another maker, or of too little work, buys
// nothing. The stamped lane has its own limits (stamped-peer-limited,
// stamped-limited) that spend none of the other's.
func TestStampedLane(t *testing.T) {
	ctx := context.Background()
	rejects := rejectsVec()
	b := New(Config{Now: (&clock{t: t0}).now, Rejects: rejects, Admission: AdmissionConfig{
		Rate: slow, Burst: 4, PeerRate: slow, PeerBurst: 2,
		StampedRate: slow, StampedBurst: 5, StampedPeerRate: slow, StampedPeerBurst: 3, StampBits: testStampBits}})
	order := func(st []byte) []byte {
		return mustMarshal(t, &proto.BookMessage{Body: &proto.BookMessage_Order{Order: []byte("sealed")}, MakerStamp: st})
	}
	admit := func(from, id, maker string, st []byte) pubsub.ValidationResult {
		return b.checkFrom(ctx, peer.ID(from), stamped(bid(id, maker), st))
	}
	// The flood: free keys through two relays, until both buckets of
	// the lane are spent.
	for i := range 20 {
		admit(fmt.Sprintf("relay-%d", i%2), fmt.Sprintf("f%02d", i), fmt.Sprintf("fresh-%02d", i), nil)
	}
	if got := count(rejects, "book", "new-maker-peer-limited") + count(rejects, "book", "new-maker-limited"); got != 16 {
		t.Fatalf("flood refused %v times, want 16 of 20 (burst 4)", got)
	}
	// Control: an honest newcomer without a stamp waits as long as the
	// flood lasts.
	if why := b.RefuseEarly(order(nil), "honest-0", "relay-0"); why == "" {
		t.Fatal("unstamped newcomer after the flood: not refused early")
	}
	if res := admit("relay-0", "h0", "honest-0", nil); res != pubsub.ValidationIgnore {
		t.Fatalf("unstamped newcomer after the flood: %v, want Ignore", res)
	}
	// Stamped: its own lane.
	st := stampOf(t, "honest-1")
	if why := b.RefuseEarly(order(st), "honest-1", "relay-0"); why != "" {
		t.Fatalf("stamped newcomer refused early: %s", why)
	}
	if res := admit("relay-0", "h1", "honest-1", st); res != pubsub.ValidationAccept {
		t.Fatalf("stamped newcomer after the flood: %v, want Accept", res)
	}
	// Stamps that buy nothing: another maker's, and one of less work.
	if res := admit("relay-0", "h2", "honest-2", st); res != pubsub.ValidationIgnore {
		t.Errorf("another maker's stamp: %v, want Ignore", res)
	}
	if res := admit("relay-0", "h3", "honest-3", weakStamp(t, "honest-3")); res != pubsub.ValidationIgnore {
		t.Errorf("a stamp of too little work: %v, want Ignore", res)
	}
	// The stamped lane's limits: relay-0 has 2 more (burst 3), the
	// replica 4 (burst 5).
	for i, want := range []pubsub.ValidationResult{pubsub.ValidationAccept, pubsub.ValidationAccept, pubsub.ValidationIgnore} {
		m := fmt.Sprintf("paid-a%d", i)
		if res := admit("relay-0", "pa"+m, m, stampOf(t, m)); res != want {
			t.Errorf("stamped maker %d through relay-0: %v, want %v", i, res, want)
		}
	}
	if got := count(rejects, "book", "stamped-peer-limited"); got != 1 {
		t.Errorf("stamped-peer-limited = %v, want 1", got)
	}
	for i, want := range []pubsub.ValidationResult{pubsub.ValidationAccept, pubsub.ValidationAccept, pubsub.ValidationIgnore} {
		m := fmt.Sprintf("paid-b%d", i)
		if i == 2 {
			if why := b.RefuseEarly(order(stampOf(t, m)), peer.ID(m), "relay-1"); why != "stamped-limited" {
				t.Errorf("replica's stamped lane spent: early %q, want stamped-limited", why)
			}
		}
		if res := admit("relay-1", "pb"+m, m, stampOf(t, m)); res != want {
			t.Errorf("stamped maker %d through relay-1: %v, want %v", i, res, want)
		}
	}
	if got := count(rejects, "book", "stamped-limited"); got != 1 {
		t.Errorf("stamped-limited = %v, want 1", got)
	}
}

// TestNewMakerOrderRate: a maker admitted but not yet established gets
// newMakerOrderBurst orders through, then is refused before any verify
// (new-maker-rate-limited) and counted rate-limited; a fill party gets
// the established rate. Control: with admission off the same maker gets
// orderBurst.
func TestNewMakerOrderRate(t *testing.T) {
	ctx := context.Background()
	order := mustMarshal(t, &proto.BookMessage{Body: &proto.BookMessage_Order{Order: []byte("sealed")}})
	passed := func(b *Books, maker string, n int) (k int) {
		for i := range n {
			if b.checkFrom(ctx, peer.ID(maker), bid(fmt.Sprintf("%s-%02d", maker, i), maker)) == pubsub.ValidationAccept {
				k++
			}
		}
		return k
	}
	rejects := rejectsVec()
	b := New(Config{Now: (&clock{t: t0}).now, Rejects: rejects})
	trade(b)
	newbie := peer.ID("newbie").String()
	if got := passed(b, newbie, 20); got != newMakerOrderBurst {
		t.Fatalf("a new maker got %d orders through, want %d", got, newMakerOrderBurst)
	}
	if why := b.RefuseEarly(order, peer.ID("newbie"), "relay"); why != "new-maker-rate-limited" {
		t.Errorf("new maker past its rate: early %q, want new-maker-rate-limited", why)
	}
	if got := passed(b, fillBuyer, orderBurst+5); got != orderBurst {
		t.Errorf("an established maker got %d orders through, want %d", got, orderBurst)
	}
	off := New(Config{Now: (&clock{t: t0}).now, Admission: AdmissionConfig{Off: true}})
	if got := passed(off, newbie, orderBurst+5); got != orderBurst {
		t.Errorf("admission off: %d orders through, want %d", got, orderBurst)
	}
}
