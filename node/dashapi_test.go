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
	// The provider applies the fill too; the buyer's history may be
	// written by the gossip's copy of the fill, after the bid returned.
	for who, n := range map[string]*node.Node{"provider": provider, "buyer": buyer} {
		waitFor(t, ctx, "fill in the "+who+"'s history", func() (bool, string) {
			h, err := n.History(ctx, h100, "USD", api.HistoryQuery{})
			return err == nil && len(h.Points) == 1, fmt.Sprint(h, err)
		})
	}

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
				// The provider's offer on the same row: the market is joined
				// and offered by one provider.
				if len(ms) == 1 && (!ms[0].Joined || ms[0].Providers != 1 || ms[0].OfferedGPUs == 0 || ms[0].LowestOffer == "") {
					t.Errorf("%s Markets = %+v, want it joined and offered by one provider", who, ms[0])
				}
				if len(h.Points) == 1 && h.Points[0].LeaseType != fill.LeaseType {
					t.Errorf("%s History lease type = %q, want the fill's %q", who, h.Points[0].LeaseType, fill.LeaseType)
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

// TestMarketsFromOffers: a fresh buyer that joined no market lists the
// markets the providers offer (from a DHT lookup), not joined, with the
// providers, GPUs and lowest list price; a read-only request makes no
// lookup, so it sees only what the node already stored.
func TestMarketsFromOffers(t *testing.T) {
	net := startNet(t, 1, 2)
	provider, buyer, other := net.Providers[0], net.Buyers[0], net.Buyers[1]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	offer := provider.Published()
	if offer == nil {
		t.Fatal("the provider published no offer")
	}
	// Read-only on a node that never looked: nothing stored, no lookup.
	ms, err := other.Markets(api.WithReadOnly(ctx))
	if err != nil || len(ms) != 0 {
		t.Errorf("read-only Markets of a fresh node = %+v, %v; want none (no lookup)", ms, err)
	}
	var row api.MarketSummary
	waitFor(t, ctx, "the provider's market on the fresh buyer", func() (bool, string) {
		ms, err := buyer.Markets(ctx)
		for _, m := range ms {
			if m.Market == h100 {
				row = m
				return true, ""
			}
		}
		return false, fmt.Sprint(ms, err)
	})
	if row.Joined || row.Currency != "USD" || row.Providers != 1 || row.OfferedGPUs != len(offer.Gpus) || row.LowestOffer == "" || row.BestAsk != "" {
		t.Errorf("fresh buyer's row = %+v, want %s not joined, offered by one provider with %d GPUs", row, h100, len(offer.Gpus))
	}
	if joined := buyer.JoinedMarkets(); len(joined) != 0 {
		t.Errorf("listing markets joined %v, want none joined", joined)
	}
	// Now stored: read-only sees it too, through the API.
	ep, err := client.ReadEndpoint(buyer.Repo())
	if err != nil {
		t.Fatal(err)
	}
	ms, err = buyer.Markets(api.WithReadOnly(ctx))
	if err != nil || len(ms) != 1 || ms[0].Market != h100 || ms[0].Providers != 1 {
		t.Errorf("read-only Markets after a lookup = %+v, %v; want %s from the stored offer", ms, err, h100)
	}
	ms, err = client.New(ep).Markets(ctx)
	if err != nil || len(ms) != 1 || ms[0].Market != h100 || ms[0].Joined {
		t.Errorf("Markets over HTTP = %+v, %v; want %s, not joined", ms, err, h100)
	}
}
