package node

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/internal/exchange"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// The books lock is taken before the own orders' lock (a fill applied
// under the books lock records itself in the node's own orders): a view of
// a resting order must not explain it from the book while it holds the
// own orders' lock, or a view and a fill deadlock.
func TestOrderViewWhileFillsApply(t *testing.T) {
	const mkt = "nvidia-h100-sxm5-80gb"
	n := &Node{own: map[string]*ownOrder{}, now: time.Now}
	n.books = exchange.New(exchange.Config{Hooks: exchange.Hooks{
		FillLocked: func(ev *p2p.BookEvent, _ int64, _ bool) { n.ownFilled(*ev.Fill, ev.Lease) },
	}})
	t0 := time.Now()
	n.own["bid-mine"] = &ownOrder{status: "resting", order: market.Order{
		ID: "bid-mine", Maker: "me", Side: market.Bid, Market: mkt, Currency: "USD", Quantity: 1, Price: 1_000_000,
		LeaseType: market.Spot, Duration: time.Hour, Created: t0, Expires: t0.Add(time.Hour),
	}}
	const rounds = 3000
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for range rounds {
			n.orderView(n.own["bid-mine"])
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
		t.Fatal("order views and fills deadlocked: the own orders' lock was held while taking the books lock")
	}
}
