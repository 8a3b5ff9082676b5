package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/suanli/suanli/market"
)

// benchNode is a node with n of its own orders and nothing else, enough
// for the order views.
func benchNode(n int) *Node {
	nd := &Node{books: newBooks(), own: map[string]*ownOrder{}, now: time.Now}
	t0 := time.Now()
	for i := range n {
		id := fmt.Sprintf("order-%06d", i)
		nd.own[id] = &ownOrder{status: "resting", order: market.Order{
			ID: id, Market: "nvidia-h100-sxm5-80gb", Currency: "USD", Price: 2_000_000, Quantity: 1,
			Created: t0.Add(time.Duration(i) * time.Millisecond), Expires: t0.Add(time.Hour),
		}}
	}
	return nd
}

// BenchmarkOrdersPage is one dashboard page (50 orders) of 5000; the
// baseline is every order, as Orders (and `suanli orders`) returns them.
func BenchmarkOrdersPage(b *testing.B) {
	ctx := context.Background()
	nd := benchNode(5000)
	b.Run("baseline=Orders/all-5000", func(b *testing.B) {
		for b.Loop() {
			if v, _ := nd.Orders(ctx); len(v) != 5000 {
				b.Fatal(len(v))
			}
		}
	})
	b.Run("OrdersPage/50-of-5000", func(b *testing.B) {
		for b.Loop() {
			if v, _ := nd.OrdersPage(ctx, PageQuery{Offset: 2500, Limit: 50}); len(v.Orders) != 50 || v.Total != 5000 {
				b.Fatal(v.Total)
			}
		}
	})
}
