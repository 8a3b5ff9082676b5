package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/suanli/suanli/node/api"
)

// TestDaemonTrade is the order-book issue's "Done when", with real daemon
// processes: `ask` on a provider and a crossing `bid --wait` on a buyer make
// one trade (followed by --wait through its short lease), seen in `trades` and in `book --json` (spot = the trade price)
// on both and on a third daemon that only watches.
func TestDaemonTrade(t *testing.T) {
	t.Parallel()
	repoP, repoB, repoW := t.TempDir(), t.TempDir(), t.TempDir()
	startDaemon(t, repoP, "--gpu-sim", "dgxh100", "--region", "CN-GZ", "--price", "2.49", "--billing-interval", "1s")
	stdout, _ := wantExit(t, []string{"--repo", repoP, "id", "--json"}, 0)
	_, addrs := idJSON(t, stdout)
	var boot string
	for _, a := range addrs {
		if strings.Contains(a, "/tcp/") {
			boot = a
		}
	}
	startDaemon(t, repoB, "--no-gpu", "--bootstrap", boot)
	startDaemon(t, repoW, "--no-gpu", "--bootstrap", boot)

	// The watcher looks at the market before anything happens.
	wantExit(t, []string{"--repo", repoW, "book", h100Market}, 0)
	// The provider asks once its offer is published (an ask needs it).
	poll(t, "the provider's ask", func() (bool, string) {
		code, out, errOut := runCLI(t, "--repo", repoP, "ask", "--gpu", h100Market, "--count", "4", "--price", "2.40", "--min-duration", "1s", "--json")
		return code == 0, out + errOut
	})
	poll(t, "the buyer to see the ask", func() (bool, string) {
		_, out, _ := runCLI(t, "--repo", repoB, "book", h100Market, "--json")
		return strings.Contains(out, `"price": "2.40"`), out
	})
	out, _ := wantExit(t, []string{"--repo", repoB, "bid", "--gpu", h100Market, "--count", "2", "--price", "2.50", "--duration", "3s", "--wait"}, 0)
	for _, want := range []string{"matched with provider", "2 GPUs at 2.40 USD/GPU-h", "lease "} {
		if !strings.Contains(out, want) {
			t.Errorf("bid --wait output lacks %q:\n%s", want, out)
		}
	}

	for _, repo := range []string{repoP, repoB, repoW} {
		poll(t, "the trade on "+repo, func() (bool, string) {
			_, tout, _ := runCLI(t, "--repo", repo, "trades", h100Market, "--json")
			var trades []map[string]any
			if json.Unmarshal([]byte(tout), &trades) != nil || len(trades) != 1 {
				return false, tout
			}
			tr := trades[0]
			if tr["price"] != "2.40" || tr["count"] != float64(2) || tr["buyer"] == "" || tr["provider"] == "" || tr["lease"] == "" {
				return false, tout
			}
			_, bout, _ := runCLI(t, "--repo", repo, "book", h100Market, "--json")
			var book map[string]any
			if json.Unmarshal([]byte(bout), &book) != nil {
				return false, bout
			}
			asks, _ := book["asks"].([]any)
			bids, _ := book["bids"].([]any)
			return book["spot"] == "2.40" && book["index"] == "2.40" && len(asks) == 1 && bids != nil && len(bids) == 0, bout
		})
	}
}

// TestDevnet runs the README's main command end to end, smaller: discovery,
// the order book, leases with receipts, and settlements both sides agree on.
func TestDevnet(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a whole devnet")
	}
	t.Parallel()
	out, _ := wantExit(t, []string{"devnet", "--providers", "4", "--buyers", "2"}, 0)
	for _, want := range []string{"every buyer found every offer", "trade(s) at", "receipts", "(provider's ledger agrees)", "both ledgers now owe 0 USD", "devnet ok"} {
		if !strings.Contains(out, want) {
			t.Errorf("devnet output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "DIFFERS") || strings.Contains(out, " 0 trades") || strings.Contains(out, "NOT SETTLED") {
		t.Errorf("devnet traded nothing or its ledgers disagree:\n%s", out)
	}
}

// TestDaemonBidRestsWhy: a bid for 10 s against an ask with a 1 m minimum
// rests, and says so and why, in words and in --json; an all-or-none bid
// larger than any single ask rests too rather than filling in parts.
func TestDaemonBidRestsWhy(t *testing.T) {
	t.Parallel()
	k := startPair(t) // the provider rests an ask of 2 GPUs at 2.40 (minimum 1 s)
	poll(t, "a second ask with a 1 m minimum", func() (bool, string) {
		code, out, errOut := runCLI(t, "--repo", k.repoP, "ask", "--gpu", h100Market, "--count", "2", "--price", "2.30", "--min-duration", "1m")
		return code == 0, out + errOut
	})
	poll(t, "the buyer to see both asks", func() (bool, string) {
		_, out, _ := runCLI(t, "--repo", k.repoB, "book", h100Market, "--json")
		return strings.Contains(out, `"price": "2.30"`) && strings.Contains(out, `"price": "2.40"`), out
	})
	out, _ := wantExit(t, []string{"--repo", k.repoB, "bid", "--gpu", h100Market, "--count", "4", "--price", "2.50", "--duration", "10s", "--all-or-none"}, 0)
	for _, want := range []string{"resting", "min-duration: the ask leases at least 1m0s; the bid wants 10s", "all-or-none: no single order has all 4 GPUs"} {
		if !strings.Contains(out, want) {
			t.Errorf("bid output lacks %q:\n%s", want, out)
		}
	}
	out, _ = wantExit(t, []string{"--repo", k.repoB, "--json", "bid", "--gpu", h100Market, "--count", "2", "--price", "2.35", "--duration", "10s"}, 0)
	var o api.OrderView
	if err := json.Unmarshal([]byte(out), &o); err != nil {
		t.Fatal(err)
	}
	reasons := map[string]int{}
	for _, p := range o.PassedOver {
		reasons[p.Reason] += p.Orders
	}
	if o.Status != "resting" || reasons["min-duration"] != 1 {
		t.Errorf("bid --json = %s; want resting with one ask passed over for min-duration", out)
	}
	// A reserved ask without --price takes the offer's on-demand price with
	// the discount its --min-duration earns, as README says (this offer
	// states no discounts: 2.49).
	out, _ = wantExit(t, []string{"--repo", k.repoP, "--json", "ask", "--gpu", h100Market, "--count", "1", "--type", "reserved",
		"--min-duration", "1h", "--start", "+1h"}, 0)
	var r api.OrderView
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.LeaseType != "reserved" || r.Price != "2.49" {
		t.Errorf("reserved ask without --price = %s (%v); want the offer's price 2.49", out, err)
	}
}

// TestDaemonPreemption is the lease-products issue's "done when" for spot:
// daemons billing every second; a spot lease on all 8 GPUs is preempted by
// an on-demand bid with a 5 s notice, and both sides record preempted with
// identical receipt chains.
func TestDaemonPreemption(t *testing.T) {
	t.Parallel()
	k := startPair(t, "--preemption-notice", "5s")
	repoO := t.TempDir()
	startDaemon(t, repoO, "--no-gpu", "--bootstrap", k.addrP, "--billing-interval", "1s")
	// Spot asks and bids until all 8 GPUs are in spot leases.
	poll(t, "all 8 GPUs in spot leases", func() (bool, string) {
		_, out, _ := runCLI(t, "--repo", k.repoP, "leases", "--json")
		var ls []api.LeaseView
		json.Unmarshal([]byte(out), &ls)
		held := 0
		for _, l := range ls {
			if l.State == "running" {
				held += len(l.GPUs)
			}
		}
		if held == 8 {
			return true, out
		}
		n := fmt.Sprint(8 - held)
		runCLI(t, "--repo", k.repoP, "ask", "--gpu", h100Market, "--count", n, "--price", "2.40", "--min-duration", "1s")
		runCLI(t, "--repo", k.repoB, "bid", "--gpu", h100Market, "--count", n, "--price", "2.50", "--duration", "60s", "--ioc")
		return false, out
	})
	poll(t, "an on-demand ask", func() (bool, string) {
		code, out, errOut := runCLI(t, "--repo", k.repoP, "ask", "--gpu", h100Market, "--count", "2", "--price", "2.90", "--type", "on-demand", "--min-duration", "1s")
		return code == 0, out + errOut
	})
	poll(t, "the on-demand bid to fill", func() (bool, string) {
		code, out, errOut := runCLI(t, "--repo", repoO, "bid", "--gpu", h100Market, "--count", "2", "--price", "3.00", "--type", "on-demand", "--duration", "5s", "--ioc")
		return code == 0 && strings.Contains(out, "filled"), out + errOut
	})
	var l api.LeaseView
	poll(t, "the spot buyer to see a notice", func() (bool, string) {
		code, out, errOut := runCLI(t, "--repo", k.repoB, "leases", "--json")
		var ls []api.LeaseView
		if code != 0 || json.Unmarshal([]byte(out), &ls) != nil {
			return false, out + errOut
		}
		for _, x := range ls {
			if x.PreemptAt != nil {
				l = x
				return true, out
			}
		}
		return false, out
	})
	k.lease = l.ID
	lp := k.waitClosed(t, k.repoP)
	lb := k.waitClosed(t, k.repoB)
	if lp.Reason != "preempted" || lb.Reason != "preempted" {
		t.Errorf("reasons = %q (provider), %q (buyer); want preempted", lp.Reason, lb.Reason)
	}
	if lb.ClosedAt == nil || !lb.ClosedAt.Equal(*l.PreemptAt) {
		t.Errorf("closed at %v, want the notice's end %v", lb.ClosedAt, l.PreemptAt)
	}
	chain := k.chainsAgree(t)
	if last := chain[len(chain)-1]; !last.WindowEnd.Equal(*l.PreemptAt) {
		t.Errorf("billed until %s, want the notice's end %s", last.WindowEnd, l.PreemptAt)
	}
}
