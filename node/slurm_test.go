package node_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/suanli/suanli/gpu"
	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/devnet"
	"github.com/suanli/suanli/node/executor"
	"github.com/suanli/suanli/node/executor/slurmtest"
)

// slurmJob is the lease's job as squeue reports it, nil if none.
func slurmJob(t *testing.T, s gpu.Slurm, lease string) *gpu.SlurmJob {
	t.Helper()
	jobs, err := s.Jobs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if j.Name == executor.SlurmJobPrefix+lease {
			return &j
		}
	}
	return nil
}

// TestSlurmProviderSells: a provider started with the Slurm backend
// offers the cluster's 8 GPUs; a buyer's bid becomes a Slurm job holding
// exactly its 2 GPUs, visible in squeue, that is cancelled when the lease
// ends, with countersigned receipts on both sides.
func TestSlurmProviderSells(t *testing.T) {
	s := slurmtest.Cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	net, err := devnet.Start(ctx, devnet.Config{Providers: 1, Buyers: 1, Dir: t.TempDir(), Logger: quiet,
		Slurm: &node.SlurmConfig{Slurm: s, Markets: map[string]string{"h100": h100}, SpotPartition: "spot", WorkRoot: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { net.Close() })
	if err := net.WaitPublished(ctx); err != nil {
		t.Fatal(err)
	}
	provider, buyer := net.Providers[0], net.Buyers[0]
	o := provider.Published()
	if len(o.Gpus) != 8 || !strings.HasPrefix(o.Host.Backend, "slurm:") || o.Gpus[0].Market != h100 {
		t.Fatalf("offer: %d GPUs, backend %q, market %q; want 8 Slurm-managed %s", len(o.Gpus), o.Host.Backend, o.Gpus[0].Market, h100)
	}
	nodes := map[string]bool{}
	for _, g := range o.Gpus {
		nodes[g.Node] = true
	}
	if o.Scheduler != "slurm" || o.Host.SchedulerVersion == "" || o.MaxNodes < 1 || int(o.MaxNodes) > len(nodes) || nodes[""] {
		t.Fatalf("offer: scheduler %q %q, a lease spans %d nodes, GPUs on nodes %v; want slurm, its version, each GPU's node", o.Scheduler, o.Host.SchedulerVersion, o.MaxNodes, nodes)
	}
	id := tradeWorkload(t, ctx, provider, buyer, "8s", api.OrderRequest{Exec: []string{"sh", "-c", `echo "hello gpus=$CUDA_VISIBLE_DEVICES"; exec sleep 300`}})
	t.Cleanup(func() {
		if j := slurmJob(t, s, id); j != nil && j.State == "RUNNING" {
			s.Run(context.Background(), nil, "scancel", "--signal=KILL", "--full", j.ID)
		}
	})
	var job *gpu.SlurmJob
	waitFor(t, ctx, "the lease's job to run in Slurm", func() (bool, string) {
		job = slurmJob(t, s, id)
		return job != nil && job.State == "RUNNING", sprint(job, nil)
	})
	held := 0
	for _, gs := range job.GPUs {
		for _, g := range gs {
			held += len(g.Used)
		}
	}
	if held != 2 {
		t.Errorf("job %s holds %v, want 2 GPUs", job.ID, job.GPUs)
	}
	pv, err := provider.Lease(ctx, id)
	if err != nil || pv.Executor != "slurm" {
		t.Errorf("provider's lease %+v, %v: want the slurm executor", pv, err)
	}
	waitFor(t, ctx, "the job's output on the buyer", func() (bool, string) {
		logs, err := buyer.Logs(ctx, id, 0)
		var all strings.Builder
		for _, c := range logs.Chunks {
			all.WriteString(c.Data)
		}
		return err == nil && strings.Contains(all.String(), "hello gpus="), all.String()
	})
	pv = waitLeaseClosed(t, ctx, provider, id)
	bv := waitLeaseClosed(t, ctx, buyer, id)
	if pv.Reason != "completed" || bv.Reason != "completed" {
		t.Errorf("reasons = %q, %q; want completed", pv.Reason, bv.Reason)
	}
	waitFor(t, ctx, "the job to end with the lease", func() (bool, string) {
		job = slurmJob(t, s, id)
		return job != nil && job.State == "CANCELLED", sprint(job, nil)
	})
	for _, n := range []*node.Node{provider, buyer} {
		var rs []api.ReceiptView
		waitFor(t, ctx, "countersigned receipts on "+n.Repo(), func() (bool, string) {
			rs, err = n.Receipts(ctx, id)
			if err != nil || len(rs) == 0 {
				return false, sprint(rs, err)
			}
			for _, r := range rs {
				if r.ProviderSignature != "valid" || r.BuyerSignature != "valid" {
					return false, sprint(r, nil)
				}
			}
			return true, ""
		})
	}
}
