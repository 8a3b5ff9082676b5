package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
)

const h100 = "nvidia-h100-sxm5-80gb"

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() (bool, string)) {
	t.Helper()
	for {
		ok, state := cond()
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s; last: %s", what, state)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestTrade: a provider asks, a buyer bids through it; one trade happens,
// seen with the same price by the provider, the buyer and a third node
// that only watches, whose spot price moves to the trade price.
func TestTrade(t *testing.T) {
	net := startNet(t, 1, 2)
	provider, buyer, watcher := net.Providers[0], net.Buyers[0], net.Buyers[1]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	if _, err := watcher.Book(ctx, h100, "USD"); err != nil {
		t.Fatal(err)
	}
	ask, err := provider.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: h100, Count: 4, Price: "2.40"})
	if err != nil {
		t.Fatal(err)
	}
	if ask.Status != "resting" || ask.Remaining != 4 {
		t.Fatalf("ask = %+v, want resting with 4", ask)
	}
	waitFor(t, ctx, "the buyer to see the ask", func() (bool, string) {
		b, err := buyer.Book(ctx, h100, "USD")
		return err == nil && len(b.Asks) == 1 && b.Asks[0].Count == 4, sprint(b, err)
	})
	bid, err := buyer.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: h100, Count: 2, Price: "2.50", Duration: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	if bid.Status != "filled" || len(bid.Fills) != 1 {
		t.Fatalf("bid = %+v, want filled by one trade", bid)
	}
	tr := bid.Fills[0]
	if tr.Price != "2.40" || tr.Count != 2 || tr.Provider != provider.PeerID().String() || tr.Buyer != buyer.PeerID().String() || len(tr.GPUs) != 2 || tr.Lease == "" {
		t.Fatalf("trade = %+v, want 2 GPUs at 2.40 (the ask's price) between the two with a lease", tr)
	}
	for _, n := range []*node.Node{provider, buyer, watcher} {
		waitFor(t, ctx, "every node to see the trade: "+n.Repo(), func() (bool, string) {
			b, err := n.Book(ctx, h100, "USD")
			trades, terr := n.Trades(ctx, h100)
			ok := err == nil && terr == nil && b.Spot == "2.40" && len(trades) == 1 && trades[0].ID == tr.ID &&
				len(b.Asks) == 1 && b.Asks[0].Count == 2 && len(b.Bids) == 0
			return ok, sprint(b, trades, err, terr)
		})
	}
	got, err := provider.Order(ctx, ask.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Remaining != 2 || len(got.Fills) != 1 || got.Fills[0].Lease != tr.Lease {
		t.Errorf("provider's ask after the trade = %+v, want 2 left and the same lease", got)
	}
}
