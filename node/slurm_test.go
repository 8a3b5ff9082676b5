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

// TestSlurmReservedBlock: a reserved block traded ahead on a Slurm
// provider becomes a Slurm reservation of the block's GPUs (a whole node
// here) at the trade, so the cluster's own users cannot take them before
// it starts; the lease's job runs in it at the block's start, and the
// lease completes with countersigned receipts.
func TestSlurmReservedBlock(t *testing.T) {
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
	perNode := map[string]int{}
	for _, g := range provider.Published().Gpus {
		perNode[g.Node]++
	}
	count := 0
	for _, c := range perNode {
		count = c // the test cluster's nodes are alike
	}
	if _, err := provider.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: h100, Count: uint32(count), LeaseType: "reserved", MinDuration: "1s", MaxDuration: "1h"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the buyer to see the reserved ask", func() (bool, string) {
		b, err := buyer.Book(ctx, h100, "USD")
		return err == nil && len(b.Asks) == 1, sprint(b, err)
	})
	o, err := buyer.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: h100, Count: uint32(count), Price: "3.00", LeaseType: "reserved",
		Start: "+10s", Duration: "8s", IOC: true, Exec: []string{"sh", "-c", "echo in the block; exec sleep 300"}})
	if err != nil || len(o.Fills) != 1 {
		t.Fatalf("block bid = %+v, %v; want it filled", o, err)
	}
	id := o.Fills[0].Lease
	lv, err := buyer.Lease(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var resv *gpu.SlurmReservation
	rs, err := s.Reservations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if strings.HasPrefix(r.Name, "suanli-"+id) {
			resv = &rs[i]
		}
	}
	if resv == nil || resv.NodeCount != 1 || !resv.Start.Equal(lv.Start.Truncate(time.Second)) && resv.Start.Sub(lv.Start).Abs() > time.Second {
		t.Fatalf("reservations %+v after the trade of block %s–%s: want one of a whole node from the block's start", rs, lv.Start, lv.End)
	}
	t.Cleanup(func() {
		if j := slurmJob(t, s, id); j != nil && j.State == "RUNNING" {
			s.Run(context.Background(), nil, "scancel", "--signal=KILL", "--full", j.ID)
		}
	})
	var job *gpu.SlurmJob
	waitFor(t, ctx, "the lease's job to run in its reservation", func() (bool, string) {
		job = slurmJob(t, s, id)
		return job != nil && job.State == "RUNNING" && job.Reservation == resv.Name, sprint(job, nil)
	})
	if time.Now().Before(lv.Start) {
		t.Errorf("the job ran before the block's start %s", lv.Start)
	}
	pv := waitLeaseClosed(t, ctx, provider, id)
	if pv.Reason != "completed" {
		t.Errorf("provider closed the block %q, want completed", pv.Reason)
	}
	waitFor(t, ctx, "countersigned receipts on the provider", func() (bool, string) {
		rs, err := provider.Receipts(ctx, id)
		if err != nil || len(rs) == 0 {
			return false, sprint(rs, err)
		}
		for _, r := range rs {
			if r.BuyerSignature != "valid" {
				return false, sprint(r, nil)
			}
		}
		return true, ""
	})
}
