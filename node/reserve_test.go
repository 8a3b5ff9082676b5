package node_test

import (
	"strings"
	"testing"
	"time"

	"github.com/suanli/suanli/node/api"
)

// TestReservedForwardBlock: a reserved block of 10 s starting 5 s from now
// is traded now at the offer's derived reserved price and starts on time:
// its lease's start, its first receipt's window and its close follow the
// block. The calendar refuses an overlapping block and takes a later one;
// the buyer cannot close reserved time early; a start in the past or on
// spot time is refused.
func TestReservedForwardBlock(t *testing.T) {
	provider, buyer := startLeaseNet(t)
	ctx := marketCtx(t)
	ask := func() {
		t.Helper()
		o, err := provider.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: h100, Count: 8, LeaseType: "reserved", MinDuration: "1s", MaxDuration: "1h"})
		if err != nil || o.Price != "2.49" {
			t.Fatalf("reserved ask = %+v, %v; want the offer's price (no discount for 1 s)", o, err)
		}
		waitFor(t, ctx, "the buyer to see the reserved ask", func() (bool, string) {
			b, err := buyer.Book(ctx, h100, "USD")
			return err == nil && len(b.Asks) == 1, sprint(b, err)
		})
	}
	bid := func(start, d string) api.OrderView {
		t.Helper()
		o, err := buyer.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: h100, Count: 8, Price: "3.00", LeaseType: "reserved",
			Start: start, Duration: d, IOC: true})
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	ask()
	before := time.Now()
	a := bid("+5s", "10s")
	if len(a.Fills) != 1 {
		t.Fatalf("block bid = %+v, want it filled", a)
	}
	id := a.Fills[0].Lease
	lv, err := buyer.Lease(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if d := lv.Start.Sub(before); d < 4*time.Second || d > 7*time.Second || lv.End.Sub(lv.Start) != 10*time.Second {
		t.Errorf("lease %s – %s, traded at %s: want the block 5 s ahead, 10 s long", lv.Start, lv.End, before)
	}
	if _, err := buyer.CloseLease(ctx, id); err == nil || !strings.Contains(err.Error(), "reserved") {
		t.Errorf("buyer's early close of reserved time = %v, want refused", err)
	}

	// The calendar: an overlapping block is refused, a later one taken.
	ask()
	if o := bid("+8s", "10s"); len(o.Fills) != 0 {
		t.Errorf("overlapping block = %+v, want no fill", o)
	}
	if o := bid("+30s", "10s"); len(o.Fills) != 1 {
		t.Errorf("later block = %+v, want it filled", o)
	}
	for _, bad := range []api.OrderRequest{
		{Side: "bid", Market: h100, Count: 1, Price: "3", LeaseType: "reserved", Start: "2020-01-01T00:00:00Z", Duration: "10s"},
		{Side: "bid", Market: h100, Count: 1, Price: "3", LeaseType: "spot", Start: "+5s", Duration: "10s"},
		{Side: "bid", Market: h100, Count: 1, Price: "3", LeaseType: "reserved", Start: "+9000h", Duration: "10s"},
	} {
		if _, err := buyer.PlaceOrder(ctx, bad); err == nil {
			t.Errorf("PlaceOrder(%+v) = nil error, want refused", bad)
		}
	}

	// A resting bid for a block ahead shows apart in the book.
	if _, err := buyer.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: h100, Count: 2, Price: "1.00", LeaseType: "reserved",
		Start: "+2m", Duration: "1m"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the block bid in the provider's book", func() (bool, string) {
		b, err := provider.Book(ctx, h100, "USD")
		return err == nil && len(b.Blocks) == 1 && b.Blocks[0].Side == "bid" && b.Blocks[0].Duration == "1m0s", sprint(b, err)
	})

	pv := waitLeaseClosed(t, ctx, provider, id)
	bv := waitLeaseClosed(t, ctx, buyer, id)
	if pv.Reason != "completed" || bv.Reason != "completed" {
		t.Errorf("reasons = %q, %q; want completed", pv.Reason, bv.Reason)
	}
	// The buyer closes on its own clock at the block's end; the last
	// window's receipt may come after.
	waitFor(t, ctx, "receipts from the block's start to its end", func() (bool, string) {
		rs, err := buyer.Receipts(ctx, id)
		return err == nil && len(rs) > 0 && rs[0].WindowStart.Equal(lv.Start) && rs[len(rs)-1].WindowEnd.Equal(lv.End), sprint(rs, err)
	})
}
