package main

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/suanli/suanli/node/api"
)

// Fault tests with real daemon processes: a daemon killed with SIGKILL in
// the middle of a lease, restarted on the same repo with the same flags,
// and a buyer that goes away for good.

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// killNet is a provider and a buyer daemon on fixed p2p ports, so either can
// be restarted and redialled at the same address.
type killNet struct {
	repoP, repoB   string
	argsP, argsB   []string
	dP, dB         *daemon
	addrP, addrB   string // /ip4/127.0.0.1/tcp/PORT/p2p/ID
	idP, idB       string
	lease          string
	priceMicros    int64
	leaseDurationS int
}

func startKillNet(t *testing.T, duration string) *killNet {
	t.Helper()
	return startKillNetVia(t, "", duration)
}

func startKillNetVia(t *testing.T, relay, duration string) *killNet {
	t.Helper()
	k := startPairVia(t, relay, "--executor", "reserve")
	poll(t, "the bid to fill", func() (bool, string) {
		code, out, errOut := runCLI(t, "--repo", k.repoB, "bid", "--gpu", h100Market, "--count", "2", "--price", "2.50",
			"--duration", duration, "--ioc")
		return code == 0 && strings.Contains(out, "filled"), out + errOut
	})
	l := k.leaseOn(t, k.repoB)
	k.lease, k.priceMicros = l.ID, l.PriceMicros
	return k
}

// startPair starts a provider daemon (a simulated DGX H100 in CN-GZ,
// billing every second, with extra flags) and a buyer daemon on fixed
// ports, and rests an ask of 2 GPUs at 2.40 that the buyer sees.
func startPair(t *testing.T, extra ...string) *killNet {
	return startPairVia(t, "", extra...)
}

// startPairVia is startPair with both daemons bootstrapping off relay (a
// third node) rather than the buyer off the provider; a provider restarted
// with argsP then has no bootstrap peer at all.
func startPairVia(t *testing.T, relay string, extra ...string) *killNet {
	t.Helper()
	k := &killNet{repoP: t.TempDir(), repoB: t.TempDir()}
	portP, portB := freePort(t), freePort(t)
	k.argsP = append([]string{"--gpu-sim", "dgxh100", "--region", "CN-GZ", "--price", "2.49",
		"--billing-interval", "1s", "--listen", fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", portP)}, extra...)
	if relay != "" {
		k.dP = startDaemon(t, k.repoP, append(k.argsP, "--bootstrap", relay)...)
	} else {
		k.dP = startDaemon(t, k.repoP, k.argsP...)
	}
	k.idP = keyID(t, k.repoP, nil)
	k.addrP = fmt.Sprintf("/ip4/127.0.0.1/tcp/%d/p2p/%s", portP, k.idP)
	k.argsB = []string{"--no-gpu", "--bootstrap", cmpOr(relay, k.addrP), "--billing-interval", "1s",
		"--listen", fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", portB)}
	k.dB = startDaemon(t, k.repoB, k.argsB...)
	k.idB = keyID(t, k.repoB, nil)
	k.addrB = fmt.Sprintf("/ip4/127.0.0.1/tcp/%d/p2p/%s", portB, k.idB)
	if relay == "" {
		// On a provider restart it redials the buyer directly.
		k.argsP = append(k.argsP, "--bootstrap", k.addrB)
	}

	poll(t, "the ask to rest", func() (bool, string) {
		code, out, errOut := runCLI(t, "--repo", k.repoP, "ask", "--gpu", h100Market, "--count", "2", "--price", "2.40", "--min-duration", "1s")
		return code == 0, out + errOut
	})
	poll(t, "the buyer to see the ask", func() (bool, string) {
		code, out, errOut := runCLI(t, "--repo", k.repoB, "book", h100Market, "--json")
		var b api.BookView
		return code == 0 && json.Unmarshal([]byte(out), &b) == nil && len(b.Asks) > 0, out + errOut
	})
	return k
}

// leaseOn returns the single lease on repo's daemon.
func (k *killNet) leaseOn(t *testing.T, repo string) api.LeaseView {
	t.Helper()
	var l api.LeaseView
	poll(t, "one lease on "+repo, func() (bool, string) {
		code, out, errOut := runCLI(t, "--repo", repo, "leases", "--json")
		var ls []api.LeaseView
		if code != 0 || json.Unmarshal([]byte(out), &ls) != nil || len(ls) != 1 {
			return false, out + errOut
		}
		l = ls[0]
		return true, out
	})
	return l
}

// waitCountersigned waits until repo's side of the lease has n countersigned receipts.
func (k *killNet) waitCountersigned(t *testing.T, repo string, n uint64) {
	t.Helper()
	poll(t, fmt.Sprintf("%d countersigned receipts on %s", n, repo), func() (bool, string) {
		code, out, errOut := runCLI(t, "--repo", repo, "lease", "show", k.lease, "--json")
		var l api.LeaseView
		if code != 0 || json.Unmarshal([]byte(out), &l) != nil {
			return false, out + errOut
		}
		return l.Countersigned >= n, out
	})
}

// kill9 kills d with SIGKILL and waits for it to be gone.
func kill9(t *testing.T, d *daemon) {
	t.Helper()
	if err := d.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.done:
	case <-time.After(deadline):
		t.Fatalf("daemon on %s did not die after SIGKILL", d.repo)
	}
}

// waitClosed waits for the lease to close on repo and returns its view.
func (k *killNet) waitClosed(t *testing.T, repo string) api.LeaseView {
	t.Helper()
	var l api.LeaseView
	poll(t, "the lease to close on "+repo, func() (bool, string) {
		code, out, errOut := runCLI(t, "--repo", repo, "lease", "show", k.lease, "--json")
		if code != 0 || json.Unmarshal([]byte(out), &l) != nil {
			return false, out + errOut
		}
		return l.State == "closed", out
	})
	return l
}

func receiptsOn(t *testing.T, repo, lease string) ([]api.ReceiptView, string) {
	t.Helper()
	code, out, errOut := runCLI(t, "--repo", repo, "receipts", lease, "--json")
	var rs []api.ReceiptView
	if code != 0 || json.Unmarshal([]byte(out), &rs) != nil {
		return nil, out + errOut
	}
	return rs, out
}

// chainsAgree checks both sides' chains: seqs 1..n contiguous, every
// receipt countersigned and valid on both sides, the same hashes and
// amounts; and `receipts verify` passes on both. It returns the chain.
func (k *killNet) chainsAgree(t *testing.T) []api.ReceiptView {
	t.Helper()
	var chain []api.ReceiptView
	poll(t, "both chains to agree, all countersigned", func() (bool, string) {
		rp, outP := receiptsOn(t, k.repoP, k.lease)
		rb, outB := receiptsOn(t, k.repoB, k.lease)
		msg := "provider:\n" + outP + "\nbuyer:\n" + outB
		if rp == nil || rb == nil || len(rp) != len(rb) || len(rb) == 0 {
			return false, msg
		}
		for i := range rb {
			p, b := rp[i], rb[i]
			if p.Seq != uint64(i+1) || b.Seq != uint64(i+1) || p.Hash != b.Hash || p.AmountMicros != b.AmountMicros ||
				p.CumulativeMicros != b.CumulativeMicros || p.GPUMillis != b.GPUMillis {
				return false, msg
			}
			for _, r := range []api.ReceiptView{p, b} {
				if r.ProviderSignature != "valid" || r.BuyerSignature != "valid" {
					return false, msg
				}
			}
		}
		chain = rb
		return true, msg
	})
	// Cumulative totals add up: nothing lost or counted twice.
	var sum int64
	for _, r := range chain {
		sum += r.AmountMicros
		if r.CumulativeMicros != sum {
			t.Fatalf("receipt %d: cumulative %d, sum of amounts %d", r.Seq, r.CumulativeMicros, sum)
		}
	}
	for _, repo := range []string{k.repoP, k.repoB} {
		wantExit(t, []string{"--repo", repo, "receipts", "verify", k.lease}, 0)
	}
	return chain
}

// settled is repo's settlement amount for the lease.
func (k *killNet) settled(t *testing.T, repo string) int64 {
	t.Helper()
	code, out, errOut := runCLI(t, "--repo", repo, "settle", "--json")
	var st []api.SettlementView
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || len(st) != 1 || len(st[0].Leases) != 1 {
		t.Fatalf("settle --json on %s = %d %s %s", repo, code, out, errOut)
	}
	return st[0].Leases[0].AmountMicros
}

// killAndRestart is (a) and (b): kill -9 one side after ≥3 countersigned
// receipts, restart it with the same flags; the lease resumes or closes
// with a reason and both chains agree.
func killAndRestart(t *testing.T, provider bool, bootstrap bool) {
	start := time.Now()
	relay := ""
	if !bootstrap {
		// Both bootstrap off a third node, which never dials the provider
		// again: the restarted provider, with no bootstrap peer, must
		// redial its buyer from the lease's stored addresses.
		repoR := t.TempDir()
		portR := freePort(t)
		startDaemon(t, repoR, "--no-gpu", "--listen", fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", portR))
		relay = fmt.Sprintf("/ip4/127.0.0.1/tcp/%d/p2p/%s", portR, keyID(t, repoR, nil))
	}
	k := startKillNetVia(t, relay, "20s")
	k.waitCountersigned(t, k.repoP, 3)
	if provider {
		kill9(t, k.dP)
		k.dP = startDaemon(t, k.repoP, k.argsP...)
	} else {
		kill9(t, k.dB)
		k.dB = startDaemon(t, k.repoB, k.argsB...)
	}
	t.Logf("killed and restarted after %s", time.Since(start).Round(time.Millisecond))
	lp := k.waitClosed(t, k.repoP)
	lb := k.waitClosed(t, k.repoB)
	if lp.Reason == "" || lb.Reason == "" {
		t.Fatalf("closed without a reason: provider %+v, buyer %+v", lp, lb)
	}
	if !bootstrap && (lp.Reason != "completed" || lb.Reason != "completed") {
		t.Errorf("reasons = %q (provider), %q (buyer); want both completed after the redial", lp.Reason, lb.Reason)
	}
	chain := k.chainsAgree(t)
	last := chain[len(chain)-1]
	t.Logf("closed %q (provider) / %q (buyer); %d receipts, %d micros, last window ends %s (lease end %s)",
		lp.Reason, lb.Reason, len(chain), last.CumulativeMicros, last.WindowEnd.Format(time.RFC3339Nano), lp.End.Format(time.RFC3339Nano))
	if lp.Reason == "completed" && !last.WindowEnd.Equal(lp.End) {
		t.Errorf("completed lease billed until %s, lease end %s", last.WindowEnd, lp.End)
	}
	for _, repo := range []string{k.repoP, k.repoB} {
		poll(t, "settlement on "+repo, func() (bool, string) {
			got := k.settled(t, repo)
			return got == last.CumulativeMicros, fmt.Sprintf("settled %d, chain %d", got, last.CumulativeMicros)
		})
	}
	t.Logf("took %s", time.Since(start).Round(time.Millisecond))
}

func TestKillProvider(t *testing.T) {
	t.Parallel()
	killAndRestart(t, true, true)
}

// TestKillProviderNoBootstrap: restarted with no bootstrap peers at all,
// the provider redials its buyer from the lease's stored addresses; every
// receipt it signed is countersigned and both sides complete the lease.
func TestKillProviderNoBootstrap(t *testing.T) {
	t.Parallel()
	killAndRestart(t, true, false)
}

func TestKillBuyer(t *testing.T) {
	t.Parallel()
	killAndRestart(t, false, true)
}

// TestKillBuyerGone is (c): the buyer dies for good; the provider closes the
// lease unpaid within the grace (3 intervals) plus slack, and settles only
// what was countersigned.
func TestKillBuyerGone(t *testing.T) {
	t.Parallel()
	start := time.Now()
	k := startKillNet(t, "60s")
	k.waitCountersigned(t, k.repoP, 3)
	kill9(t, k.dB)
	killed := time.Now()
	var l api.LeaseView
	poll(t, "the provider to close the lease", func() (bool, string) {
		code, out, errOut := runCLI(t, "--repo", k.repoP, "lease", "show", k.lease, "--json")
		if code != 0 || json.Unmarshal([]byte(out), &l) != nil {
			return false, out + errOut
		}
		return l.State == "closed", out
	})
	took := time.Since(killed)
	if l.Reason != "unpaid" {
		t.Fatalf("lease closed %q, want unpaid: %+v", l.Reason, l)
	}
	// Grace is 3 intervals after the last countersigned window; allow one
	// interval of billing lag, the poll's backoff and scheduling slack.
	if limit := 3*time.Second + 4*time.Second; took > limit {
		t.Errorf("closed unpaid %s after the buyer died, want within %s", took.Round(time.Millisecond), limit)
	}
	rs, out := receiptsOn(t, k.repoP, k.lease)
	if rs == nil {
		t.Fatalf("receipts: %s", out)
	}
	var countersigned int64
	for i, r := range rs {
		if r.Seq != uint64(i+1) || r.ProviderSignature != "valid" {
			t.Fatalf("receipt %d = %+v", i, r)
		}
		if r.BuyerSignature == "valid" {
			if i > 0 && rs[i-1].BuyerSignature != "valid" {
				t.Fatalf("countersigned receipt %d after an uncountersigned one: %s", r.Seq, out)
			}
			countersigned = r.CumulativeMicros
		}
	}
	if countersigned == 0 {
		t.Fatalf("no countersigned receipts: %s", out)
	}
	if got := k.settled(t, k.repoP); got != countersigned {
		t.Errorf("settled %d micros, want the countersigned %d (chain %s)", got, countersigned, out)
	}
	wantExit(t, []string{"--repo", k.repoP, "receipts", "verify", k.lease}, 0)
	t.Logf("closed unpaid %s after the kill; %d receipts, countersigned %d micros; took %s",
		took.Round(time.Millisecond), len(rs), countersigned, time.Since(start).Round(time.Millisecond))
}
