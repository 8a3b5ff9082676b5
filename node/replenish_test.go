package node_test

import (
	"strings"
	"testing"

	"github.com/suanli/suanli/node/api"
)

// TestReplenishedAsk: a standing ask for 2 GPUs is taken by a lease; once
// the lease ends, the provider puts the 2 GPUs back on the book by itself,
// and a bid resting meanwhile is filled from them.
func TestReplenishedAsk(t *testing.T) {
	provider, buyer := startLeaseNet(t)
	ctx := marketCtx(t)
	if _, err := provider.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: h100, Count: 1, Price: "1", Duration: "1m", Replenish: true}); err == nil ||
		!strings.Contains(err.Error(), "asks only") {
		t.Errorf("replenished bid = %v, want refused", err)
	}
	ask, err := provider.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: h100, Count: 2, Price: "2.40", MinDuration: "1s", Replenish: true})
	if err != nil || ask.Standing != ask.ID {
		t.Fatalf("ask = %+v, %v; want a standing ask named by its own ID", ask, err)
	}
	waitFor(t, ctx, "the buyer to see the ask", func() (bool, string) {
		b, err := buyer.Book(ctx, h100, "USD")
		return err == nil && depth(b.Asks) == 2, sprint(b, err)
	})
	first, err := buyer.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: h100, Count: 2, Price: "2.50", Duration: "3s", IOC: true})
	if err != nil || len(first.Fills) != 1 {
		t.Fatalf("first bid = %+v, %v; want one fill", first, err)
	}
	// Nothing is free on the ask now, so a second bid rests.
	second, err := buyer.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: h100, Count: 2, Price: "2.50", Duration: "3s"})
	if err != nil || len(second.Fills) != 0 || second.Status != "resting" {
		t.Fatalf("second bid = %+v, %v; want it resting", second, err)
	}
	waitLeaseClosed(t, ctx, provider, first.Fills[0].Lease)
	var filled api.OrderView
	waitFor(t, ctx, "the re-listed GPUs to fill the resting bid", func() (bool, string) {
		filled, err = buyer.Order(ctx, second.ID)
		return err == nil && len(filled.Fills) == 1, sprint(filled, err)
	})
	if filled.Fills[0].Lease == first.Fills[0].Lease {
		t.Fatalf("second bid filled by the first lease")
	}
	// The provider took the resting bid (or the buyer took the new ask):
	// either way both sides hold the lease, the provider once the accept
	// is back.
	var lease api.LeaseView
	waitFor(t, ctx, "the provider to hold the second lease", func() (bool, string) {
		lease, err = provider.Lease(ctx, filled.Fills[0].Lease)
		return err == nil, sprint(lease, err)
	})
	if lease.State == "closed" && lease.Reason != "completed" {
		t.Fatalf("second lease = %+v", lease)
	}
	// The re-listing is an order of the standing ask (once the provider's
	// placing it returns: the buyer may see the fill before).
	waitFor(t, ctx, "the re-listed ask marked as the standing ask's", func() (bool, string) {
		orders, err := provider.Orders(ctx)
		if err != nil {
			return false, err.Error()
		}
		relisted := false
		for _, o := range orders {
			relisted = relisted || o.Standing == ask.ID && o.ID != ask.ID
		}
		st := provider.StandingAsks()
		return relisted && len(st) == 1 && st[0].ID == ask.ID && len(st[0].Orders) >= 2, sprint(orders, st)
	})
}

// TestReplenishedAskExpiry: a standing ask whose order expires unfilled is
// placed again, so its GPUs stay on the book; cancelling it ends it.
func TestReplenishedAskExpiry(t *testing.T) {
	provider, buyer := startLeaseNet(t)
	ctx := marketCtx(t)
	ask, err := provider.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: h100, Count: 2, Price: "2.40", Expires: "2s", Replenish: true})
	if err != nil {
		t.Fatal(err)
	}
	var next api.OrderView
	waitFor(t, ctx, "the expired ask placed again", func() (bool, string) {
		st := provider.StandingAsks()
		if len(st) != 1 || len(st[0].Orders) < 2 {
			return false, sprint(st)
		}
		next, err = provider.Order(ctx, st[0].Orders[len(st[0].Orders)-1])
		return err == nil && next.Status == "resting" && next.Remaining == 2 && next.Expires.After(ask.Expires), sprint(st, next, err)
	})
	waitFor(t, ctx, "the buyer to see the new ask", func() (bool, string) {
		b, err := buyer.Book(ctx, h100, "USD")
		return err == nil && depth(b.Asks) == 2, sprint(b, err)
	})
	if _, err := provider.CancelOrder(ctx, next.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the standing ask to end with its cancelled order", func() (bool, string) {
		st := provider.StandingAsks()
		return len(st) == 0, sprint(st)
	})
}
