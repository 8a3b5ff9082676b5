package exchange

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// count reads one counter of a rejects vector.
func count(c *prometheus.CounterVec, kind, reason string) float64 {
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["kind"] == kind && labels["reason"] == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func rejectsVec() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rejects"}, []string{"kind", "reason"})
}

// TestRestingCapEvicts: a replica at its cap keeps what it holds against
// an order that ranks behind all of it (refused, counted book-full), lets
// in one that ranks ahead in place of the last in priority (counted
// evicted), and never holds more than the cap, nor answers a sync with
// more. Negative control: under the cap every order rests.
func TestRestingCapEvicts(t *testing.T) {
	const cap = 3
	rejects := rejectsVec()
	b := New(Config{Now: (&clock{t: t0}).now, MaxResting: cap, Rejects: rejects})
	for i, price := range []int64{2_000_000, 2_100_000, 2_200_000} {
		b.Apply(mkt, orderEvent(ask(fmt.Sprint("a", i), fmt.Sprint("fresh-key-", i), 1, price)))
	}
	knowStamps(b, "fresh-key-0", "fresh-key-1", "fresh-key-2", "fresh-key-8", "fresh-key-9")
	for i := range cap {
		if !b.Holds(mkt, "USD", fmt.Sprint("a", i)) {
			t.Fatalf("a%d under the cap is not held", i)
		}
	}
	// Worse than everything held: refused.
	b.Apply(mkt, orderEvent(ask("worse", "fresh-key-9", 1, 2_300_000)))
	if b.Holds(mkt, "USD", "worse") {
		t.Error("a full replica took an ask worse than all it holds")
	}
	if got := count(rejects, "book", "book-full"); got != 1 {
		t.Errorf("rejects{book-full} = %v, want 1", got)
	}
	// Better: in, in place of the worst (a2, 2.20).
	b.Apply(mkt, orderEvent(ask("better", "fresh-key-8", 1, 1_900_000)))
	if !b.Holds(mkt, "USD", "better") || b.Holds(mkt, "USD", "a2") || !b.Holds(mkt, "USD", "a0") || !b.Holds(mkt, "USD", "a1") {
		t.Error("a better ask did not replace the worst one")
	}
	if got := count(rejects, "book", "evicted"); got != 1 {
		t.Errorf("rejects{evicted} = %v, want 1", got)
	}
	// The evicted order does not come back by replay.
	b.Apply(mkt, orderEvent(ask("a2", "fresh-key-2", 1, 2_200_000)))
	if b.Holds(mkt, "USD", "a2") {
		t.Error("an evicted order came back")
	}
	b.With(mkt, "USD", func(s *Replica) {
		if s.Book.Len() != cap {
			t.Errorf("replica holds %d orders, cap %d", s.Book.Len(), cap)
		}
	})
	if got := len(b.SyncAnswer(mkt)); got != cap {
		t.Errorf("sync answer has %d orders, cap %d", got, cap)
	}
}

// TestAuthoredBy: an order or cancel may be published only by its maker, a
// fill only by one of its parties.
func TestAuthoredBy(t *testing.T) {
	ids := make([]peer.ID, 3)
	for i := range ids {
		k, _, err := crypto.GenerateEd25519Key(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		ids[i], _ = peer.IDFromPrivateKey(k)
	}
	maker, party, other := ids[0], ids[1], ids[2]
	order := &p2p.BookEvent{Kind: p2p.KindOrder, Order: ask("o", maker.String(), 1, 1)}
	cancel := &p2p.BookEvent{Kind: p2p.KindCancel, Cancel: &proto.Cancel{Maker: []byte(maker)}}
	fill := &p2p.BookEvent{Kind: p2p.KindFill, Fill: &market.Fill{Buyer: party.String(), Provider: maker.String()}}
	for _, c := range []struct {
		name   string
		ev     *p2p.BookEvent
		author peer.ID
		want   bool
	}{
		{"order by its maker", order, maker, true},
		{"order by another", order, other, false},
		{"cancel by its maker", cancel, maker, true},
		{"cancel by another", cancel, party, false},
		{"fill by its provider", fill, maker, true},
		{"fill by its buyer", fill, party, true},
		{"fill by a third", fill, other, false},
		{"no author", order, "", false},
	} {
		if got := AuthoredBy(c.ev, c.author); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestAnswerSyncRateLimited: one peer gets syncAnswerBurst answers at once
// and then is refused, counted; another peer is still answered.
func TestAnswerSyncRateLimited(t *testing.T) {
	rejects := rejectsVec()
	b := New(Config{Now: (&clock{t: t0}).now, Rejects: rejects})
	b.Apply(mkt, orderEvent(ask("a1", "maker-a", 1, 2_000_000)))
	knowStamps(b, "maker-a")
	for i := range syncAnswerBurst {
		if msgs, err := b.AnswerSync("greedy", mkt); err != nil || len(msgs) != 1 {
			t.Fatalf("answer %d: %d messages, %v", i, len(msgs), err)
		}
	}
	if _, err := b.AnswerSync("greedy", mkt); !errors.Is(err, errSyncRate) {
		t.Fatalf("answer past the burst: %v, want errSyncRate", err)
	}
	if got := count(rejects, "sync-request", "rate-limited"); got != 1 {
		t.Errorf("rejects{sync-request,rate-limited} = %v, want 1", got)
	}
	if msgs, err := b.AnswerSync("polite", mkt); err != nil || len(msgs) != 1 {
		t.Fatalf("another peer: %d messages, %v", len(msgs), err)
	}
}

// TestMakerCap: a maker resting MaxOrdersPerMaker orders in a replica
// gets no more through validation (maker-full, not relayed) unless the
// new order's ID is smaller than one it holds, which then replaces the
// largest (every replica keeps the same orders of such a maker, whatever
// order they came in); another maker still gets in (negative control),
// and the first gets room again once one of its orders leaves the book.
func TestMakerCap(t *testing.T) {
	rejects := rejectsVec()
	b := New(Config{Now: (&clock{t: t0}).now, Rejects: rejects})
	// An established maker (a party to a fill): the full cap. A new one's
	// is TestNewMakerCap's.
	b.adm.remember("flooder", true)
	for i := range MaxOrdersPerMaker {
		b.Apply(mkt, bid(fmt.Sprintf("f%03d", i), "flooder"))
	}
	for i := range MaxOrdersPerMaker {
		if !b.Holds(mkt, "USD", fmt.Sprintf("f%03d", i)) {
			t.Fatalf("order %d under the cap is not held", i)
		}
	}
	if res := b.check(context.Background(), bid("fz-over", "flooder")); res != pubsub.ValidationIgnore {
		t.Fatalf("an order past the maker's cap: %v, want Ignore", res)
	}
	if n := count(rejects, "book", "maker-full"); n != 1 {
		t.Fatalf("maker-full counted %v, want 1", n)
	}
	small := bid("f-small", "flooder")
	if res := b.check(context.Background(), small); res != pubsub.ValidationAccept {
		t.Fatalf("an order of a smaller ID past the cap: %v, want Accept", res)
	}
	b.Apply(mkt, small)
	last := fmt.Sprintf("f%03d", MaxOrdersPerMaker-1)
	if !b.Holds(mkt, "USD", "f-small") || b.Holds(mkt, "USD", last) || count(rejects, "book", "maker-evicted") != 1 {
		t.Fatalf("the smaller ID should replace the largest %s", last)
	}
	if res := b.check(context.Background(), bid("other", "honest")); res != pubsub.ValidationAccept {
		t.Fatalf("another maker's order: %v, want Accept", res)
	}
	b.With(mkt, "USD", func(s *Replica) {
		if err := s.Cancel("f000", "flooder"); err != nil {
			t.Fatal(err)
		}
	})
	if res := b.check(context.Background(), bid("fz-room", "flooder")); res != pubsub.ValidationAccept {
		t.Fatalf("after a cancel the maker has room: %v, want Accept", res)
	}
}

// bid is a resting bid of maker, as a verified book event.
func bid(id, maker string) *p2p.BookEvent {
	o := ask(id, maker, 1, 1_000_000)
	o.Side, o.MinDuration, o.MaxDuration, o.Duration, o.Facts = market.Bid, 0, 0, time.Hour, market.Facts{}
	return orderEvent(o)
}
