package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/suanli/suanli/gpu"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/executor"
	"github.com/suanli/suanli/node/executor/slurmtest"
)

// TestKillProviderSlurm: a provider daemon started with --backend slurm
// sells the cluster; a bid's command runs as a Slurm job; the daemon is
// killed with SIGKILL mid-lease, the job runs on, the restarted daemon
// adopts that same job (no second one is submitted), the buyer's output
// comes back, and the job is cancelled when the lease completes with both
// chains agreeing.
func TestKillProviderSlurm(t *testing.T) {
	s := slurmtest.Cluster(t)
	k := &killNet{repoP: t.TempDir(), repoB: t.TempDir()}
	portP, portB := freePort(t), freePort(t)
	k.argsP = []string{"--backend", "slurm", "--slurm-conf", s.Conf, "--slurm-market", "h100=" + h100Market,
		"--executor", "slurm", "--slurm-work-dir", t.TempDir(), "--region", "CN-GZ", "--price", "2.49",
		"--billing-interval", "1s", "--listen", fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", portP)}
	k.dP = startDaemon(t, k.repoP, k.argsP...)
	k.idP = keyID(t, k.repoP, nil)
	k.addrP = fmt.Sprintf("/ip4/127.0.0.1/tcp/%d/p2p/%s", portP, k.idP)
	k.argsB = []string{"--no-gpu", "--bootstrap", k.addrP, "--billing-interval", "1s",
		"--listen", fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", portB)}
	k.dB = startDaemon(t, k.repoB, k.argsB...)
	k.idB = keyID(t, k.repoB, nil)
	k.addrB = fmt.Sprintf("/ip4/127.0.0.1/tcp/%d/p2p/%s", portB, k.idB)
	k.argsP = append(k.argsP, "--bootstrap", k.addrB)
	poll(t, "the ask to rest", func() (bool, string) {
		code, out, errOut := runCLI(t, "--repo", k.repoP, "ask", "--gpu", h100Market, "--count", "2", "--price", "2.40", "--min-duration", "1s")
		return code == 0, out + errOut
	})
	poll(t, "the bid to fill", func() (bool, string) {
		code, out, errOut := runCLI(t, "--repo", k.repoB, "bid", "--gpu", h100Market, "--count", "2", "--price", "2.50",
			"--duration", "25s", "--ioc", "--exec", "--", "sh", "-c", "i=0; while :; do echo tick $i; i=$((i+1)); sleep 0.2; done")
		return code == 0 && strings.Contains(out, "filled"), out + errOut
	})
	k.lease = k.leaseOn(t, k.repoB).ID
	job := func() *gpu.SlurmJob {
		jobs, err := s.Jobs(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var found *gpu.SlurmJob
		for _, j := range jobs {
			if j.Name == executor.SlurmJobPrefix+k.lease {
				if found != nil && !ended(j.State) {
					t.Fatalf("two jobs for lease %s: %s and %s", k.lease, found.ID, j.ID)
				}
				found = &j
			}
		}
		return found
	}
	t.Cleanup(func() {
		if j := job(); j != nil {
			s.Run(context.Background(), nil, "scancel", "--signal=KILL", "--full", j.ID)
		}
	})
	var first *gpu.SlurmJob
	poll(t, "the lease's job to run", func() (bool, string) {
		first = job()
		return first != nil && first.State == "RUNNING", fmt.Sprint(first)
	})
	k.waitCountersigned(t, k.repoP, 2)
	kill9(t, k.dP)
	if j := job(); j == nil || j.ID != first.ID || j.State != "RUNNING" {
		t.Fatalf("after the daemon's SIGKILL the job is %+v, want %s still running", j, first.ID)
	}
	_, logsBefore, _ := runCLI(t, "--repo", k.repoB, "logs", k.lease)
	k.dP = startDaemon(t, k.repoP, k.argsP...)
	poll(t, "the restarted provider to adopt the job", func() (bool, string) {
		code, out, errOut := runCLI(t, "--repo", k.repoP, "lease", "show", k.lease, "--json")
		var l api.LeaseView
		return code == 0 && json.Unmarshal([]byte(out), &l) == nil && l.State == "running" &&
			strings.Contains(k.dP.stderr.String(), `msg="workload adopted"`) && strings.Contains(l.GPUAccess, "gpu:h100:2"), out + errOut
	})
	poll(t, "the buyer's output to come back", func() (bool, string) {
		_, o, _ := runCLI(t, "--repo", k.repoB, "logs", k.lease)
		return len(o) > len(logsBefore) && strings.Contains(o[len(logsBefore):], "tick"), o[len(logsBefore):]
	})
	lp := k.waitClosed(t, k.repoP)
	lb := k.waitClosed(t, k.repoB)
	if lp.Reason != "completed" || lb.Reason != "completed" {
		t.Errorf("reasons = %q (provider), %q (buyer); want completed", lp.Reason, lb.Reason)
	}
	poll(t, "the job to end with the lease", func() (bool, string) {
		j := job()
		return j != nil && j.ID == first.ID && j.State == "CANCELLED", fmt.Sprint(j)
	})
	k.chainsAgree(t)
}

func ended(state string) bool {
	return state != "PENDING" && state != "RUNNING" && state != "COMPLETING" && state != "SUSPENDED"
}

// TestSlurmFlagsMisuse: the --backend and --slurm-* flags that cannot
// work together are usage errors (exit 2), before any repo or cluster is
// touched.
func TestSlurmFlagsMisuse(t *testing.T) {
	t.Parallel()
	repo := t.TempDir() + "/repo"
	for _, args := range [][]string{
		{"--backend", "k8s"},
		{"--slurm-market", "h100=nvidia-h100-sxm5-80gb"},
		{"--slurm-partition", "gpu"},
		{"--backend", "slurm", "--gpu-sim", "dgxh100"},
		{"--backend", "slurm", "--no-gpu"},
		{"--backend", "slurm", "--slurm-market", "h100"},
	} {
		_, stderr := wantExit(t, append([]string{"--repo", repo, "daemon"}, args...), 2)
		if !strings.Contains(stderr, "usage: suanli daemon") {
			t.Errorf("daemon %q: stderr lacks the usage:\n%s", args, stderr)
		}
	}
}
