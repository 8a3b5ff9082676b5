package executor

import (
	"slices"
	"testing"
	"time"
)

// TestSlurmUsageFromJobRecord: a 2-GPU lease's usage is Slurm's record of
// its job: the start Slurm gave it, no end while it runs, the end Slurm
// recorded when the lease stopped it, and exactly 2 allocated GPUs.
func TestSlurmUsageFromJobRecord(t *testing.T) {
	b, s := slurmCluster(t)
	ex := testSlurm(t, s)
	submitted := time.Now().Truncate(time.Second)
	run, err := ex.Start(startCtx(t), Workload{LeaseID: "lease" + randHex(4), GPUs: freeGPUs(t, b, 2),
		End: time.Now().Add(time.Hour), Command: []string{"sleep", "300"}})
	if err != nil {
		t.Fatal(err)
	}
	m, ok := run.(Meter)
	if !ok {
		t.Fatal("a slurm run is not a Meter")
	}
	u := m.Usage()
	if u.Source != "slurm job "+run.Info().Handle || u.Start.Before(submitted) || !u.End.IsZero() || u.GPUs != 2 || len(u.Nodes) != 1 {
		t.Fatalf("running usage %+v", u)
	}
	slurmWait(t, 30*time.Second, "the job to have run 2s", func() bool { return time.Since(u.Start) >= 2*time.Second })
	if err := run.Stop(time.Second); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	end := m.Usage()
	if !end.Start.Equal(u.Start) || end.End.IsZero() || end.End.After(stopped) || end.Held(stopped) < 2*time.Second ||
		end.GPUs != 2 || !slices.Equal(end.Nodes, u.Nodes) {
		t.Fatalf("usage after the lease %+v (running: %+v)", end, u)
	}
	if end.Held(stopped.Add(time.Hour)) != end.Held(stopped) {
		t.Errorf("an ended job's usage grows with the clock")
	}
	t.Logf("slurm recorded %v held on %d GPUs", end.Held(stopped), end.GPUs)
}
