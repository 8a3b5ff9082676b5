package executor

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/suanli/suanli/gpu"
	"github.com/suanli/suanli/node/executor/slurmtest"
)

// slurmCluster is the test cluster and a backend over it.
func slurmCluster(t *testing.T) (*gpu.SlurmBackend, gpu.Slurm) {
	t.Helper()
	s := slurmtest.Cluster(t)
	b, err := gpu.OpenSlurm(context.Background(), gpu.SlurmBackendConfig{Slurm: s, JobPrefix: SlurmJobPrefix})
	if err != nil {
		t.Fatal(err)
	}
	return b, s
}

// testSlurm is an executor with an owner of its own; every job it leaves
// is cancelled when the test ends.
func testSlurm(t *testing.T, s gpu.Slurm) *SlurmExecutor {
	t.Helper()
	ex := &SlurmExecutor{Slurm: s, Owner: "test-" + randHex(6), SpotPartition: "spot", WorkRoot: t.TempDir(), Poll: 100 * time.Millisecond}
	t.Cleanup(func() { cancelOwned(t, ex) })
	return ex
}

func cancelOwned(t *testing.T, ex *SlurmExecutor) {
	ctx := context.Background()
	jobs, err := ex.Slurm.Jobs(ctx)
	if err != nil {
		t.Error(err)
		return
	}
	for _, j := range jobs {
		if _, ok := ex.leaseOfComment(j.Comment); ok && !ended(j.State) {
			ex.Slurm.Run(ctx, nil, "scancel", "--signal=KILL", "--full", j.ID)
		}
	}
	// Wait for them to release their GPUs, so the next test sees all.
	slurmWait(t, 60*time.Second, "the test's jobs to end", func() bool {
		jobs, _ := ex.Slurm.Jobs(ctx)
		for _, j := range jobs {
			if _, ok := ex.leaseOfComment(j.Comment); ok && !ended(j.State) {
				return false
			}
		}
		return true
	})
}

// startCtx bounds a Start: a job that cannot run in a minute is a
// failure, not a hang.
func startCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func slurmWait(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// syncBuf is a goroutine-safe output sink.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// freeGPUs are n GPU UUIDs of one node of the cluster.
func freeGPUs(t *testing.T, b *gpu.SlurmBackend, n int) []string {
	t.Helper()
	inv, err := b.Inventory()
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Devices) < n {
		t.Fatalf("cluster has %d GPUs, the test needs %d", len(inv.Devices), n)
	}
	var out []string
	for _, d := range inv.Devices[:n] {
		out = append(out, d.UUID)
	}
	return out
}

// allocated are the gres indices Slurm allocated to the job (every
// component of a heterogeneous one), per node.
func allocated(t *testing.T, s gpu.Slurm, id string) map[string][]int {
	t.Helper()
	jobs, err := s.Jobs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	j := hetJob(jobs, id)
	if j == nil {
		t.Fatalf("job %s not in squeue", id)
	}
	out := map[string][]int{}
	for n, gs := range j.GPUs {
		for _, g := range gs {
			out[n] = append(out[n], g.Used...)
		}
	}
	return out
}

func TestSlurmLeaseJob(t *testing.T) {
	b, s := slurmCluster(t)
	ex := testSlurm(t, s)
	var out syncBuf
	lease := "lease" + randHex(4)
	end := time.Now().Add(90 * time.Second)
	w := Workload{LeaseID: lease, GPUs: freeGPUs(t, b, 2), End: end, Stdout: &out,
		Command: []string{"sh", "-c", `echo "gpus=$CUDA_VISIBLE_DEVICES lease=$SUANLI_LEASE it's"; sleep 300`}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run, err := ex.Start(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	info := run.Info()
	if info.Executor != Slurm || info.State != "running" || info.Handle == "" {
		t.Fatalf("info = %+v", info)
	}
	// The job holds exactly 2 GPUs, has the lease's end as its limit, and
	// carries the lease's tag.
	alloc := allocated(t, s, info.Handle)
	total := 0
	for _, idx := range alloc {
		total += len(idx)
	}
	if total != 2 {
		t.Fatalf("job %s holds %v, want 2 GPUs", info.Handle, alloc)
	}
	jobs, _ := s.Jobs(ctx)
	for _, j := range jobs {
		if j.ID == info.Handle {
			if j.Name != SlurmJobPrefix+lease || !strings.Contains(j.Comment, "lease="+lease) {
				t.Errorf("job name %q comment %q", j.Name, j.Comment)
			}
			if j.TimeLimit != 2*time.Minute {
				t.Errorf("time limit %v, want the lease's 90s rounded up to 2m", j.TimeLimit)
			}
		}
	}
	slurmWait(t, 30*time.Second, "the job's output", func() bool { return strings.Contains(out.String(), "lease="+lease+" it's") })
	if got := strings.Fields(out.String())[0]; strings.Count(got, ",") != 1 {
		t.Errorf("the job sees %q, want 2 GPUs in CUDA_VISIBLE_DEVICES", got)
	}
	// The lease ends: the job is cancelled.
	if err := run.Stop(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	<-run.Done()
	if res := run.Result(); res.Error != "" || res.Detached {
		t.Errorf("result after Stop = %+v", res)
	}
	j, err := ex.job(ctx, info.Handle)
	if err != nil || j == nil || j.State != "CANCELLED" {
		t.Errorf("job after Stop = %+v, %v; want CANCELLED", j, err)
	}
}

func TestSlurmJobEndsByItself(t *testing.T) {
	b, s := slurmCluster(t)
	ex := testSlurm(t, s)
	var out syncBuf
	run, err := ex.Start(startCtx(t), Workload{LeaseID: "lease" + randHex(4), GPUs: freeGPUs(t, b, 1),
		End: time.Now().Add(time.Hour), Stdout: &out, Command: []string{"sh", "-c", "echo bye; exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-run.Done():
	case <-time.After(60 * time.Second):
		t.Fatal("the job did not end")
	}
	if res := run.Result(); res.Code != 3 {
		t.Errorf("result = %+v, want exit code 3", res)
	}
	if !strings.Contains(out.String(), "bye") {
		t.Errorf("output %q", out.String())
	}
}

// TestSlurmNoSharedGPU: two leases' jobs never hold the same GPU (Slurm's
// accounting), and a third that does not fit pends and is refused with
// Slurm's reason; a negative control shows the GPUs it wanted free once
// the others end.
func TestSlurmNoSharedGPU(t *testing.T) {
	b, s := slurmCluster(t)
	ex := testSlurm(t, s)
	all := freeGPUs(t, b, 8)
	var runs []Execution
	for i := range 2 {
		run, err := ex.Start(startCtx(t), Workload{LeaseID: "lease" + randHex(4), GPUs: all[i*4 : i*4+4],
			End: time.Now().Add(time.Hour), Command: []string{"sleep", "300"}})
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, run)
	}
	a, c := allocated(t, s, runs[0].Info().Handle), allocated(t, s, runs[1].Info().Handle)
	count := func(m map[string][]int) (n int) {
		for _, idx := range m {
			n += len(idx)
		}
		return n
	}
	if count(a) != 4 || count(c) != 4 {
		t.Fatalf("allocations %v and %v: want 4 GPUs each", a, c)
	}
	for node, idx := range a {
		for _, i := range idx {
			if slices.Contains(c[node], i) {
				t.Fatalf("GPU %d of %s in both jobs: %v, %v", i, node, a, c)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	_, err := ex.Start(ctx, Workload{LeaseID: "lease" + randHex(4), GPUs: all[:2], End: time.Now().Add(time.Hour), Command: []string{"true"}})
	cancel()
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "did not start") {
		t.Fatalf("a third job on a full node: %v, want refused as not started", err)
	}
	for _, r := range runs {
		r.Stop(time.Second)
	}
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run, err := ex.Start(ctx, Workload{LeaseID: "lease" + randHex(4), GPUs: all[:2], End: time.Now().Add(time.Hour), Command: []string{"sleep", "300"}})
	if err != nil {
		t.Fatalf("the freed GPUs: %v", err)
	}
	run.Stop(time.Second)
}

func TestSlurmRefusals(t *testing.T) {
	b, s := slurmCluster(t)
	ex := testSlurm(t, s)
	gpus := freeGPUs(t, b, 2)
	g0, _ := gpu.ParseSlurmUUID(gpus[0])
	other := g0
	other.Type = "a100"
	nine := slices.Clone(gpus)
	for i := range 7 {
		extra := g0
		extra.Index = 100 + i
		nine = append(nine, extra.UUID())
	}
	ctx := context.Background()
	for name, c := range map[string]struct {
		w    Workload
		want string
	}{
		"no command":   {Workload{GPUs: gpus}, "no command"},
		"image":        {Workload{GPUs: gpus, Command: []string{"true"}, Image: "x/y"}, "not supported"},
		"not slurm":    {Workload{GPUs: []string{"GPU-1234"}, Command: []string{"true"}}, "not a Slurm GPU"},
		"mixed types":  {Workload{GPUs: []string{gpus[0], other.UUID()}, Command: []string{"true"}}, "types"},
		"too many":     {Workload{GPUs: nine, Command: []string{"true"}}, "sbatch"},
		"unknown type": {Workload{GPUs: []string{other.UUID()}, Command: []string{"true"}}, "sbatch"},
	} {
		c.w.LeaseID = "lease" + randHex(4)
		_, err := ex.Start(ctx, c.w)
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want refused with %q", name, err, c.want)
		}
	}
	// Negative control: the same GPUs with a command run.
	run, err := ex.Start(ctx, Workload{LeaseID: "lease" + randHex(4), GPUs: gpus, Command: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	<-run.Done()
	if res := run.Result(); res.Code != 0 || res.Error != "" {
		t.Errorf("control: %+v", res)
	}
}

// TestSlurmAdoptAndSweep: a daemon that goes away leaves its job running;
// a new executor (the restarted daemon) adopts it by its handle and
// lease, cancels what no lease owns, and leaves another owner's job alone.
func TestSlurmAdoptAndSweep(t *testing.T) {
	b, s := slurmCluster(t)
	ex := testSlurm(t, s)
	gpus := freeGPUs(t, b, 6)
	start := func(ex *SlurmExecutor, lease string, g []string, out io.Writer) Execution {
		t.Helper()
		run, err := ex.Start(startCtx(t), Workload{LeaseID: lease, GPUs: g, End: time.Now().Add(time.Hour), Stdout: out,
			Command: []string{"sh", "-c", "i=0; while :; do echo tick $i; i=$((i+1)); sleep 0.2; done"}})
		if err != nil {
			t.Fatal(err)
		}
		return run
	}
	kept, lost := "lease"+randHex(4), "lease"+randHex(4)
	runKept := start(ex, kept, gpus[:2], nil)
	runLost := start(ex, lost, gpus[2:4], nil)
	stranger := testSlurm(t, s)
	runStranger := start(stranger, kept, gpus[4:6], nil) // same lease ID, another owner
	handle := runKept.Info().Handle
	// The daemon exits: its watchers stop, the jobs run on.
	for _, r := range []Execution{runKept, runLost} {
		r.(Detacher).Detach()
		<-r.Done()
		if !r.Result().Detached {
			t.Fatalf("detached run: %+v", r.Result())
		}
	}
	restarted := &SlurmExecutor{Slurm: s, Owner: ex.Owner, SpotPartition: "spot", WorkRoot: ex.WorkRoot, Poll: ex.Poll}
	removed, err := restarted.Sweep(context.Background(), func(l string) bool { return l == kept })
	if err != nil || !slices.Equal(removed, []string{lost}) {
		t.Fatalf("Sweep = %v, %v; want [%s]", removed, err, lost)
	}
	if _, err := restarted.Adopt(context.Background(), Workload{LeaseID: lost}, runLost.Info().Handle); !errors.Is(err, ErrGone) {
		t.Errorf("adopting the swept lease: %v, want ErrGone", err)
	}
	if _, err := restarted.Adopt(context.Background(), Workload{LeaseID: lost}, handle); !errors.Is(err, ErrGone) {
		t.Errorf("adopting another lease's job: %v, want ErrGone", err)
	}
	var out syncBuf
	run, err := restarted.Adopt(context.Background(), Workload{LeaseID: kept, Stdout: &out}, handle)
	if err != nil {
		t.Fatal(err)
	}
	if run.Info().Handle != handle || run.Info().State != "running" {
		t.Errorf("adopted info %+v", run.Info())
	}
	slurmWait(t, 30*time.Second, "the adopted job's output", func() bool { return strings.Contains(out.String(), "tick") })
	// The stranger's job, same lease ID but another owner, still runs.
	if j, _ := stranger.job(context.Background(), runStranger.Info().Handle); j == nil || j.State != "RUNNING" {
		t.Errorf("another owner's job: %+v", j)
	}
	run.Stop(time.Second)
	if res := run.Result(); res.Error != "" {
		t.Errorf("adopted result %+v", res)
	}
}

// TestSlurmSpotPreempted: a spot lease runs in the preemptible
// partition; when an on-demand job needs its GPUs, Slurm signals it
// (SIGTERM, then the partition's grace time) and cancels it, and the
// lease ends preempted with the job's notice in its output.
func TestSlurmSpotPreempted(t *testing.T) {
	b, s := slurmCluster(t)
	ex := testSlurm(t, s)
	all := freeGPUs(t, b, 8)
	var out syncBuf
	spot, err := ex.Start(startCtx(t), Workload{LeaseID: "lease" + randHex(4), GPUs: all, Spot: true,
		End: time.Now().Add(time.Hour), Stdout: &out,
		Command: []string{"sh", "-c", `trap 'echo notice: preempted; exit 0' TERM; echo ready; while :; do sleep 0.1; done`}})
	if err != nil {
		t.Fatal(err)
	}
	slurmWait(t, 30*time.Second, "the spot job to run", func() bool { return strings.Contains(out.String(), "ready") })
	if j, _ := ex.job(context.Background(), spot.Info().Handle); j == nil || j.Partition != "spot" {
		t.Fatalf("spot job: %+v", j)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	od, err := ex.Start(ctx, Workload{LeaseID: "lease" + randHex(4), GPUs: all[:2], End: time.Now().Add(time.Hour), Command: []string{"sleep", "300"}})
	if err != nil {
		t.Fatalf("the on-demand job did not preempt the spot one: %v", err)
	}
	select {
	case <-spot.Done():
	case <-time.After(time.Minute):
		t.Fatal("the spot lease did not end")
	}
	if res := spot.Result(); !strings.Contains(res.Error, "preempted") {
		t.Errorf("spot result %+v, want preempted", res)
	}
	if !strings.Contains(out.String(), "notice: preempted") {
		t.Errorf("the spot job got no signal: output %q", out.String())
	}
	od.Stop(time.Second)
}

func TestPlanSlurm(t *testing.T) {
	u := func(node, typ string, i int) string {
		return gpu.SlurmGPU{Cluster: "c", Node: node, Type: typ, Index: i}.UUID()
	}
	p, err := PlanSlurm([]string{u("n1", "h100", 0), u("n2", "h100", 0), u("n1", "h100", 1), u("n2", "h100", 3)})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(p.Args(), " "); got != "--nodes=2 --nodelist=n1,n2 --gres=gpu:h100:2" {
		t.Errorf("even multi-node: %s", got)
	}
	p, _ = PlanSlurm([]string{u("n1", "h100", 0), u("n2", "h100", 0), u("n1", "h100", 1)})
	if got := strings.Join(p.Args("--time=5"), " "); got != "--time=5 --nodes=1 --nodelist=n1 --gres=gpu:h100:2 : --time=5 --nodes=1 --nodelist=n2 --gres=gpu:h100:1" {
		t.Errorf("uneven multi-node: %s", got)
	}
	if _, err := PlanSlurm([]string{u("n1", "h100", 0), u("n1", "a100", 1)}); !errors.Is(err, ErrRefused) {
		t.Errorf("mixed types: %v", err)
	}
	if _, err := PlanSlurm([]string{u("n1", "h100", 0), u("n1", "h100", 0)}); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "twice") {
		t.Errorf("a GPU twice: %v", err)
	}
	if got := string(batchScript(Workload{LeaseID: "L", Command: []string{"echo", "it's $HOME"}})); !strings.Contains(got, `exec 'echo' 'it'\''s $HOME'`) {
		t.Errorf("script %q", got)
	}
}
