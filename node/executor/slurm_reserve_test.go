package executor

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/suanli/suanli/gpu"
)

// userJob submits a cluster user's job (not Suanli's: no tag) holding
// one GPU for a minute, cancelled when the test ends.
func userJob(t *testing.T, s gpu.Slurm) string {
	t.Helper()
	out, err := s.Run(context.Background(), nil, "sbatch", "--parsable", "--job-name=user", "--time=1", "--gres=gpu:1", "--wrap", "sleep 300")
	if err != nil {
		t.Fatal(err)
	}
	id, _, _ := strings.Cut(strings.TrimSpace(string(out)), ";")
	t.Cleanup(func() { s.Run(context.Background(), nil, "scancel", "--signal=KILL", "--full", id) })
	return id
}

func jobState(t *testing.T, s gpu.Slurm, id string) gpu.SlurmJob {
	t.Helper()
	jobs, err := s.Jobs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if j.ID == id {
			return j
		}
	}
	t.Fatalf("job %s not in squeue", id)
	return gpu.SlurmJob{}
}

// TestSlurmReservedBlock: a reserved block of whole nodes becomes a
// Slurm reservation of them at the trade; a cluster user's job that would run
// into the block pends; the lease's job, submitted before the block,
// starts in the reservation when the block starts, not before; ending the
// lease deletes the reservation, and then (negative control) the user's
// job runs. Part of a node cannot be reserved on Slurm 22.05, and a
// second reservation over the same block is refused.
func TestSlurmReservedBlock(t *testing.T) {
	b, s := slurmCluster(t)
	ex := testSlurm(t, s)
	all := freeGPUs(t, b, 8) // every GPU of the cluster's nodes
	ctx := context.Background()
	lease := "lease" + randHex(4)
	t.Cleanup(func() { ex.Release(ctx, lease) })
	start := time.Now().Add(8 * time.Second).Truncate(time.Second)
	end := start.Add(2 * time.Minute)

	if _, err := ex.Reserve(ctx, lease, all[:2], start, end); !errors.Is(err, ErrNoReservation) || !strings.Contains(err.Error(), "2 of node") {
		t.Fatalf("reserving 2 of 8 GPUs: %v, want ErrNoReservation", err)
	}
	name, err := ex.Reserve(ctx, lease, all, start, end)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Reservation(ctx, name)
	if err != nil || r == nil {
		t.Fatalf("reservation %s: %+v, %v", name, r, err)
	}
	nodes := map[string]bool{}
	for _, u := range all {
		nodes[gpu.SlurmNodeOf(u)] = true
	}
	if !r.Start.Equal(start) || r.End.Before(end) || r.NodeCount != len(nodes) {
		t.Errorf("reservation %+v, want %v–%v on %d nodes", r, start, end, len(nodes))
	}
	if again, err := ex.Reserve(ctx, lease, all, start, end); err != nil || again != name {
		t.Errorf("reserving again: %q, %v; want the same reservation", again, err)
	}
	other := testSlurm(t, s)
	if _, err := other.Reserve(ctx, "lease"+randHex(4), all, start, end); !errors.Is(err, ErrRefused) {
		t.Errorf("a second reservation over the block: %v, want refused", err)
	}
	user := userJob(t, s)

	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	run, err := ex.Start(startCtx, Workload{LeaseID: lease, GPUs: all, End: end, Command: []string{"sleep", "300"}})
	if err != nil {
		t.Fatal(err)
	}
	if now := time.Now(); now.Before(start) {
		t.Fatalf("the job runs at %v, before the block's start %v", now, start)
	}
	job := jobState(t, s, run.Info().Handle)
	if job.Reservation != name || job.Start.Before(start) || !job.Start.Before(end) {
		t.Errorf("job %+v: want it in %s, started in %v–%v", job, name, start, end)
	}
	if !strings.Contains(run.Info().GPUAccess, "in reservation "+name) {
		t.Errorf("info %+v", run.Info())
	}
	t.Logf("block start %v, job start %v", start.UTC(), job.Start.UTC())
	if u := jobState(t, s, user); u.State != "PENDING" {
		t.Errorf("the cluster user's job is %s during the block, want PENDING", u.State)
	}

	if err := run.Stop(time.Second); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Reservation(ctx, name); err != nil || r != nil {
		t.Errorf("after the lease: reservation %+v, %v; want deleted", r, err)
	}
	slurmWait(t, time.Minute, "the user's job to run on the freed node", func() bool {
		jobs, _ := s.Jobs(ctx)
		return slices.ContainsFunc(jobs, func(j gpu.SlurmJob) bool { return j.ID == user && j.State == "RUNNING" })
	})
}

// TestSlurmReservationSweep: a restarted daemon deletes its reservations
// whose lease it no longer knows, keeps those it knows, and leaves
// another owner's alone.
func TestSlurmReservationSweep(t *testing.T) {
	b, s := slurmCluster(t)
	ex, stranger := testSlurm(t, s), testSlurm(t, s)
	all := freeGPUs(t, b, 8)
	ctx := context.Background()
	base := time.Now().Add(time.Hour).Truncate(time.Minute)
	kept, lost, theirs := "lease"+randHex(4), "lease"+randHex(4), "lease"+randHex(4)
	for i, c := range []struct {
		ex    *SlurmExecutor
		lease string
	}{{ex, kept}, {ex, lost}, {stranger, theirs}} {
		from := base.Add(time.Duration(i) * time.Hour)
		if _, err := c.ex.Reserve(ctx, c.lease, all, from, from.Add(30*time.Minute)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.ex.Release(ctx, c.lease) })
	}
	removed, err := ex.Sweep(ctx, func(l string) bool { return l == kept })
	if err != nil || !slices.Equal(removed, []string{lost}) {
		t.Fatalf("Sweep = %v, %v; want [%s]", removed, err, lost)
	}
	for _, c := range []struct {
		name string
		want bool
	}{{ex.reservationName(kept), true}, {ex.reservationName(lost), false}, {stranger.reservationName(theirs), true}} {
		if r, err := s.Reservation(ctx, c.name); err != nil || (r != nil) != c.want {
			t.Errorf("reservation %s: %+v, %v; want present %v", c.name, r, err, c.want)
		}
	}
}

func TestReservationName(t *testing.T) {
	ex := &SlurmExecutor{Owner: "12D3KooWabc"}
	if l, ok := ex.leaseOfReservation(ex.reservationName("bafkL")); !ok || l != "bafkL" {
		t.Errorf("round trip: %q %v", l, ok)
	}
	for _, n := range []string{"suanli-bafkL.other", "suanli-.12D3KooWabc", "maint", "suanli-bafkL"} {
		if _, ok := ex.leaseOfReservation(n); ok {
			t.Errorf("%q taken as ours", n)
		}
	}
}

// TestSlurmReserveBusy: a block over a node where a cluster user's job
// runs into it cannot be held, and Reserve says why (Slurm's reason);
// the other node, free, can (negative control), from now on when the
// block has already begun.
func TestSlurmReserveBusy(t *testing.T) {
	b, s := slurmCluster(t)
	ex := testSlurm(t, s)
	nodes, by := gpusByNode(t, b)
	ctx := context.Background()
	user := userJob(t, s)
	slurmWait(t, time.Minute, "the user's job to run", func() bool { return jobState(t, s, user).State == "RUNNING" })
	var busy string
	for n := range jobState(t, s, user).GPUs {
		busy = n
	}
	free := nodes[0]
	if free == busy {
		free = nodes[1]
	}
	inv, err := b.Inventory()
	if err != nil {
		t.Fatal(err)
	}
	var busyGPUs []string // every GPU of the busy node, the user's too
	for _, d := range inv.Devices {
		if gpu.SlurmNodeOf(d.UUID) == busy {
			busyGPUs = append(busyGPUs, d.UUID)
		}
	}
	g, _ := gpu.ParseSlurmUUID(busyGPUs[0])
	for _, used := range jobState(t, s, user).GPUs[busy] {
		for _, i := range used.Used {
			g.Index = i
			busyGPUs = append(busyGPUs, g.UUID())
		}
	}
	lease := "lease" + randHex(4)
	start := time.Now().Add(10 * time.Second)
	_, err = ex.Reserve(ctx, lease, busyGPUs, start, start.Add(time.Hour))
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "busy") {
		t.Fatalf("reserving node %s under a user's job: %v, want refused as busy", busy, err)
	}
	t.Logf("refusal: %v", err)
	t.Cleanup(func() { ex.Release(ctx, lease) })
	name, err := ex.Reserve(ctx, lease, by[free], start.Add(-time.Minute), start.Add(time.Hour))
	if err != nil {
		t.Fatalf("reserving the free node %s: %v", free, err)
	}
	if r, err := s.Reservation(ctx, name); err != nil || r == nil || r.State != "ACTIVE" || r.Nodes != free {
		t.Errorf("reservation begun already: %+v, %v; want ACTIVE on %s", r, err, free)
	}
}

func TestReserveErr(t *testing.T) {
	// What Slurm 22.05 answers uid nobody (checked by hand: scontrol as
	// nobody over this cluster's munge).
	for _, msg := range []string{"Invalid user id", "Access/permission denied"} {
		denied := reserveErr(errors.New("slurm command failed: scontrol: Error creating the reservation: " + msg))
		if !errors.Is(denied, ErrNoReservation) || errors.Is(denied, ErrRefused) {
			t.Errorf("a daemon that may not reserve: %v, want ErrNoReservation", denied)
		}
	}
	busy := reserveErr(errors.New("slurm command failed: scontrol: Error creating the reservation: Requested nodes are busy"))
	if !errors.Is(busy, ErrRefused) || errors.Is(busy, ErrNoReservation) {
		t.Errorf("nodes busy: %v, want refused", busy)
	}
}
