package node_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/devnet"
)

// Order-book behaviour across real nodes on loopback: racing takers,
// late joiners, cancels, idempotency, post-only, bid constraints and the
// spot price. Every assertion about another replica polls with a deadline.

// marketCtx bounds one market test: generous, since a loaded 2-core machine
// running -race can stretch a take to seconds.
func marketCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// depth is the number of GPUs resting on one side of a book view.
func depth(levels []api.LevelView) int {
	sum := 0
	for _, l := range levels {
		sum += l.Count
	}
	return sum
}

// waitBookOn polls every node's Book until cond holds on each.
func waitBookOn(t *testing.T, ctx context.Context, what string, nodes []*node.Node, cond func(api.BookView) bool) {
	t.Helper()
	for i, n := range nodes {
		waitFor(t, ctx, fmt.Sprintf("%s on node %d", what, i), func() (bool, string) {
			b, err := n.Book(ctx, h100, "USD")
			return err == nil && cond(b), sprint(b, err)
		})
	}
}

// tradeKey is a trade as every replica must agree on it.
func tradeKey(tr api.TradeView) string {
	return fmt.Sprintf("%s %s %d@%s %s->%s lease=%s gpus=%v", tr.ID, tr.Market, tr.Count, tr.Price, tr.Provider, tr.Buyer, tr.Lease, tr.GPUs)
}

// waitTradesAgree waits until every node lists exactly the want trades (by
// ID, with the same content) and returns them as the first node sees them.
func waitTradesAgree(t *testing.T, ctx context.Context, nodes []*node.Node, want int) []api.TradeView {
	t.Helper()
	var ref []api.TradeView
	var refKeys []string
	for i, n := range nodes {
		waitFor(t, ctx, fmt.Sprintf("node %d to list %d trades agreeing with node 0", i, want), func() (bool, string) {
			trades, err := n.Trades(ctx, h100)
			if err != nil || len(trades) != want {
				return false, sprint(trades, err)
			}
			keys := make([]string, len(trades))
			for j, tr := range trades {
				keys[j] = tradeKey(tr)
			}
			sort.Strings(keys)
			if ref == nil {
				ref, refKeys = trades, keys
				return true, ""
			}
			return slices.Equal(keys, refKeys), sprint(keys, refKeys)
		})
	}
	return ref
}

// placeConcurrently places one order per node at once and returns the
// orders in node order.
func placeConcurrently(t *testing.T, ctx context.Context, nodes []*node.Node, req api.OrderRequest) []api.OrderView {
	t.Helper()
	out := make([]api.OrderView, len(nodes))
	errs := make([]error, len(nodes))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out[i], errs[i] = n.PlaceOrder(ctx, req)
		}()
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return out
}

// filledOf waits until the fills recorded on each order (IOC orders end
// "done" or "filled"; a take in doubt may land by gossip later) add up to
// want, and returns every fill.
func filledOf(t *testing.T, ctx context.Context, owners []*node.Node, orders []api.OrderView, want int) []api.TradeView {
	t.Helper()
	var fills []api.TradeView
	waitFor(t, ctx, fmt.Sprintf("the bids' fills to add up to %d", want), func() (bool, string) {
		fills = fills[:0]
		sum := 0
		var views []api.OrderView
		for i, o := range orders {
			v, err := owners[i].Order(ctx, o.ID)
			if err != nil {
				return false, err.Error()
			}
			views = append(views, v)
			for _, f := range v.Fills {
				sum += int(f.Count)
				fills = append(fills, f)
			}
		}
		if sum > want {
			t.Fatalf("bids filled %d GPUs, more than the %d asked: %+v", sum, want, views)
		}
		return sum == want, sprint(views)
	})
	return fills
}

// checkGPUsDistinct fails if two fills lease the same GPU, or if the fills
// do not name count GPUs in all.
func checkGPUsDistinct(t *testing.T, fills []api.TradeView, count int) {
	t.Helper()
	seen := map[string]string{}
	n := 0
	for _, f := range fills {
		if len(f.GPUs) != int(f.Count) || f.Lease == "" {
			t.Errorf("fill %s: %d GPUs for a count of %d, lease %q", f.ID, len(f.GPUs), f.Count, f.Lease)
		}
		for _, g := range f.GPUs {
			if other, ok := seen[g]; ok && other != f.Lease {
				t.Errorf("GPU %s sold twice: leases %s and %s", g, other, f.Lease)
			}
			seen[g] = f.Lease
			n++
		}
	}
	if n != count {
		t.Errorf("fills name %d GPUs, want %d", n, count)
	}
}

// TestMarketRacingIOCTakers: four buyers at once send IOC bids for 2 GPUs
// each through one ask of 4. Exactly 4 GPUs trade, each GPU once, the ask
// ends filled, and every replica lists the same trades.
func TestMarketRacingIOCTakers(t *testing.T) {
	net := startNet(t, 1, 4)
	ctx := marketCtx(t)
	provider := net.Providers[0]
	all := net.Nodes()

	ask, err := provider.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: h100, Count: 4, Price: "2.40"})
	if err != nil {
		t.Fatal(err)
	}
	waitBookOn(t, ctx, "the ask", all, func(b api.BookView) bool { return depth(b.Asks) == 4 })

	bids := placeConcurrently(t, ctx, net.Buyers,
		api.OrderRequest{Side: "bid", Market: h100, Count: 2, Price: "2.50", Duration: "1h", IOC: true})
	for i, b := range bids {
		if b.Status != "done" && b.Status != "filled" {
			t.Errorf("IOC bid %d status %q, want done or filled", i, b.Status)
		}
	}
	fills := filledOf(t, ctx, net.Buyers, bids, 4)
	checkGPUsDistinct(t, fills, 4)
	for _, f := range fills {
		if f.Price != "2.40" || f.Provider != provider.PeerID().String() {
			t.Errorf("fill %+v, want at the ask's 2.40 from the provider", f)
		}
	}

	waitFor(t, ctx, "the provider's ask to be filled", func() (bool, string) {
		o, err := provider.Order(ctx, ask.ID)
		return err == nil && o.Status == "filled" && o.Remaining == 0 && len(o.Fills) == 2, sprint(o, err)
	})
	trades := waitTradesAgree(t, ctx, all, 2)
	checkGPUsDistinct(t, trades, 4)
	// IOC leaves nothing behind: the book is empty everywhere.
	waitBookOn(t, ctx, "an empty book", all, func(b api.BookView) bool {
		return len(b.Asks) == 0 && len(b.Bids) == 0 && b.Spot == "2.40"
	})
	for _, b := range net.Buyers {
		o, err := b.Orders(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(o) != 1 {
			t.Errorf("buyer has %d orders, want its one IOC bid", len(o))
		}
	}
}

// TestMarketRacingGTCTakers: three buyers at once bid 2 GPUs each (good
// till cancelled) through an ask of 4. Exactly 4 GPUs trade and the 2 left
// over rest as bids on every replica; the ask is gone.
func TestMarketRacingGTCTakers(t *testing.T) {
	net := startNet(t, 1, 3)
	ctx := marketCtx(t)
	provider := net.Providers[0]
	all := net.Nodes()

	ask, err := provider.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: h100, Count: 4, Price: "2.40"})
	if err != nil {
		t.Fatal(err)
	}
	waitBookOn(t, ctx, "the ask", all, func(b api.BookView) bool { return depth(b.Asks) == 4 })

	bids := placeConcurrently(t, ctx, net.Buyers,
		api.OrderRequest{Side: "bid", Market: h100, Count: 2, Price: "2.50", Duration: "1h"})
	fills := filledOf(t, ctx, net.Buyers, bids, 4)
	checkGPUsDistinct(t, fills, 4)

	waitFor(t, ctx, "the provider's ask to be filled", func() (bool, string) {
		o, err := provider.Order(ctx, ask.ID)
		return err == nil && o.Status == "filled" && o.Remaining == 0, sprint(o, err)
	})
	waitTradesAgree(t, ctx, all, 2)
	waitBookOn(t, ctx, "the unfilled 2 GPUs resting as bids and no ask", all, func(b api.BookView) bool {
		return len(b.Asks) == 0 && depth(b.Bids) == 2 && len(b.Bids) == 1 && b.Bids[0].Price == "2.50" && b.Spot == "2.40"
	})
	resting := 0
	for i, b := range bids {
		v, err := net.Buyers[i].Order(ctx, b.ID)
		if err != nil {
			t.Fatal(err)
		}
		resting += int(v.Remaining)
		if v.Remaining > 0 && v.Status != "resting" {
			t.Errorf("bid %d has %d left but status %q", i, v.Remaining, v.Status)
		}
	}
	if resting != 2 {
		t.Errorf("buyers' own bids have %d GPUs remaining, want 2", resting)
	}
}

// TestMarketLateJoiner: a node that starts after an ask was placed and a
// trade made fetches the open orders and recent fills when it first looks
// at the book (book sync, each message verified), so it holds the ask and
// the spot price without any new gossip.
func TestMarketLateJoiner(t *testing.T) {
	net := startNet(t, 1, 1)
	ctx := marketCtx(t)
	provider, buyer := net.Providers[0], net.Buyers[0]

	ask, err := provider.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: h100, Count: 4, Price: "2.40"})
	if err != nil {
		t.Fatal(err)
	}
	waitBookOn(t, ctx, "the ask", []*node.Node{buyer}, func(b api.BookView) bool { return depth(b.Asks) == 4 })
	bid, err := buyer.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: h100, Count: 1, Price: "2.50", Duration: "1h", IOC: true})
	if err != nil {
		t.Fatal(err)
	}
	if bid.Status != "filled" || len(bid.Fills) != 1 {
		t.Fatalf("bid = %+v, want filled", bid)
	}

	late, err := node.New(node.WithRepo(t.TempDir()), node.WithAutoInit(), node.WithListen("/ip4/127.0.0.1/tcp/0"),
		node.WithBootstrap(provider.Addrs()...), node.WithoutGPU(), node.WithAPI(""), node.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { late.Close() })

	// Book right away, as a daemon's first `suanli book` does: it may run
	// before the node has bootstrapped, so the replica must still fill in
	// afterwards. Nothing new is gossiped from here on: what arrives comes
	// by book sync.
	first, err := late.Book(ctx, h100, "USD")
	if err != nil {
		t.Fatal(err)
	}
	if depth(first.Asks) != 3 || first.Spot != "2.40" {
		t.Logf("late joiner's first Book() = %+v (synced before bootstrap finished)", first)
	}
	waitBookOn(t, ctx, "the late joiner to hold the ask and the spot price", []*node.Node{late}, func(b api.BookView) bool {
		return len(b.Asks) == 1 && b.Asks[0].Count == 3 && b.Asks[0].Price == "2.40" && b.Spot == "2.40" && b.Index == "2.40"
	})
	trades, err := late.Trades(ctx, h100)
	if err != nil {
		t.Fatal(err)
	}
	if len(trades) != 1 || trades[0].ID != bid.Fills[0].ID || trades[0].Lease != bid.Fills[0].Lease {
		t.Errorf("late joiner's trades = %+v, want the one trade %+v", trades, bid.Fills[0])
	}
	if o, err := provider.Order(ctx, ask.ID); err != nil || o.Remaining != 3 {
		t.Errorf("provider's ask = %+v, %v; want 3 left", o, err)
	}
}

// TestMarketCancel: a resting ask its provider cancels leaves every
// replica; unknown and already-cancelled orders are refused.
func TestMarketCancel(t *testing.T) {
	net := startNet(t, 1, 2)
	ctx := marketCtx(t)
	provider := net.Providers[0]
	all := net.Nodes()

	ask, err := provider.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: h100, Count: 3, Price: "2.40"})
	if err != nil {
		t.Fatal(err)
	}
	waitBookOn(t, ctx, "the ask", all, func(b api.BookView) bool { return depth(b.Asks) == 3 })

	got, err := provider.CancelOrder(ctx, ask.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != "cancelled" || got.Remaining != 0 {
		t.Errorf("cancelled ask = %+v, want status cancelled, 0 remaining", got)
	}
	waitBookOn(t, ctx, "the ask to be gone", all, func(b api.BookView) bool { return len(b.Asks) == 0 && len(b.Bids) == 0 })

	// A bid that would have crossed the ask now rests: nothing trades.
	bid, err := net.Buyers[0].PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: h100, Count: 1, Price: "2.50", Duration: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	if bid.Status != "resting" || len(bid.Fills) != 0 {
		t.Errorf("bid after the cancel = %+v, want resting without fills", bid)
	}

	if _, err := provider.CancelOrder(ctx, "bafkreiunknownorder"); !errors.Is(err, api.ErrUnknownOrder) {
		t.Errorf("cancel of an unknown order: %v, want ErrUnknownOrder", err)
	}
	if _, err := net.Buyers[1].CancelOrder(ctx, ask.ID); !errors.Is(err, api.ErrUnknownOrder) {
		t.Errorf("cancel of another node's order: %v, want ErrUnknownOrder", err)
	}
	if _, err := provider.CancelOrder(ctx, ask.ID); err == nil || !errors.Is(err, api.ErrBadRequest) {
		t.Errorf("second cancel: %v, want a bad request", err)
	}
	if o, err := provider.Order(ctx, ask.ID); err != nil || o.Status != "cancelled" {
		t.Errorf("ask after the second cancel = %+v, %v; want still cancelled", o, err)
	}
	waitBookOn(t, ctx, "the bid resting and no ask", all, func(b api.BookView) bool {
		return len(b.Asks) == 0 && depth(b.Bids) == 1 && b.Spot == ""
	})
}

// TestMarketIdempotentClientKey: placing the same order twice with one
// client key (a retried request) gives back the first order; only one
// rests anywhere.
func TestMarketIdempotentClientKey(t *testing.T) {
	net := startNet(t, 1, 1)
	ctx := marketCtx(t)
	provider := net.Providers[0]
	all := net.Nodes()

	req := api.OrderRequest{Side: "ask", Market: h100, Count: 2, Price: "2.40", ClientKey: "retry-1"}
	a, err := provider.PlaceOrder(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := provider.PlaceOrder(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if a.ID != b.ID {
		t.Fatalf("same client key gave two orders %s and %s", a.ID, b.ID)
	}
	// A different key is a different order: it also serves as the marker
	// that the replicas have caught up with everything published before.
	c, err := provider.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: h100, Count: 1, Price: "2.45", ClientKey: "retry-2"})
	if err != nil {
		t.Fatal(err)
	}
	if c.ID == a.ID {
		t.Fatal("a different client key returned the first order")
	}
	waitBookOn(t, ctx, "one ask of 2 at 2.40 and one of 1 at 2.45", all, func(b api.BookView) bool {
		return len(b.Asks) == 2 && b.Asks[0].Price == "2.40" && b.Asks[0].Count == 2 && b.Asks[0].Orders == 1 &&
			b.Asks[1].Price == "2.45" && b.Asks[1].Count == 1
	})
	orders, err := provider.Orders(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(orders) != 2 {
		t.Errorf("provider has %d orders, want 2", len(orders))
	}
}

// TestMarketIdempotentIOCRetry: a retried IOC bid (same client key, after
// the first one traded) must not buy a second time.
func TestMarketIdempotentIOCRetry(t *testing.T) {
	net := startNet(t, 1, 1)
	ctx := marketCtx(t)
	provider, buyer := net.Providers[0], net.Buyers[0]

	if _, err := provider.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: h100, Count: 4, Price: "2.40"}); err != nil {
		t.Fatal(err)
	}
	waitBookOn(t, ctx, "the ask", []*node.Node{buyer}, func(b api.BookView) bool { return depth(b.Asks) == 4 })
	req := api.OrderRequest{Side: "bid", Market: h100, Count: 1, Price: "2.50", Duration: "1h", IOC: true, ClientKey: "ioc-retry"}
	a, err := buyer.PlaceOrder(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := buyer.PlaceOrder(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if a.ID != b.ID {
		t.Errorf("a retried IOC bid with the same client key placed a second order: %s then %s", a.ID, b.ID)
	}
	trades, err := buyer.Trades(ctx, h100)
	if err != nil {
		t.Fatal(err)
	}
	if len(trades) != 1 {
		t.Errorf("buyer made %d trades for one (retried) IOC bid of 1 GPU, want 1", len(trades))
	}
}

// TestMarketPostOnly: a post-only bid that would trade is refused and
// rests nowhere; one that does not cross rests everywhere.
func TestMarketPostOnly(t *testing.T) {
	net := startNet(t, 1, 2)
	ctx := marketCtx(t)
	provider, buyer := net.Providers[0], net.Buyers[0]
	all := net.Nodes()

	if _, err := provider.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: h100, Count: 2, Price: "2.40"}); err != nil {
		t.Fatal(err)
	}
	waitBookOn(t, ctx, "the ask", all, func(b api.BookView) bool { return depth(b.Asks) == 2 })

	_, err := buyer.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: h100, Count: 1, Price: "2.40", Duration: "1h", PostOnly: true})
	if err == nil || !errors.Is(err, api.ErrBadRequest) {
		t.Fatalf("crossing post-only bid: err %v, want a bad request", err)
	}
	if orders, _ := buyer.Orders(ctx); len(orders) != 0 {
		t.Errorf("refused post-only bid left orders behind: %+v", orders)
	}
	ok, err := buyer.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: h100, Count: 1, Price: "2.39", Duration: "1h", PostOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if ok.Status != "resting" || ok.Remaining != 1 {
		t.Errorf("non-crossing post-only bid = %+v, want resting", ok)
	}
	// Once the resting bid is everywhere, the refused one would be too.
	waitBookOn(t, ctx, "only the non-crossing bid resting", all, func(b api.BookView) bool {
		return len(b.Bids) == 1 && b.Bids[0].Price == "2.39" && b.Bids[0].Count == 1 && depth(b.Asks) == 2 && b.Spot == ""
	})
}

// TestMarketConstraints: bids whose constraints the ask's provider fails
// (region, GPU memory) do not trade though their price crosses, and rest;
// the same bids with constraints it meets do trade.
func TestMarketConstraints(t *testing.T) {
	net := startNet(t, 1, 1)
	ctx := marketCtx(t)
	provider, buyer := net.Providers[0], net.Buyers[0]
	all := net.Nodes()
	if m := net.Machines[0]; m.Model != "dgxh100" || m.Region != "CN-GZ" {
		t.Fatalf("devnet machine 0 is %+v, this test assumes a dgxh100 in CN-GZ", m)
	}
	inv, err := provider.GPUs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	memGiB := inv.GPUs[0].MemoryBytes >> 30

	ask, err := provider.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: h100, Count: 4, Price: "2.40"})
	if err != nil {
		t.Fatal(err)
	}
	waitBookOn(t, ctx, "the ask", all, func(b api.BookView) bool { return depth(b.Asks) == 4 })

	region, err := buyer.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: h100, Count: 1, Price: "2.50", Duration: "1h", Regions: []string{"US-CA"}})
	if err != nil {
		t.Fatal(err)
	}
	vram, err := buyer.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: h100, Count: 1, Price: "2.60", Duration: "1h", MinVRAMGiB: memGiB + 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []api.OrderView{region, vram} {
		if o.Status != "resting" || len(o.Fills) != 0 {
			t.Errorf("bid the provider does not qualify for = %+v, want resting without fills", o)
		}
	}
	// Both rest on every replica, crossing the ask, and the provider (whose
	// ask they cross) does not take them either.
	waitBookOn(t, ctx, "both constrained bids resting beside the ask", all, func(b api.BookView) bool {
		return depth(b.Bids) == 2 && depth(b.Asks) == 4 && b.Spot == ""
	})

	// Positive controls: constraints the provider meets trade at once.
	for _, req := range []api.OrderRequest{
		{Side: "bid", Market: h100, Count: 1, Price: "2.50", Duration: "1h", Regions: []string{"US-CA", "CN-"}},
		{Side: "bid", Market: h100, Count: 1, Price: "2.50", Duration: "1h", MinVRAMGiB: memGiB},
	} {
		o, err := buyer.PlaceOrder(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if o.Status != "filled" || len(o.Fills) != 1 || o.Fills[0].Price != "2.40" {
			t.Errorf("bid %+v = %+v, want filled at 2.40", req, o)
		}
	}
	waitBookOn(t, ctx, "two trades and the constrained bids still resting", all, func(b api.BookView) bool {
		return depth(b.Bids) == 2 && depth(b.Asks) == 2 && b.Spot == "2.40"
	})
	for _, id := range []string{region.ID, vram.ID} {
		if o, err := buyer.Order(ctx, id); err != nil || o.Status != "resting" || len(o.Fills) != 0 {
			t.Errorf("constrained bid after the trades = %+v, %v; want resting without fills", o, err)
		}
	}
	if o, err := provider.Order(ctx, ask.ID); err != nil || o.Remaining != 2 || len(o.Fills) != 2 {
		t.Errorf("ask after the trades = %+v, %v; want 2 left after 2 fills", o, err)
	}
}

// TestMarketSpotMovesOnlyWithFills: two providers ask at different prices;
// two trades follow. Spot is the last trade's price and the index their
// provider-weighted average on every node; resting orders placed later,
// even inside the spread, move neither.
func TestMarketSpotMovesOnlyWithFills(t *testing.T) {
	net := startNet(t, 5, 2)
	ctx := marketCtx(t)
	p0, p4 := net.Providers[0], net.Providers[4]
	if devnet.MarketOf(net.Machines[0].Model) != h100 || devnet.MarketOf(net.Machines[4].Model) != h100 {
		t.Fatalf("devnet machines 0 and 4 are %+v and %+v, want two H100 providers", net.Machines[0], net.Machines[4])
	}
	buyer, watcher := net.Buyers[0], net.Buyers[1]
	all := net.Nodes()

	// Resting orders alone: no spot, no index.
	if _, err := p0.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: h100, Count: 2, Price: "2.60"}); err != nil {
		t.Fatal(err)
	}
	if _, err := p4.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: h100, Count: 2, Price: "2.40"}); err != nil {
		t.Fatal(err)
	}
	waitBookOn(t, ctx, "both asks and no spot", all, func(b api.BookView) bool {
		return depth(b.Asks) == 4 && len(b.Asks) == 2 && b.Spot == "" && b.Index == ""
	})

	first, err := buyer.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: h100, Count: 2, Price: "2.50", Duration: "1h", IOC: true})
	if err != nil {
		t.Fatal(err)
	}
	if first.Status != "filled" || len(first.Fills) != 1 || first.Fills[0].Price != "2.40" || first.Fills[0].Provider != p4.PeerID().String() {
		t.Fatalf("first bid = %+v, want filled at 2.40 by provider 4", first)
	}
	waitBookOn(t, ctx, "spot 2.40", all, func(b api.BookView) bool {
		return b.Spot == "2.40" && b.Index == "2.40" && depth(b.Asks) == 2
	})

	second, err := buyer.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: h100, Count: 2, Price: "2.70", Duration: "1h", IOC: true})
	if err != nil {
		t.Fatal(err)
	}
	if second.Status != "filled" || len(second.Fills) != 1 || second.Fills[0].Price != "2.60" || second.Fills[0].Provider != p0.PeerID().String() {
		t.Fatalf("second bid = %+v, want filled at 2.60 by provider 0", second)
	}
	waitBookOn(t, ctx, "spot 2.60, index 2.50", all, func(b api.BookView) bool {
		return b.Spot == "2.60" && b.Index == "2.50" && len(b.Asks) == 0
	})
	waitTradesAgree(t, ctx, all, 2)

	// Resting orders on both sides, one inside the old spread: no fill, so
	// spot and index stay.
	if _, err := watcher.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: h100, Count: 1, Price: "2.55", Duration: "1h"}); err != nil {
		t.Fatal(err)
	}
	if _, err := p0.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: h100, Count: 1, Price: "2.90"}); err != nil {
		t.Fatal(err)
	}
	waitBookOn(t, ctx, "resting orders without a spot change", all, func(b api.BookView) bool {
		return depth(b.Bids) == 1 && depth(b.Asks) == 1 && b.Spot == "2.60" && b.Index == "2.50"
	})
	for i, n := range all {
		if trades, err := n.Trades(ctx, h100); err != nil || len(trades) != 2 || trades[0].Price != "2.60" {
			t.Errorf("node %d trades = %+v, %v; want the 2 trades, newest at 2.60", i, trades, err)
		}
	}
}
