package executor

import (
	"strings"
	"testing"
	"time"

	"github.com/suanli/suanli/gpu"
)

// gpusByNode are the cluster's free GPU UUIDs per node, nodes in order.
func gpusByNode(t *testing.T, b *gpu.SlurmBackend) ([]string, map[string][]string) {
	t.Helper()
	inv, err := b.Inventory()
	if err != nil {
		t.Fatal(err)
	}
	var nodes []string
	by := map[string][]string{}
	for _, d := range inv.Devices {
		n := gpu.SlurmNodeOf(d.UUID)
		if by[n] == nil {
			nodes = append(nodes, n)
		}
		by[n] = append(by[n], d.UUID)
	}
	if len(nodes) < 2 {
		t.Fatalf("the cluster has %d node(s) with GPUs; multi-node leases need 2 (contrib/slurm/slurm-up.sh -n 2)", len(nodes))
	}
	return nodes, by
}

// TestSlurmMultiNodeLease: a lease of GPUs on two nodes runs as one
// job over both, holding exactly the leased count on each: 2+2 as one
// job with --gres per node, 3+1 as a heterogeneous job (one ID, one
// scancel); srun in the job reaches every node with its own GPUs, the
// usage counts them all, and a restarted daemon adopts the job whole.
func TestSlurmMultiNodeLease(t *testing.T) {
	b, s := slurmCluster(t)
	ex := testSlurm(t, s)
	nodes, by := gpusByNode(t, b)
	n1, n2 := nodes[0], nodes[1]
	if len(by[n1]) < 3 || len(by[n2]) < 2 {
		t.Fatalf("free GPUs %v: the test needs 3 on %s and 2 on %s", by, n1, n2)
	}
	for _, c := range []struct {
		name   string
		k1, k2 int
		srun   string
	}{
		{"even", 2, 2, "srun -l"},
		{"uneven", 3, 1, "srun -l --het-group=0,1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out syncBuf
			gpus := append(by[n1][:c.k1:c.k1], by[n2][:c.k2]...)
			script := c.srun + ` sh -c 'echo "on=$SLURMD_NODENAME gpus=$CUDA_VISIBLE_DEVICES"'; echo done; sleep 300`
			run, err := ex.Start(startCtx(t), Workload{LeaseID: "lease" + randHex(4), GPUs: gpus,
				End: time.Now().Add(time.Hour), Stdout: &out, Command: []string{"sh", "-c", script}})
			if err != nil {
				t.Fatal(err)
			}
			defer run.Stop(time.Second)
			got := allocated(t, s, run.Info().Handle)
			if len(got[n1]) != c.k1 || len(got[n2]) != c.k2 {
				t.Errorf("job %s holds %v, want %d on %s and %d on %s", run.Info().Handle, got, c.k1, n1, c.k2, n2)
			}
			hetGPUs := 0
			if j, err := ex.job(startCtx(t), run.Info().Handle); err != nil || j == nil {
				t.Fatalf("job: %v", err)
			} else {
				for _, gs := range j.GPUs {
					for _, g := range gs {
						hetGPUs += len(g.Used)
					}
				}
			}
			if u := run.(Meter).Usage(); u.GPUs != c.k1+c.k2 || len(u.Nodes) != 2 || hetGPUs != c.k1+c.k2 {
				t.Errorf("usage %+v (job lists %d GPUs), want %d GPUs on 2 nodes", u, hetGPUs, c.k1+c.k2)
			}
			slurmWait(t, 30*time.Second, "srun's output from both nodes", func() bool { return strings.Contains(out.String(), "done") })
			for node, k := range map[string]int{n1: c.k1, n2: c.k2} {
				line := ""
				for _, l := range strings.Split(out.String(), "\n") {
					if strings.Contains(l, "on="+node+" ") {
						line = l
					}
				}
				if _, list, _ := strings.Cut(line, "gpus="); list == "" || strings.Count(list, ",") != k-1 {
					t.Errorf("node %s: %q, want %d GPUs visible (output %q)", node, line, k, out.String())
				}
			}
			// The daemon restarts: the job, every component of it, is
			// adopted whole.
			run.(Detacher).Detach()
			<-run.Done()
			restarted := &SlurmExecutor{Slurm: s, Owner: ex.Owner, SpotPartition: "spot", WorkRoot: ex.WorkRoot, Poll: ex.Poll}
			if removed, err := restarted.Sweep(startCtx(t), func(string) bool { return true }); err != nil || len(removed) != 0 {
				t.Fatalf("Sweep keeping every lease: %v, %v", removed, err)
			}
			adopted, err := restarted.Adopt(startCtx(t), Workload{LeaseID: run.(*slurmRun).w.LeaseID}, run.Info().Handle)
			if err != nil {
				t.Fatal(err)
			}
			if u := adopted.(Meter).Usage(); u.GPUs != c.k1+c.k2 || len(u.Nodes) != 2 {
				t.Errorf("adopted usage %+v, want %d GPUs on 2 nodes", u, c.k1+c.k2)
			}
			if err := adopted.Stop(time.Second); err != nil {
				t.Fatal(err)
			}
			for _, j := range jobsOf(t, s, run.Info().Handle) {
				if j.State != "CANCELLED" {
					t.Errorf("after the lease: %s is %s", j.ID, j.State)
				}
			}
		})
	}
}

// jobsOf are the job and, if it leads a heterogeneous job, its
// components.
func jobsOf(t *testing.T, s gpu.Slurm, id string) []gpu.SlurmJob {
	t.Helper()
	jobs, err := s.Jobs(startCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	var out []gpu.SlurmJob
	for _, j := range jobs {
		if j.ID == id || j.HetJobID == id {
			out = append(out, j)
		}
	}
	return out
}
