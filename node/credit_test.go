package node_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
)

// tradeAt makes the provider ask and the buyer take count GPUs at price
// for d; it returns the buyer's bid (IOC), filled or not.
func tradeAt(t *testing.T, ctx context.Context, provider, buyer *node.Node, count uint32, price, d string) api.OrderView {
	t.Helper()
	ask, err := provider.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: h100, Count: count, Price: price, MinDuration: "1s"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the buyer to see the ask", func() (bool, string) {
		b, err := buyer.Book(ctx, h100, "USD")
		return err == nil && depth(b.Asks) == int(count), sprint(b, err, ask.ID)
	})
	bid, err := buyer.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: h100, Count: count, Price: price, Duration: d, IOC: true})
	if err != nil {
		t.Fatal(err)
	}
	return bid
}

// TestCreditLimit: a provider gives each buyer 0.06 USD of credit. Two GPUs
// at 36 USD per GPU-hour, billed every second, cost 0.02 a window: the
// lease ends unpaid after three windows, at the limit. Then neither side
// can trade with the other: the provider does not take the buyer's bid,
// and refuses the buyer's take with the reason. A payment acknowledged
// beyond what the buyer owes (a prepayment) lets them trade at once, for as
// much more.
func TestCreditLimit(t *testing.T) {
	provider, buyer := startLeaseNet(t, node.WithCreditLimit("0.06", "USD"))
	ctx := marketCtx(t)
	bid := tradeAt(t, ctx, provider, buyer, 2, "36", "60s")
	if len(bid.Fills) != 1 {
		t.Fatalf("first bid = %+v, want one fill", bid)
	}
	id := bid.Fills[0].Lease
	pv := waitLeaseClosed(t, ctx, provider, id)
	if pv.Reason != "unpaid" || !strings.Contains(pv.Note, "credit limit") || pv.Receipts != 3 {
		t.Fatalf("provider's lease = %+v, want closed unpaid at the credit limit after 3 receipts", pv)
	}
	if want := pv.Start.Add(3 * time.Second); !pv.ClosedAt.Equal(want) {
		t.Errorf("closed at %s, want the end of the third window %s", pv.ClosedAt, want)
	}
	bv := waitLeaseClosed(t, ctx, buyer, id)
	if bv.Reason != "unpaid" {
		t.Errorf("buyer's lease = %+v, want closed unpaid by the provider's notice", bv)
	}
	waitFor(t, ctx, "all three receipts countersigned", func() (bool, string) {
		v, err := provider.Lease(ctx, id)
		return err == nil && v.Countersigned == 3 && v.Cumulative == "0.06", sprint(v, err)
	})
	credit := func(want string) {
		t.Helper()
		st, err := provider.Settle(ctx, buyer.PeerID().String())
		if err != nil || len(st) != 1 || len(st[0].Credit) != 1 || st[0].Credit[0].Available != want {
			t.Fatalf("Settle = %+v, %v; want credit available %s", st, err, want)
		}
	}
	credit("0.00")

	// Over the limit, the buyer's bid rests; the provider will not take it
	// with a new ask, and refuses the buyer's take of that ask, with the
	// reason.
	rest, err := buyer.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: h100, Count: 2, Price: "36", Duration: "60s"})
	if err != nil || rest.Status != "resting" {
		t.Fatalf("resting bid = %+v, %v", rest, err)
	}
	waitFor(t, ctx, "the provider to see the bid", func() (bool, string) {
		b, err := provider.Book(ctx, h100, "USD")
		return err == nil && depth(b.Bids) == 2, sprint(b, err)
	})
	ask, err := provider.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: h100, Count: 2, Price: "36", MinDuration: "1s"})
	if err != nil || len(ask.Fills) != 0 || !strings.Contains(ask.Error, "credit limit") || ask.Status != "resting" {
		t.Fatalf("ask crossing the bid = %+v, %v; want it resting, not taking the bid over the credit limit", ask, err)
	}
	waitFor(t, ctx, "the buyer's take refused by the provider", func() (bool, string) {
		v, err := buyer.Order(ctx, rest.ID)
		return err == nil && len(v.Fills) == 0 && strings.Contains(v.Error, "maker rejected") &&
			strings.Contains(v.Error, "credit limit") && strings.Contains(v.Error, "0.06 USD unpaid"), sprint(v, err)
	})

	// The buyer pays what it owes and 0.04 ahead: 0.10 of credit; the
	// provider takes the bid at once.
	pay, err := provider.AckPayment(ctx, api.PaymentRequest{Peer: buyer.PeerID().String(), Amount: "0.10", Reference: "prepay"})
	if err != nil || pay.Delivered == nil || !*pay.Delivered {
		t.Fatalf("AckPayment = %+v, %v", pay, err)
	}
	waitFor(t, ctx, "the resting bid filled once credit is freed", func() (bool, string) {
		bid, err = buyer.Order(ctx, rest.ID)
		return err == nil && len(bid.Fills) == 1, sprint(bid, err)
	})
	id = bid.Fills[0].Lease
	pv = waitLeaseClosed(t, ctx, provider, id)
	if pv.Reason != "unpaid" || pv.Receipts != 5 {
		t.Fatalf("second lease = %+v, want closed unpaid after 5 receipts (0.10 of credit)", pv)
	}
	waitFor(t, ctx, "the second lease countersigned", func() (bool, string) {
		v, err := provider.Lease(ctx, id)
		return err == nil && v.Cumulative == "0.10", sprint(v, err)
	})
	st, err := provider.Settle(ctx, buyer.PeerID().String())
	if err != nil || len(st) != 1 || len(st[0].Totals) != 1 {
		t.Fatalf("Settle = %+v, %v", st, err)
	}
	// Both leases' receipts stayed within what the buyer could owe.
	if want, _ := market.ParseMoney("0.06", "USD"); st[0].Totals[0].OwedMicros != want.Micros {
		t.Errorf("owed = %s, want 0.06 (0.16 billed, 0.10 paid)", st[0].Totals[0].Owed)
	}
}

// TestCreditLimitOption: a limit that is not a decimal (or "none") in a
// known currency is refused.
func TestCreditLimitOption(t *testing.T) {
	for _, bad := range []struct{ limit, cur string }{{"", "USD"}, {"ten", "USD"}, {"1", "XXX"}} {
		if err := node.WithCreditLimit(bad.limit, bad.cur)(nil); err == nil {
			t.Errorf("WithCreditLimit(%q, %q) = nil, want an error", bad.limit, bad.cur)
		}
	}
}
