package executor

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/suanli/suanli/gpu"
)

// Slurm is the name of the Slurm executor.
const Slurm = "slurm"

// SlurmJobPrefix begins the name of every job the Slurm executor submits
// ("suanli-<lease>"); its comment carries the owner and lease
// ("suanli owner=<peer> lease=<lease>"), so a restarted daemon adopts
// its own jobs, sweeps its own leftovers, and never touches another's.
const SlurmJobPrefix = "suanli-"

var (
	_ Adopter     = (*SlurmExecutor)(nil)
	_ Execution   = (*slurmRun)(nil)
	_ LogFollower = (*slurmRun)(nil)
	_ Detacher    = (*slurmRun)(nil)
)

// SlurmExecutor runs a lease as a Slurm batch job: the leased GPUs'
// nodes as its node list, --gres=gpu:TYPE:N on each (Slurm picks the
// device indices and sets CUDA_VISIBLE_DEVICES), the lease's end as its
// time limit, the buyer's argv as the batch script. Slurm, not Suanli,
// places the job: GPUs the cluster's own users hold are not free, and two
// jobs never share a GPU. Stop cancels the job (scancel: SIGTERM, then
// SIGKILL after the cluster's KillWait).
//
// The job's output goes to a file under WorkRoot, which the daemon follows
// and streams as the buyer's stdout; on a real cluster WorkRoot must be on
// a filesystem the compute nodes and the daemon share.
type SlurmExecutor struct {
	// Slurm is the CLI to reach the cluster.
	Slurm gpu.Slurm
	// Owner names this provider in the jobs' comments (its peer ID).
	Owner string
	// Partition for on-demand and reserved leases; empty: the cluster's
	// default. SpotPartition for spot leases (a preemptible, lower
	// priority tier); empty: Partition.
	Partition, SpotPartition string
	// WorkRoot holds each job's working directory and output file.
	WorkRoot string
	// Poll is how often a job's state and output are read; default 500ms.
	Poll time.Duration
}

// Name implements Executor.
func (*SlurmExecutor) Name() string { return Slurm }

func (s *SlurmExecutor) comment(lease string) string {
	return "suanli owner=" + s.Owner + " lease=" + lease
}

// leaseOfComment is the lease a comment names, if the job is this
// owner's.
func (s *SlurmExecutor) leaseOfComment(c string) (string, bool) {
	f := strings.Fields(c)
	if len(f) != 3 || f[0] != "suanli" || f[1] != "owner="+s.Owner {
		return "", false
	}
	return strings.CutPrefix(f[2], "lease=")
}

func (s *SlurmExecutor) poll() time.Duration {
	if s.Poll > 0 {
		return s.Poll
	}
	return 500 * time.Millisecond
}

// SlurmRequest is what a workload asks of Slurm, checked before anything
// is submitted.
type SlurmRequest struct {
	Nodes []string
	Type  string
	// PerNode is the GPUs on each node; Total their sum.
	PerNode []int
	Total   int
}

// Args are sbatch's arguments for the job: each's is the arguments every
// component takes (partition, time limit, reservation) and the placement.
// The same count on every node is one job with --gres per node. Uneven
// counts are a heterogeneous job, one component per node with its own
// --gres (components separated by ":"): --gpus=N over the nodes would let
// Slurm spread them its own way (4 over 2 nodes as 3+1 whatever was
// leased). A heterogeneous job is still one job: one ID, one batch script
// (on the first node; srun --het-group=0-K reaches all), one scancel.
func (r SlurmRequest) Args(each ...string) []string {
	typ := ""
	if r.Type != "" {
		typ = r.Type + ":"
	}
	if len(slices.Compact(slices.Clone(r.PerNode))) == 1 {
		return append(slices.Clone(each), "--nodes="+strconv.Itoa(len(r.Nodes)), "--nodelist="+strings.Join(r.Nodes, ","),
			"--gres=gpu:"+typ+strconv.Itoa(r.PerNode[0]))
	}
	var args []string
	for i, n := range r.Nodes {
		if i > 0 {
			args = append(args, ":")
		}
		args = append(args, each...)
		args = append(args, "--nodes=1", "--nodelist="+n, "--gres=gpu:"+typ+strconv.Itoa(r.PerNode[i]))
	}
	return args
}

// PlanSlurm maps leased GPU UUIDs (gpu.SlurmGPU) to a job's placement:
// one gres type, its nodes and how many on each. Several nodes make one
// multi-node job.
func PlanSlurm(uuids []string) (SlurmRequest, error) {
	var r SlurmRequest
	if len(uuids) == 0 {
		return r, fmt.Errorf("%w: slurm executor: no GPUs", ErrRefused)
	}
	count := map[string]int{}
	seen := map[string]bool{}
	for i, u := range uuids {
		if seen[u] {
			return r, fmt.Errorf("%w: slurm executor: GPU %s listed twice", ErrRefused, u)
		}
		seen[u] = true
		g, err := gpu.ParseSlurmUUID(u)
		if err != nil {
			return r, fmt.Errorf("%w: slurm executor: %v", ErrRefused, err)
		}
		if i == 0 {
			r.Type = g.Type
		} else if g.Type != r.Type {
			return r, fmt.Errorf("%w: slurm executor: GPUs of types %q and %q in one job", ErrRefused, r.Type, g.Type)
		}
		if count[g.Node] == 0 {
			r.Nodes = append(r.Nodes, g.Node)
		}
		count[g.Node]++
	}
	for _, n := range r.Nodes {
		r.PerNode = append(r.PerNode, count[n])
		r.Total += count[n]
	}
	return r, nil
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// batchScript is the job's script: the buyer's argv, exec'd, with the
// lease in the environment.
func batchScript(w Workload) []byte {
	var b bytes.Buffer
	b.WriteString("#!/bin/sh\n# Suanli lease " + w.LeaseID + "\n")
	b.WriteString("export SUANLI_LEASE=" + shellQuote(w.LeaseID) + "\n")
	b.WriteString("export SUANLI_GPUS=\"$CUDA_VISIBLE_DEVICES\"\n")
	b.WriteString("exec")
	for _, a := range w.Command {
		b.WriteString(" " + shellQuote(a))
	}
	b.WriteString("\n")
	return b.Bytes()
}

// timeLimit is the lease's remaining time as sbatch's --time (minutes,
// at least 1: Slurm keeps time limits in whole minutes).
func timeLimit(end, now time.Time) string {
	if end.IsZero() {
		return ""
	}
	m := int64((end.Sub(now) + time.Minute - 1) / time.Minute)
	return strconv.FormatInt(max(m, 1), 10)
}

// Start implements Executor: submit the job and wait until Slurm runs it
// (or ctx ends: the job is cancelled and the lease refused, with Slurm's
// reason it pends).
func (s *SlurmExecutor) Start(ctx context.Context, w Workload) (Execution, error) {
	if len(w.Command) == 0 {
		return nil, fmt.Errorf("%w: slurm executor: no command", ErrRefused)
	}
	if w.Image != "" || len(w.Ports) > 0 || w.SSHKey != "" {
		return nil, fmt.Errorf("%w: slurm executor: images, ports and SSH keys are not supported (Slurm's container support is not configured)", ErrRefused)
	}
	plan, err := PlanSlurm(w.GPUs)
	if err != nil {
		return nil, err
	}
	if s.Owner == "" || strings.ContainsAny(s.Owner+w.LeaseID, " \t\n\"'=") || w.LeaseID == "" {
		return nil, fmt.Errorf("%w: slurm executor: bad owner or lease ID", ErrRefused)
	}
	root := s.WorkRoot
	if root == "" {
		root = filepath.Join(os.TempDir(), "suanli-slurm")
	}
	dir := filepath.Join(root, w.LeaseID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("executor: slurm work dir: %w", err)
	}
	out := filepath.Join(dir, "output")
	os.Remove(out)
	args := []string{"--parsable", "--job-name=" + SlurmJobPrefix + w.LeaseID, "--comment=" + s.comment(w.LeaseID),
		"--chdir=" + dir, "--output=" + out, "--open-mode=append", "--no-requeue"}
	// Every component of a heterogeneous job takes these.
	var each []string
	part := s.Partition
	if w.Spot && s.SpotPartition != "" {
		part = s.SpotPartition
	}
	if part != "" {
		each = append(each, "--partition="+part)
	}
	if t := timeLimit(w.End, time.Now()); t != "" {
		each = append(each, "--time="+t)
	}
	// A reserved block held by Reserve runs in its reservation: the job
	// pends until the reservation starts, then has its nodes.
	resv, err := s.reservationOf(ctx, w.LeaseID)
	if err != nil {
		return nil, err
	}
	if resv != "" {
		each = append(each, "--reservation="+resv)
	}
	args = append(args, plan.Args(each...)...)
	res, err := s.Slurm.Run(ctx, batchScript(w), "sbatch", args...)
	if err != nil {
		return nil, fmt.Errorf("%w: slurm executor: %v", ErrRefused, err)
	}
	id, _, _ := strings.Cut(strings.TrimSpace(string(res)), ";")
	if _, err := strconv.ParseUint(id, 10, 64); err != nil {
		return nil, fmt.Errorf("%w: sbatch answered %q", gpu.ErrSlurm, res)
	}
	r := s.newRun(w, id, out)
	if err := r.waitRunning(ctx); err != nil {
		s.Slurm.Run(context.Background(), nil, "scancel", id)
		return nil, err
	}
	go r.watch(0)
	return r, nil
}

func (s *SlurmExecutor) newRun(w Workload, id, out string) *slurmRun {
	return &slurmRun{ex: s, w: w, id: id, out: out, done: make(chan struct{}), detach: make(chan struct{}), state: "PENDING"}
}

// Adopt implements Adopter: handle is the job ID. A job of this owner and
// lease that still runs is watched again, its output streamed from where
// the file is now; anything else is ErrGone (a pending one is cancelled).
func (s *SlurmExecutor) Adopt(ctx context.Context, w Workload, handle string) (Execution, error) {
	job, err := s.job(ctx, handle)
	if err != nil {
		return nil, err
	}
	if job == nil {
		return nil, fmt.Errorf("%w: job %s of lease %s is not known to Slurm", ErrGone, handle, w.LeaseID)
	}
	if l, ok := s.leaseOfComment(job.Comment); !ok || l != w.LeaseID {
		return nil, fmt.Errorf("%w: job %s is not lease %s's", ErrGone, handle, w.LeaseID)
	}
	if job.State != "RUNNING" {
		if job.State == "PENDING" {
			s.Slurm.Run(ctx, nil, "scancel", handle)
		}
		return nil, fmt.Errorf("%w: job %s is %s", ErrGone, handle, strings.ToLower(job.State))
	}
	var offset int64
	if fi, err := os.Stat(job.StdOut); err == nil {
		offset = fi.Size()
	}
	r := s.newRun(w, handle, job.StdOut)
	r.setJob(job)
	go r.watch(offset)
	return r, nil
}

// Sweep implements Adopter: cancel this owner's pending or running jobs
// and delete its reservations whose lease keep does not know.
func (s *SlurmExecutor) Sweep(ctx context.Context, keep func(string) bool) ([]string, error) {
	jobs, err := s.Slurm.Jobs(ctx)
	if err != nil {
		return nil, err
	}
	removed, err := s.sweepReservations(ctx, keep)
	if err != nil {
		return removed, err
	}
	for _, j := range jobs {
		lease, ok := s.leaseOfComment(j.Comment)
		if !ok || !strings.HasPrefix(j.Name, SlurmJobPrefix) || keep(lease) || j.HetJobID != "" && j.HetJobID != j.ID {
			continue // a heterogeneous job's component goes with its leader
		}
		if j.State != "PENDING" && j.State != "RUNNING" && j.State != "SUSPENDED" {
			continue
		}
		if _, err := s.Slurm.Run(ctx, nil, "scancel", j.ID); err != nil {
			return removed, err
		}
		if !slices.Contains(removed, lease) {
			removed = append(removed, lease)
		}
	}
	return removed, nil
}

// job is the job with this ID, nil when Slurm no longer knows it.
func (s *SlurmExecutor) job(ctx context.Context, id string) (*gpu.SlurmJob, error) {
	out, err := s.Slurm.Run(ctx, nil, "squeue", "--json", "--jobs="+id)
	if err != nil {
		if strings.Contains(err.Error(), "Invalid job id") {
			return nil, nil
		}
		return nil, err
	}
	jobs, err := gpu.ParseSqueue(out)
	if err != nil {
		return nil, err
	}
	return hetJob(jobs, id), nil
}

// hetJob is job id of jobs, nil if it is not there, with the GPUs of its
// other components when it leads a heterogeneous job.
func hetJob(jobs []gpu.SlurmJob, id string) *gpu.SlurmJob {
	i := slices.IndexFunc(jobs, func(j gpu.SlurmJob) bool { return j.ID == id })
	if i < 0 {
		return nil
	}
	job := jobs[i]
	if job.HetJobID != id {
		return &job
	}
	gpus := map[string][]gpu.SlurmGres{}
	for _, c := range jobs {
		if c.HetJobID == id {
			for n, gs := range c.GPUs {
				gpus[n] = append(gpus[n], gs...)
			}
		}
	}
	job.GPUs = gpus
	return &job
}

// slurmRun is one lease's job.
type slurmRun struct {
	ex     *SlurmExecutor
	w      Workload
	id     string
	out    string
	done   chan struct{}
	detach chan struct{}
	once   sync.Once

	mu      sync.Mutex
	state   string
	job     gpu.SlurmJob
	res     ExitResult
	stopped bool
}

func (r *slurmRun) setJob(j *gpu.SlurmJob) {
	r.mu.Lock()
	gpus := r.job.GPUs
	r.job, r.state = *j, j.State
	if len(j.GPUs) == 0 {
		r.job.GPUs = gpus // an ended job no longer lists its allocation
	}
	r.mu.Unlock()
}

// waitRunning polls until the job runs or has ended (then the watcher
// reports how), or ctx ends.
func (r *slurmRun) waitRunning(ctx context.Context) error {
	t := time.NewTicker(r.ex.poll())
	defer t.Stop()
	for {
		j, err := r.ex.job(ctx, r.id)
		if err == nil && j != nil {
			r.setJob(j)
			if j.State != "PENDING" && j.State != "CONFIGURING" {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			reason := "unknown"
			if j != nil {
				reason = j.Reason
			}
			return fmt.Errorf("%w: slurm job %s did not start (Slurm's reason: %s)", ErrRefused, r.id, reason)
		case <-t.C:
		}
	}
}

// watch follows the job's output from offset and its state until it
// ends or the run is detached.
func (r *slurmRun) watch(offset int64) {
	t := time.NewTicker(r.ex.poll())
	defer t.Stop()
	stdout := orDiscard(r.w.Stdout)
	misses := 0
	for {
		offset = copyFrom(r.out, offset, stdout)
		j, err := r.ex.job(context.Background(), r.id)
		switch {
		case err != nil:
			misses++ // the controller is briefly away: try again
		case j == nil:
			misses += 10 // forgotten: the job ended long ago
		default:
			misses = 0
			r.setJob(j)
			if ended(j.State) {
				copyFrom(r.out, offset, stdout)
				r.finish(resultOf(j, r.wasStopped()))
				return
			}
		}
		if misses >= 60 {
			r.finish(ExitResult{Code: -1, Error: fmt.Sprintf("slurm job %s: state unknown to the controller", r.id)})
			return
		}
		select {
		case <-r.detach:
			r.finish(ExitResult{Detached: true})
			return
		case <-t.C:
		}
	}
}

func (r *slurmRun) wasStopped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopped
}

func (r *slurmRun) finish(res ExitResult) {
	r.mu.Lock()
	r.res = res
	r.mu.Unlock()
	close(r.done)
}

// ended says whether a job in this state is over.
func ended(state string) bool {
	switch state {
	case "PENDING", "CONFIGURING", "RUNNING", "SUSPENDED", "COMPLETING", "REQUEUED", "RESIZING", "SIGNALING", "STAGE_OUT":
		return false
	}
	return true
}

// resultOf is how an ended job ended, as the lease sees it.
func resultOf(j *gpu.SlurmJob, stopped bool) ExitResult {
	res := ExitResult{Code: j.ExitCode}
	if j.Signal != 0 {
		res.Code, res.Signal = -1, "signal "+strconv.Itoa(j.Signal)
	}
	switch j.State {
	case "COMPLETED", "FAILED":
	case "CANCELLED":
		if !stopped {
			res.Code, res.Error = -1, "slurm job "+j.ID+" cancelled outside the lease"
		}
	case "PREEMPTED":
		res.Code, res.Error = -1, "slurm job "+j.ID+" preempted by the cluster (it had its partition's grace time after SIGTERM)"
	case "TIMEOUT":
		res.Code, res.Error = -1, "slurm job "+j.ID+" reached its time limit (the lease's end)"
	default:
		res.Code, res.Error = -1, "slurm job "+j.ID+" ended "+strings.ToLower(j.State)
	}
	return res
}

// copyFrom copies the file's bytes from offset on to w and returns the
// new offset.
func copyFrom(path string, offset int64, w io.Writer) int64 {
	f, err := os.Open(path)
	if err != nil {
		return offset
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return offset
	}
	n, _ := io.Copy(w, f)
	return offset + n
}

func (r *slurmRun) Done() <-chan struct{} { return r.done }

func (r *slurmRun) Result() ExitResult {
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.res
}

// Info implements Execution: the handle is the job ID, GPUAccess the gres
// Slurm allocated and the reservation the job runs in ("slurm
// gpu:h100:2[0 1] on vm in reservation suanli-L.P").
func (r *slurmRun) Info() Info {
	r.mu.Lock()
	defer r.mu.Unlock()
	access := "slurm"
	nodes := make([]string, 0, len(r.job.GPUs))
	for n := range r.job.GPUs {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	for _, n := range nodes {
		for _, g := range r.job.GPUs[n] {
			access += fmt.Sprintf(" gpu:%s:%d%v on %s", g.Type, g.Count, g.Used, n)
		}
	}
	if r.job.Reservation != "" {
		access += " in reservation " + r.job.Reservation
	}
	return Info{Executor: Slurm, Handle: r.id, State: strings.ToLower(r.state), GPUAccess: access, Started: r.job.Start}
}

// Stop implements Execution: scancel (SIGTERM, SIGKILL after KillWait),
// then SIGKILL if the job outlives grace plus a minute; the lease's
// reservation, if it has one, is deleted.
func (r *slurmRun) Stop(grace time.Duration) error {
	defer r.ex.Release(context.Background(), r.w.LeaseID)
	select {
	case <-r.done:
		return nil
	default:
	}
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
	ctx := context.Background()
	if _, err := r.ex.Slurm.Run(ctx, nil, "scancel", r.id); err != nil {
		return err
	}
	select {
	case <-r.done:
		return nil
	case <-time.After(grace + time.Minute):
	}
	r.ex.Slurm.Run(ctx, nil, "scancel", "--signal=KILL", "--full", r.id)
	<-r.done
	return nil
}

// Detach implements Detacher: the job runs on; a restarted daemon adopts
// it.
func (r *slurmRun) Detach() { r.once.Do(func() { close(r.detach) }) }

// FollowLogs implements LogFollower. The output file has no timestamps:
// it is copied from its start whatever since is, then followed until the
// job ends or ctx is done. Slurm merges stderr into it.
func (r *slurmRun) FollowLogs(ctx context.Context, _ time.Time, stdout, _ io.Writer) error {
	var off int64
	t := time.NewTicker(r.ex.poll())
	defer t.Stop()
	for {
		off = copyFrom(r.out, off, orDiscard(stdout))
		select {
		case <-r.done:
			copyFrom(r.out, off, orDiscard(stdout))
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
