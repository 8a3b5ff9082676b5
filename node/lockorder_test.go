package node

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/internal/exchange"
	"github.com/suanli/suanli/node/internal/orders"
	"github.com/suanli/suanli/node/internal/trade"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// The lock order of node/doc.go, held: the trade lock before the books
// lock before the own orders' lock and Inflight's (a take loop reads an
// order's fills and its count in flight under both), and the books lock
// before the own orders' lock (a fill applied under the books lock
// records itself in the node's own orders): a view of a resting order
// must not explain it from the book while it holds the own orders' lock,
// or a view and a fill deadlock. Take loops, fills and views run at once.
func TestOrderViewWhileFillsApply(t *testing.T) {
	const mkt = "nvidia-h100-sxm5-80gb"
	n := &Node{now: time.Now}
	n.books = exchange.New(exchange.Config{Hooks: exchange.Hooks{
		FillLocked: func(ev *p2p.BookEvent, _ int64, _ bool) { n.orders.Filled(*ev.Fill, ev.Lease) },
	}})
	n.orders = orders.New(orders.Config{Books: n.books, Now: n.now})
	t0 := time.Now()
	mine := market.Order{
		ID: "bid-mine", Maker: "me", Side: market.Bid, Market: mkt, Currency: "USD", Quantity: 1, Price: 1_000_000,
		LeaseType: market.Spot, Duration: time.Hour, Created: t0, Expires: t0.Add(time.Hour),
	}
	n.orders.Add(&mine, nil, api.OrderRequest{})
	n.trade = trade.New(trade.Config{Books: n.books, Inflight: &n.inflight, Now: time.Now, Node: tradeNode{n},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	const rounds = 3000
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		o := mine
		for range rounds {
			n.trade.TakeLoop(t.Context(), &o, nil) // nothing crosses: the locks only
		}
	}()
	go func() {
		defer wg.Done()
		for range rounds {
			n.orders.Order("bid-mine")
		}
	}()
	go func() {
		defer wg.Done()
		for i := range rounds {
			f := market.Fill{ID: fmt.Sprint("fill-", i), Market: mkt, Currency: "USD", BidID: fmt.Sprint("bid-", i), AskID: fmt.Sprint("ask-", i),
				Buyer: "buyer", Provider: "provider", Quantity: 1, Price: 1_000_000, LeaseType: market.Spot, Time: t0}
			n.books.ApplyFill(&p2p.BookEvent{Kind: p2p.KindFill, Fill: &f, Lease: &proto.Lease{}})
		}
	}()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("order views and fills deadlocked: the lock order was broken")
	}
}
