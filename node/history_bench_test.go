package node

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/internal/exchange"
	"github.com/suanli/suanli/node/internal/orders"
)

// benchNode is a node with n of its own orders and nothing else, enough
// for the order views.
func benchNode(n int) *Node {
	nd := &Node{books: exchange.New(exchange.Config{}), now: time.Now}
	nd.orders = orders.New(orders.Config{Books: nd.books, Now: nd.now})
	t0 := time.Now()
	for i := range n {
		id := fmt.Sprintf("order-%06d", i)
		nd.orders.Add(&market.Order{
			ID: id, Market: "nvidia-h100-sxm5-80gb", Currency: "USD", Price: 2_000_000, Quantity: 1,
			Created: t0.Add(time.Duration(i) * time.Millisecond), Expires: t0.Add(time.Hour),
		}, nil, api.OrderRequest{})
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
			if v, _ := nd.OrdersPage(ctx, api.PageQuery{Offset: 2500, Limit: 50}); len(v.Orders) != 50 || v.Total != 5000 {
				b.Fatal(v.Total)
			}
		}
	})
}

// TestOrdersPageBounds: a page never holds more than orders.MaxPageSize orders, a
// page past the end is empty, and the status filter counts only its kind.
func TestOrdersPageBounds(t *testing.T) {
	ctx := context.Background()
	nd := benchNode(1200)
	nd.orders.Cancelled("order-000007")
	for _, tc := range []struct {
		q              api.PageQuery
		total, n       int
		first          string
		wantBadRequest bool
	}{
		{q: api.PageQuery{}, total: 1200, n: orders.DefaultPageSize, first: "order-001199"},
		{q: api.PageQuery{Limit: 10_000}, total: 1200, n: orders.MaxPageSize, first: "order-001199"},
		{q: api.PageQuery{Offset: 1190, Limit: 50}, total: 1200, n: 10, first: "order-000009"},
		{q: api.PageQuery{Offset: 5000}, total: 1200, n: 0},
		{q: api.PageQuery{Status: "cancelled"}, total: 1, n: 1, first: "order-000007"},
		{q: api.PageQuery{Status: "filled"}, total: 0, n: 0},
		{q: api.PageQuery{Offset: -1}, wantBadRequest: true},
		{q: api.PageQuery{Limit: -1}, wantBadRequest: true},
	} {
		v, err := nd.OrdersPage(ctx, tc.q)
		if tc.wantBadRequest {
			if !errors.Is(err, api.ErrBadRequest) {
				t.Errorf("OrdersPage(%+v) error = %v, want bad request", tc.q, err)
			}
			continue
		}
		if err != nil || v.Total != tc.total || len(v.Orders) != tc.n || (tc.n > 0 && v.Orders[0].ID != tc.first) {
			first := ""
			if len(v.Orders) > 0 {
				first = v.Orders[0].ID
			}
			t.Errorf("OrdersPage(%+v) = total %d, %d orders from %q, %v; want %d, %d from %q", tc.q, v.Total, len(v.Orders), first, err, tc.total, tc.n, tc.first)
		}
	}
}
