package node_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/devnet"
)

// Leases across real nodes on loopback, billed every second: trade →
// lease → receipts → close, settled the same on both sides.

func startLeaseNet(t testing.TB, opts ...node.Option) (provider, buyer *node.Node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts = append([]node.Option{node.WithBillingInterval(time.Second)}, opts...)
	net, err := devnet.Start(ctx, devnet.Config{Providers: 1, Buyers: 1, Dir: t.TempDir(), Logger: quiet, NodeOptions: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { net.Close() })
	if err := net.WaitPublished(ctx); err != nil {
		t.Fatal(err)
	}
	return net.Providers[0], net.Buyers[0]
}

// trade makes provider and buyer trade 2 GPUs for d and returns the lease;
// exec is the bid's command for the process executor.
func trade(t *testing.T, ctx context.Context, provider, buyer *node.Node, d string, exec ...string) string {
	t.Helper()
	return tradeWorkload(t, ctx, provider, buyer, d, api.OrderRequest{Exec: exec})
}

func waitLeaseClosed(t *testing.T, ctx context.Context, n *node.Node, id string) api.LeaseView {
	t.Helper()
	var v api.LeaseView
	waitFor(t, ctx, "lease "+id+" to close on "+n.Repo(), func() (bool, string) {
		var err error
		v, err = n.Lease(ctx, id)
		return err == nil && v.State == "closed", sprint(v, err)
	})
	return v
}

func TestLeaseReceiptsSettle(t *testing.T) {
	provider, buyer := startLeaseNet(t)
	ctx := marketCtx(t)
	id := trade(t, ctx, provider, buyer, "10s")

	for _, n := range []*node.Node{provider, buyer} {
		v, err := n.Lease(ctx, id)
		if err != nil || len(v.GPUs) != 2 || v.Interval != "1s" {
			t.Fatalf("Lease(%s) = %+v, %v; want 2 GPUs billed every 1s", id, v, err)
		}
	}
	pv := waitLeaseClosed(t, ctx, provider, id)
	bv := waitLeaseClosed(t, ctx, buyer, id)
	if pv.Reason != "completed" || bv.Reason != "completed" {
		t.Fatalf("reasons = %q (provider), %q (buyer); want completed", pv.Reason, bv.Reason)
	}
	// Every receipt countersigned on both sides, the chains byte-identical.
	var chains [2][]byte
	for i, n := range []*node.Node{provider, buyer} {
		waitFor(t, ctx, "the whole chain countersigned on "+n.Repo(), func() (bool, string) {
			rs, err := n.Receipts(ctx, id)
			if err != nil || len(rs) < 5 {
				return false, sprint(rs, err)
			}
			last := rs[len(rs)-1]
			for _, r := range rs {
				if r.ProviderSignature != "valid" || r.BuyerSignature != "valid" {
					return false, sprint(rs)
				}
			}
			return last.WindowEnd.Equal(pv.End), sprint(rs)
		})
		rep, err := n.VerifyReceipts(ctx, id)
		if err != nil || !rep.Valid {
			t.Fatalf("VerifyReceipts on %s = %+v, %v", n.Repo(), rep, err)
		}
		if chains[i], err = n.ExportReceipts(ctx, id); err != nil {
			t.Fatal(err)
		}
		rep, err = node.VerifyExport(chains[i])
		if err != nil || !rep.Valid {
			t.Fatalf("VerifyExport = %+v, %v", rep, err)
		}
	}
	if !bytes.Equal(chains[0], chains[1]) {
		t.Fatalf("stored chains differ: provider %d bytes, buyer %d bytes", len(chains[0]), len(chains[1]))
	}
	// Both settlements: price × 2 GPUs × the 10 s billed.
	want, err := market.Charge(pv.PriceMicros, 2*10_000)
	if err != nil {
		t.Fatal(err)
	}
	for _, side := range []struct {
		n    *node.Node
		peer string
		sign int64
	}{{provider, buyer.PeerID().String(), 1}, {buyer, provider.PeerID().String(), -1}} {
		st, err := side.n.Settle(ctx, side.peer)
		if err != nil || len(st) != 1 || len(st[0].Leases) != 1 || len(st[0].Totals) != 1 {
			t.Fatalf("Settle on %s = %+v, %v", side.n.Repo(), st, err)
		}
		if got := st[0].Leases[0].AmountMicros; got != want {
			t.Errorf("settled on %s = %d micros, want %d", side.n.Repo(), got, want)
		}
		if got := st[0].Totals[0].OwedMicros; got != side.sign*want {
			t.Errorf("owed on %s = %d micros, want %d", side.n.Repo(), got, side.sign*want)
		}
	}
	// A payment acknowledged by the provider reaches both ledgers.
	pay, err := provider.AckPayment(ctx, api.PaymentRequest{Peer: buyer.PeerID().String(), Amount: "0.01"})
	if err != nil || pay.Delivered == nil || !*pay.Delivered {
		t.Fatalf("AckPayment = %+v, %v", pay, err)
	}
	for _, n := range []*node.Node{provider, buyer} {
		st, err := n.Settle(ctx, "")
		if err != nil || len(st) != 1 || len(st[0].Payments) != 1 || st[0].Leases[0].Paid != "0.01" {
			t.Fatalf("Settle after payment on %s = %+v, %v", n.Repo(), st, err)
		}
	}
}

func TestLeaseUnpaid(t *testing.T) {
	provider, buyer := startLeaseNet(t, node.WithWithheldCountersigns())
	ctx := marketCtx(t)
	id := trade(t, ctx, provider, buyer, "60s")
	pv := waitLeaseClosed(t, ctx, provider, id)
	if pv.Reason != "unpaid" {
		t.Fatalf("provider's lease = %+v, want closed unpaid", pv)
	}
	// Grace 3 s after the start (no countersignature ever): well before
	// the lease's end, allowing for a loaded machine.
	if held := pv.ClosedAt.Sub(pv.Start); held < 3*time.Second || held > 15*time.Second {
		t.Errorf("closed unpaid after %s, want just past the 3 s grace", held)
	}
	bv := waitLeaseClosed(t, ctx, buyer, id)
	if bv.Reason != "unpaid" {
		t.Errorf("buyer's lease = %+v, want closed unpaid by the provider's notice", bv)
	}
	st, err := provider.Settle(ctx, "")
	if err != nil || len(st) != 0 {
		t.Errorf("Settle = %+v, %v; want nothing countersigned", st, err)
	}
}

func TestLeaseProcessExecutor(t *testing.T) {
	provider, buyer := startLeaseNet(t, node.WithExecutors("reserve", "process"))
	ctx := marketCtx(t)
	start := time.Now()
	id := trade(t, ctx, provider, buyer, "4s", "sh", "-c", "echo $CUDA_VISIBLE_DEVICES $NVIDIA_VISIBLE_DEVICES; sleep 30")
	lv, err := buyer.Lease(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	gpus := strings.Join(lv.GPUs, ",")
	var logs api.LogsView
	waitFor(t, ctx, "the command's output on the buyer", func() (bool, string) {
		logs, err = buyer.Logs(ctx, id, 0)
		return err == nil && len(logs.Chunks) > 0, sprint(logs, err)
	})
	if got := strings.TrimSpace(logs.Chunks[0].Data); got != gpus+" "+gpus {
		t.Errorf("command saw %q, want the leased GPUs %q twice", got, gpus)
	}
	pv := waitLeaseClosed(t, ctx, provider, id)
	if pv.Executor != "process" || pv.Exit == nil || pv.Exit.Signal == "" {
		t.Errorf("provider's lease = %+v, want the process killed by a signal at the end", pv)
	}
	waitFor(t, ctx, "the exit status on the buyer", func() (bool, string) {
		logs, err = buyer.Logs(ctx, id, 0)
		return err == nil && logs.Exit != nil, sprint(logs, err)
	})
	if took := time.Since(start); took > 25*time.Second {
		t.Errorf("the command ran %s: not stopped at the lease's end", took)
	}
}

// TestLeasePerMinuteBilling: a provider charging per minute bills a 3 s
// lease of 2 GPUs as 2 GPU-minutes, the amount both sides settle.
func TestLeasePerMinuteBilling(t *testing.T) {
	provider, buyer := startLeaseNet(t, node.WithBillingIncrement(time.Minute))
	ctx := marketCtx(t)
	id := trade(t, ctx, provider, buyer, "3s")
	waitLeaseClosed(t, ctx, provider, id)
	waitLeaseClosed(t, ctx, buyer, id)
	want := int64(2_400_000 * 2 / 60) // 2.40 per GPU-hour × 2 GPU-minutes
	for _, n := range []*node.Node{provider, buyer} {
		waitFor(t, ctx, "the per-minute settlement on "+n.Repo(), func() (bool, string) {
			st, err := n.Settle(ctx, "")
			return err == nil && len(st) == 1 && len(st[0].Leases) == 1 && st[0].Leases[0].AmountMicros == want, sprint(st, err)
		})
	}
	rs, err := buyer.Receipts(ctx, id)
	if err != nil || len(rs) < 2 || rs[0].AmountMicros != want || rs[1].AmountMicros != 0 {
		t.Errorf("receipts = %+v, %v; want the minute charged by the first, nothing after", rs, err)
	}
}

// TestPriceSchedule: a provider pricing by time of day says so in its
// offer (the price now, the next and when), and its leases carry the
// schedule, so both sides bill and verify each window at its price.
func TestPriceSchedule(t *testing.T) {
	// Half price until 12:00 UTC, full after: whatever the time now, the
	// offer shows a price now and a change within a day.
	ws, err := market.ParseSchedule("00:00-12:00=-50%,12:00-24:00=0%")
	if err != nil {
		t.Fatal(err)
	}
	provider, buyer := startLeaseNet(t, node.WithPriceSchedule(ws, 0))
	ctx := marketCtx(t)
	var o api.OfferView
	waitFor(t, ctx, "the scheduled offer", func() (bool, string) {
		os, err := buyer.Offers(ctx, api.OfferQuery{})
		if err != nil || len(os) != 1 {
			return false, sprint(os, err)
		}
		o = os[0]
		return o.PriceNow != "" && o.NextPriceAt != nil, sprint(o)
	})
	full, half := o.Price, market.FormatMicros(market.ScheduledPrice(2_490_000, ws, 0, time.Date(2026, 1, 1, 6, 0, 0, 0, time.UTC)), "USD")
	if !(o.PriceNow == half && o.NextPrice == full) && !(o.PriceNow == full && o.NextPrice == half) {
		t.Errorf("offer prices now %s, next %s; want %s and %s in some order", o.PriceNow, o.NextPrice, half, full)
	}
	id := trade(t, ctx, provider, buyer, "3s")
	waitLeaseClosed(t, ctx, provider, id)
	waitLeaseClosed(t, ctx, buyer, id)
	for _, n := range []*node.Node{provider, buyer} {
		rep, err := n.VerifyReceipts(ctx, id)
		if err != nil || !rep.Valid {
			t.Errorf("VerifyReceipts on %s = %+v, %v", n.Repo(), rep, err)
		}
	}
	// Both ledgers agree on the scheduled amount.
	waitFor(t, ctx, "the settlements to agree", func() (bool, string) {
		a, err1 := provider.Settle(ctx, "")
		b, err2 := buyer.Settle(ctx, "")
		return err1 == nil && err2 == nil && len(a) == 1 && len(b) == 1 && len(a[0].Leases) == 1 && len(b[0].Leases) == 1 &&
			a[0].Leases[0].AmountMicros == b[0].Leases[0].AmountMicros && a[0].Leases[0].AmountMicros > 0, sprint(a, b)
	})
}
