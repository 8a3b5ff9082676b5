package node

import (
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/internal/exchange"
	"github.com/suanli/suanli/node/internal/orders"
	"github.com/suanli/suanli/node/internal/store"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// TestInflightEndsWithItsFill: a take's count in flight ends in the same
// step as its fill changes the book, so a take already applied is never
// counted twice ("order has 4 GPUs left (6 being taken)"). Before, the
// count ended only when the take's handler returned.
func TestInflightEndsWithItsFill(t *testing.T) {
	const mkt = "nvidia-h100-sxm5-80gb"
	n := &Node{now: time.Now}
	n.books = exchange.New(exchange.Config{Hooks: exchange.Hooks{FillLocked: n.fillLocked}})
	n.orders = orders.New(orders.Config{Books: n.books, Now: n.now})
	t0 := time.Now()
	ask := market.Order{ID: "ask", Maker: "me", Side: market.Ask, Market: mkt, Currency: "USD", Quantity: 4, Price: 1_000_000,
		LeaseType: market.Spot, MinDuration: time.Second, MaxDuration: time.Hour, Created: t0, Expires: t0.Add(time.Hour)}
	if err := n.books.With(mkt, "USD", func(s *exchange.Replica) {
		if err := s.Book.Add(&ask, t0); err != nil {
			t.Fatal(err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	available := func() int {
		var rem, taking uint32
		n.books.With(mkt, "USD", func(s *exchange.Replica) {
			_, rem, _ = s.Book.Lookup("ask")
			taking = n.inflight.Of("ask")
		})
		return int(rem) - int(taking)
	}
	n.inflight.Add("take-a", "ask", 2)
	n.inflight.Add("key-b", "ask", 2)
	n.inflight.Name("key-b", "take-b")
	if got := available(); got != 0 {
		t.Fatalf("with two takes of 2 in flight, %d available, want 0", got)
	}
	for _, id := range []string{"take-a", "take-b"} {
		f := market.Fill{ID: "fill-" + id, Market: mkt, Currency: "USD", BidID: "bid-" + id, AskID: "ask",
			Buyer: "buyer", Provider: "me", Quantity: 2, Price: 1_000_000, LeaseType: market.Spot, Time: t0}
		n.books.ApplyFill(&p2p.BookEvent{Kind: p2p.KindFill, Fill: &f, Lease: &proto.Lease{Id: id}})
		// Applied: the book says 2 fewer and the count holds 2 fewer.
		if got := available(); got != 0 {
			t.Fatalf("after the fill of %s, %d available, want 0 (a take applied is counted twice otherwise)", id, got)
		}
	}
	// The handlers' own ends come after: no-ops.
	n.inflight.Done("take-a")
	n.inflight.Done("key-b")
	if n.inflight.Len() != 0 || n.inflight.Of("ask") != 0 {
		t.Fatalf("counts left: %d takes, %d GPUs", n.inflight.Len(), n.inflight.Of("ask"))
	}
}

// TestFillWritesHistoryOnce: applying a fill writes its price history
// point once, after the books lock (it was written twice, once under it).
func TestFillWritesHistoryOnce(t *testing.T) {
	const mkt = "nvidia-h100-sxm5-80gb"
	st, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var writes, locked atomic.Int32
	n := &Node{now: time.Now, store: st, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	n.books = exchange.New(exchange.Config{Hooks: exchange.Hooks{
		FillLocked: func(ev *p2p.BookEvent, index int64, party bool) {
			locked.Store(1)
			defer locked.Store(0)
			n.fillLocked(ev, index, party)
		},
		Filled: n.filled,
	}})
	n.orders = orders.New(orders.Config{Books: n.books, Now: n.now})
	st.FailWrites(func(k []byte) error {
		if strings.HasPrefix(string(k), "hist/") {
			writes.Add(1)
			if locked.Load() != 0 {
				t.Error("price history written under the books lock")
			}
		}
		return nil
	})
	f := market.Fill{ID: "fill-1", Market: mkt, Currency: "USD", BidID: "bid-1", AskID: "ask-1",
		Buyer: "buyer", Provider: "provider", Quantity: 1, Price: 1_000_000, LeaseType: market.Spot, Time: time.Now()}
	n.books.ApplyFill(&p2p.BookEvent{Kind: p2p.KindFill, Fill: &f, Lease: &proto.Lease{Id: "take-1"}, Raw: &proto.Fill{}})
	if got := writes.Load(); got != 1 {
		t.Fatalf("one fill wrote %d price history points, want 1", got)
	}
}
