package node_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/client"
)

// askAndWait has provider p ask count GPUs of h100 at price and waits
// until b's replica holds the ask.
func askAndWait(t *testing.T, ctx context.Context, p, b *node.Node, count uint32, price string) api.OrderView {
	t.Helper()
	ask, err := p.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: h100, Count: count, Price: price, MinDuration: "1s", Expires: "30m"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "ask in the buyer's book", func() (bool, string) {
		bk, err := b.Book(ctx, h100, "USD")
		if err != nil {
			return false, err.Error()
		}
		return bk.BestAsk == price, fmt.Sprintf("%+v", bk)
	})
	return ask
}

// TestDashboardAPI runs DashboardAPI against both implementations after
// one trade: the trade is in the history with the index, the market is
// listed, orders page, and the provider's GPUs have telemetry over time.
func TestDashboardAPI(t *testing.T) {
	net := startNet(t, 1, 1)
	provider, buyer := net.Providers[0], net.Buyers[0]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	askAndWait(t, ctx, provider, buyer, 4, "2.30")
	bid, err := buyer.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: h100, Count: 2, Price: "2.40", Duration: "1h", Expires: "30m"})
	if err != nil {
		t.Fatal(err)
	}
	if len(bid.Fills) == 0 {
		t.Fatalf("bid = %+v, want it to trade", bid)
	}
	fill := bid.Fills[0]
	for i := range 3 {
		if _, err := buyer.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: h100, Count: 1, Price: fmt.Sprintf("1.0%d", i), Duration: "1h", Expires: "30m"}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, ctx, "the lease running on the provider", func() (bool, string) {
		l, err := provider.Lease(ctx, fill.Lease)
		return err == nil && l.State == "running", fmt.Sprint(l, err)
	})
	// The provider applies the fill too.
	waitFor(t, ctx, "fill in the provider's history", func() (bool, string) {
		h, err := provider.History(ctx, h100, "USD", api.HistoryQuery{})
		return err == nil && len(h.Points) == 1, fmt.Sprint(h, err)
	})

	viaClient := func(n *node.Node) api.API {
		ep, err := client.ReadEndpoint(n.Repo())
		if err != nil {
			t.Fatal(err)
		}
		return client.New(ep)
	}
	impls := []struct {
		name            string
		provider, buyer api.API
	}{
		{"in-process", provider, buyer},
		{"http", viaClient(provider), viaClient(buyer)},
	}
	for _, impl := range impls {
		t.Run(impl.name, func(t *testing.T) {
			for who, a := range map[string]api.API{"buyer": impl.buyer, "provider": impl.provider} {
				h, err := a.History(ctx, h100, "USD", api.HistoryQuery{})
				if err != nil {
					t.Fatal(err)
				}
				if len(h.Points) != 1 || h.Points[0].Fill != fill.ID || h.Points[0].Price != fill.Price || h.Points[0].Count != fill.Count ||
					!h.Points[0].Time.Equal(fill.Time) || h.Points[0].Index == "" {
					t.Errorf("%s History = %+v, want the fill %+v with an index", who, h.Points, fill)
				}
				if _, err := a.History(ctx, h100, "XXX", api.HistoryQuery{}); !errors.Is(err, api.ErrBadRequest) {
					t.Errorf("%s History(XXX) error = %v, want bad request", who, err)
				}
				ms, err := a.Markets(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if len(ms) != 1 || ms[0].Market != h100 || ms[0].Currency != "USD" || ms[0].Spot != fill.Price || ms[0].BestAsk != "2.30" || ms[0].Fills != 1 {
					t.Errorf("%s Markets = %+v, want %s with spot %s, best ask 2.30, one fill", who, ms, h100, fill.Price)
				}
			}

			page, err := impl.buyer.OrdersPage(ctx, api.PageQuery{Limit: 2})
			if err != nil {
				t.Fatal(err)
			}
			if page.Total != 4 || len(page.Orders) != 2 {
				t.Errorf("OrdersPage(limit 2) = total %d, %v; want 4 in all, 2 on the page", page.Total, page.Orders)
			}
			// Pages partition the orders (orders placed in the same
			// millisecond may come in either order, but always the same).
			page2, err := impl.buyer.OrdersPage(ctx, api.PageQuery{Offset: 2, Limit: 2})
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for _, o := range append(page.Orders, page2.Orders...) {
				seen[o.ID] = true
			}
			all, err := impl.buyer.Orders(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range all {
				if !seen[o.ID] {
					t.Errorf("order %s (%s) is on neither page", o.ID, o.Price)
				}
			}
			if len(seen) != 4 || len(all) != 4 {
				t.Errorf("two pages hold %d distinct orders of %d, want 4", len(seen), len(all))
			}
			page, err = impl.buyer.OrdersPage(ctx, api.PageQuery{Offset: 3, Limit: 2})
			if err != nil || page.Total != 4 || len(page.Orders) != 1 || page.Orders[0].ID != bid.ID {
				t.Errorf("OrdersPage(offset 3) = %+v, %v; want the first bid alone", page, err)
			}
			page, err = impl.buyer.OrdersPage(ctx, api.PageQuery{Status: "resting"})
			if err != nil || page.Total != 3 {
				t.Errorf("OrdersPage(resting) = total %d, %v; want 3", page.Total, err)
			}
			if _, err := impl.buyer.OrdersPage(ctx, api.PageQuery{Status: "lost"}); !errors.Is(err, api.ErrBadRequest) {
				t.Errorf("OrdersPage(lost) error = %v, want bad request", err)
			}

			st, err := impl.buyer.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.ID != buyer.PeerID().String() || st.Provider || st.Peers < 1 || len(st.Markets) != 1 || st.Markets[0] != h100 ||
				st.OpenOrders != 3 || st.Orders != 4 || st.RunningLeases != 1 || st.Leases != 1 || st.Offer != nil {
				t.Errorf("buyer Status = %+v, want 1 market, 3 open of 4 orders, 1 running lease, no offer", st)
			}
			pst, err := impl.provider.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !pst.Provider || pst.Offer == nil || pst.Offer.GPUs != 8 || pst.Offer.Seq == 0 || pst.OpenOrders != 1 || pst.RunningLeases != 1 {
				t.Errorf("provider Status = %+v (offer %+v), want its 8-GPU offer, the open ask, 1 running lease", pst, pst.Offer)
			}

			gh, err := impl.provider.GPUHistory(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(gh.GPUs) != 8 || len(gh.GPUs[0].Samples) == 0 || gh.GPUs[0].Samples[0].MemoryTotalBytes == 0 {
				t.Errorf("GPUHistory = %d GPUs (first with %v), want 8 with samples", len(gh.GPUs), gh.GPUs)
			}
			held := 0
			for _, g := range gh.GPUs {
				if g.Lease == fill.Lease {
					held++
				}
			}
			if held != 2 || len(gh.Holders) != 2 || gh.Holders[0].Buyer != buyer.PeerID().String() {
				t.Errorf("GPUHistory: %d GPUs held by lease %s (holders %+v), want 2 held by the buyer", held, fill.Lease, gh.Holders)
			}
			if _, err := impl.buyer.GPUHistory(ctx); !errors.Is(err, api.ErrNoGPUs) {
				t.Errorf("buyer GPUHistory error = %v, want ErrNoGPUs", err)
			}
		})
	}
}
