package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
)

// TestDaemonLease is the "done when": two daemons billing every
// second; a bid for 2 GPUs for 10 s running `sleep 30` matches an ask, runs until
// the lease ends, closes as completed, and both sides settle the same amount, equal to
// price × 2 GPUs × the billed time. The exported chain verifies offline.
func TestDaemonLease(t *testing.T) {
	t.Parallel()
	repoP, repoB := t.TempDir(), t.TempDir()
	startDaemon(t, repoP, "--gpu-sim", "dgxh100", "--region", "CN-GZ", "--price", "2.49",
		"--billing-interval", "1s", "--executor", "reserve", "--executor", "process")
	stdout, _ := wantExit(t, []string{"--repo", repoP, "id", "--json"}, 0)
	idP, addrsP := idJSON(t, stdout)
	var tcpP string
	for _, s := range addrsP {
		if strings.HasPrefix(s, "/ip4/127.0.0.1/tcp/") {
			tcpP = s
		}
	}
	startDaemon(t, repoB, "--no-gpu", "--bootstrap", tcpP, "--billing-interval", "1s")
	idB := keyID(t, repoB, nil)

	poll(t, "the ask to rest (once the offer is published)", func() (bool, string) {
		code, out, errOut := runCLI(t, "--repo", repoP, "ask", "--gpu", h100Market, "--count", "2", "--price", "2.40", "--min-duration", "1s")
		return code == 0, out + errOut
	})
	poll(t, "the bid to fill", func() (bool, string) {
		code, out, errOut := runCLI(t, "--repo", repoB, "bid", "--gpu", h100Market, "--count", "2", "--price", "2.50",
			"--duration", "10s", "--ioc", "--exec", "--", "sleep", "30") // stopped at the lease's end
		return code == 0 && strings.Contains(out, "filled"), out + errOut
	})
	var lease api.LeaseView
	poll(t, "the lease to close on both sides", func() (bool, string) {
		var all string
		for _, repo := range []string{repoP, repoB} {
			code, out, errOut := runCLI(t, "--repo", repo, "leases", "--json")
			var ls []api.LeaseView
			if code != 0 || json.Unmarshal([]byte(out), &ls) != nil || len(ls) != 1 || ls[0].State != "closed" || ls[0].Countersigned == 0 {
				return false, out + errOut
			}
			lease = ls[0]
			all += out
		}
		return true, all
	})
	if lease.Reason != "completed" || lease.Provider != idP.String() || lease.Buyer != idB || len(lease.GPUs) != 2 {
		t.Fatalf("lease = %+v, want completed between the two over 2 GPUs", lease)
	}
	want, _ := market.Charge(lease.PriceMicros, 2*10_000)
	var owed [2]int64
	for i, repo := range []string{repoP, repoB} {
		poll(t, "the settlement on "+repo, func() (bool, string) {
			code, out, errOut := runCLI(t, "--repo", repo, "settle", "--json")
			var st []api.SettlementView
			if code != 0 || json.Unmarshal([]byte(out), &st) != nil || len(st) != 1 || len(st[0].Leases) != 1 {
				return false, out + errOut
			}
			owed[i] = st[0].Leases[0].AmountMicros
			return owed[i] == want, out
		})
		code, out, errOut := runCLI(t, "--repo", repo, "receipts", lease.ID, "--json")
		var rs []map[string]any
		if code != 0 || json.Unmarshal([]byte(out), &rs) != nil || len(rs) < 5 {
			t.Fatalf("receipts --json = %d %s %s", code, out, errOut)
		}
		for _, r := range rs {
			if r["provider_signature"] != "valid" || r["buyer_signature"] != "valid" || r["seq"] == nil || r["amount"] == nil || r["cumulative"] == nil {
				t.Fatalf("receipt %v, want both signatures valid", r)
			}
		}
		wantExit(t, []string{"--repo", repo, "receipts", "verify", lease.ID}, 0)
	}
	// Offline: an exported chain verifies without a daemon; a corrupted one does not.
	code, out, errOut := runCLI(t, "--repo", repoB, "receipts", "export", lease.ID)
	if code != 0 {
		t.Fatalf("receipts export: %s", errOut)
	}
	file := filepath.Join(t.TempDir(), "chain")
	os.WriteFile(file, []byte(out), 0o600)
	wantExit(t, []string{"receipts", "verify", "--file", file}, 0)
	bad := []byte(out)
	bad[len(bad)/2] ^= 1
	os.WriteFile(file, bad, 0o600)
	wantExit(t, []string{"receipts", "verify", "--file", file}, 1)

	// settle says who owes whom, with the currency, to the micro-unit.
	billed := amountText(market.FormatMicros(want, "USD"), "USD")
	for repo, says := range map[string]string{repoP: "the peer owes this node " + billed, repoB: "this node owes the peer " + billed} {
		if out, _ := wantExit(t, []string{"--repo", repo, "settle"}, 0); !strings.Contains(out, says) {
			t.Errorf("settle on %s lacks %q:\n%s", repo, says, out)
		}
	}
	// The table names the lease in full and what it billed with its currency.
	if out, _ := wantExit(t, []string{"--repo", repoB, "leases"}, 0); !strings.Contains(out, lease.ID) || !strings.Contains(out, amountText(lease.Cumulative, "USD")) {
		t.Errorf("leases table lacks the full ID or %s:\n%s", amountText(lease.Cumulative, "USD"), out)
	}
	// Completion offers the daemon's leases and markets.
	if out, _ := wantExit(t, []string{"--repo", repoB, "__complete", "leases"}, 0); !strings.Contains(out, lease.ID+"\n") {
		t.Errorf("__complete leases = %q, want %s", out, lease.ID)
	}
	if out, _ := wantExit(t, []string{"--repo", repoB, "__complete", "markets"}, 0); out != h100Market+"\n" {
		t.Errorf("__complete markets = %q, want %s", out, h100Market)
	}

	// bid --wait follows the lease to its end, says why it closed, and
	// exits non-zero when the workload failed.
	poll(t, "a second ask to rest", func() (bool, string) {
		code, out, errOut := runCLI(t, "--repo", repoP, "ask", "--gpu", h100Market, "--count", "2", "--price", "2.40", "--min-duration", "1s")
		return code == 0, out + errOut
	})
	poll(t, "the buyer to see it", func() (bool, string) {
		_, out, _ := runCLI(t, "--repo", repoB, "book", h100Market, "--json")
		var b api.BookView
		return json.Unmarshal([]byte(out), &b) == nil && len(b.Asks) == 1, out
	})
	out2, err2 := wantExit(t, []string{"--repo", repoB, "bid", "--gpu", h100Market, "--count", "2", "--price", "2.50",
		"--duration", "20s", "--ioc", "--wait", "--exec", "--", "sh", "-c", "exit 3"}, 1)
	t.Logf("bid --wait said:\n%s%s", out2, err2)
	if !strings.Contains(out2, "closed exited, exit code 3") {
		t.Errorf("bid --wait of a failing workload does not say how it ended: %s", out2)
	}
	if !strings.Contains(err2, "failed") || !strings.Contains(out2, "filled: all 2 GPUs") {
		t.Errorf("bid --wait of a failing workload: stdout %q stderr %q", out2, err2)
	}
}
