package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/suanli/suanli/node/api"
)

// TestKillProviderProcess: the provider daemon is killed with SIGKILL
// while a process lease runs; the workload runs on (its output goes to
// files, not to the dead daemon), the restarted daemon adopts it after
// proving it by its cgroup and start time, the buyer's output comes back,
// and the lease completes (not failed) with both chains agreeing.
func TestKillProviderProcess(t *testing.T) {
	t.Parallel()
	k := startPair(t, "--executor", "process")
	poll(t, "the bid to fill", func() (bool, string) {
		code, out, errOut := runCLI(t, "--repo", k.repoB, "bid", "--gpu", h100Market, "--count", "2", "--price", "2.50",
			"--duration", "25s", "--ioc", "--exec", "--", "sh", "-c", "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.3; done")
		return code == 0 && strings.Contains(out, "filled"), out + errOut
	})
	k.lease = k.leaseOn(t, k.repoB).ID
	poll(t, "the workload's output on the buyer", func() (bool, string) {
		_, o, _ := runCLI(t, "--repo", k.repoB, "logs", k.lease)
		return strings.Contains(o, "tick 2"), o
	})
	k.waitCountersigned(t, k.repoP, 2)
	kill9(t, k.dP)
	_, logsBefore, _ := runCLI(t, "--repo", k.repoB, "logs", k.lease)
	k.dP = startDaemon(t, k.repoP, k.argsP...)
	poll(t, "the restarted provider to adopt the process", func() (bool, string) {
		code, out, errOut := runCLI(t, "--repo", k.repoP, "lease", "show", k.lease, "--json")
		var l api.LeaseView
		return code == 0 && json.Unmarshal([]byte(out), &l) == nil && l.State == "running" && l.Exit == nil, out + errOut
	})
	poll(t, "the buyer's output to come back", func() (bool, string) {
		_, o, _ := runCLI(t, "--repo", k.repoB, "logs", k.lease)
		return len(o) > len(logsBefore) && strings.Contains(o[len(logsBefore):], "tick"), o[len(logsBefore):]
	})
	lp := k.waitClosed(t, k.repoP)
	lb := k.waitClosed(t, k.repoB)
	if lp.Reason != "completed" || lb.Reason != "completed" {
		t.Errorf("reasons = %q (provider), %q (buyer); want completed (notes %q, %q)", lp.Reason, lb.Reason, lp.Note, lb.Note)
	}
	k.chainsAgree(t)
}
