package node

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/gpu"
	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/executor"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// WorkloadSpec is what a buyer's bid asks the provider to run on the
// leased GPUs (see executor.Spec). The buyer's node keeps it with the
// order and sends it over /suanli/exec/1.0.0 once the lease starts.
type WorkloadSpec = executor.Spec

// execRequest is the first frame of an exec stream: the buyer's workload
// for one of its leases, or (Attach) a reconnection to the one that runs.
type execRequest struct {
	Lease string `json:"lease"`
	WorkloadSpec
	// Attach asks for the running workload's state and its output since
	// SinceMs, after the stream broke (a provider restart, say).
	Attach  bool  `json:"attach,omitempty"`
	SinceMs int64 `json:"since_ms,omitempty"`
}

// decodeExecRequest parses and checks an exec request.
func decodeExecRequest(body []byte) (execRequest, error) {
	var req execRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return req, fmt.Errorf("malformed exec request: %v", err)
	}
	if req.Lease == "" {
		return req, errors.New("malformed exec request: no lease")
	}
	if !req.Attach {
		if err := req.WorkloadSpec.Validate(); err != nil {
			return req, err
		}
	}
	return req, nil
}

// isolationLevels orders the levels, weakest first, as the offer's
// proto.IsolationLevel numbers them (from 1).
var isolationLevels = []string{api.IsolationNone, api.IsolationProcess, api.IsolationContainer, api.IsolationContainerUserNS}

// isolationProto is the offer's form of a level.
func isolationProto(level string) proto.IsolationLevel {
	if i := slices.Index(isolationLevels, level); i >= 0 {
		return proto.IsolationLevel(i + 1)
	}
	return proto.IsolationLevel_ISOLATION_LEVEL_UNSPECIFIED
}

// isolationName is a level as the API shows it ("" when unstated).
func isolationName(l proto.IsolationLevel) string {
	if i := int(l) - 1; i >= 0 && i < len(isolationLevels) {
		return isolationLevels[i]
	}
	return ""
}

// isolationAtLeast reports whether an offer's level meets min ("": any).
func isolationAtLeast(l proto.IsolationLevel, min string) bool {
	return min == "" || slices.Index(isolationLevels, isolationName(l)) >= slices.Index(isolationLevels, min)
}

// addIsolation records what an executor enforces; the node's level is the
// weakest of the executors that run buyer code.
func (n *Node) addIsolation(e api.ExecutorIsolation) {
	if n.isolation == nil {
		n.isolation = &api.IsolationView{Level: api.IsolationNone}
	}
	if len(n.isolation.Executors) == 0 || slices.Index(isolationLevels, e.Level) < slices.Index(isolationLevels, n.isolation.Level) {
		n.isolation.Level = e.Level
	}
	n.isolation.Executors = append(n.isolation.Executors, e)
}

func processIsolation(p *executor.ProcessExecutor) api.ExecutorIsolation {
	iso := p.Isolation()
	who := "each lease its own uid of " + iso.UIDs
	if iso.User != "" {
		who = "the account " + iso.User + ", one lease at a time"
	}
	return api.ExecutorIsolation{Executor: ExecProcess, Level: api.IsolationProcess,
		Enforced: []string{
			"runs as " + who + ", never the daemon's uid",
			"cgroup " + iso.Cgroups + " per lease: CPU, memory and processes sold are limits; Stop ends every descendant (setsid, double fork)",
			"private 0700 work dir under " + iso.WorkRoot + ", scrubbed environment",
		},
		NotEnforced: []string{"disk sold", "network: the workload shares the host's network", "the host's files readable by any user"},
	}
}

func dockerIsolation(iso executor.DockerIsolation) api.ExecutorIsolation {
	e := api.ExecutorIsolation{Executor: ExecDocker, Level: api.IsolationContainer,
		Enforced: []string{"container per lease, capabilities dropped, no new privileges, read-only root", iso.Network, iso.Disk, "logs capped at " + iso.Logs}}
	if iso.UserNS {
		e.Level = api.IsolationContainerUserNS
		e.Enforced = append(e.Enforced, "user namespaces: a container's root is an unprivileged host uid")
	} else {
		e.NotEnforced = append(e.NotEnforced, "user namespaces: a container's root is the host's root (set userns-remap)")
	}
	if !iso.DiskQuota {
		e.NotEnforced = append(e.NotEnforced, "storage quota on "+iso.StorageDriver+": no writable root when disk is sold")
	}
	return e
}

// newExecutors builds the executors the provider allows.
func (n *Node) newExecutors(o options) (map[string]Executor, error) {
	execs := map[string]Executor{ExecReserve: executor.ReserveExecutor{}}
	n.isolation = &api.IsolationView{Level: api.IsolationNone, Executors: []api.ExecutorIsolation{}}
	if slices.Contains(o.executors, ExecProcess) {
		pc := o.process
		pc.OnBusy, pc.Owner = n.setBusy, n.host.ID().String()
		if pc.WorkRoot == "" {
			pc.WorkRoot = filepath.Join(os.TempDir(), "suanli-work")
		}
		p, err := executor.NewProcess(pc)
		if err != nil {
			return nil, fmt.Errorf("node: process executor: %w", err)
		}
		execs[ExecProcess] = p
		n.addIsolation(processIsolation(p))
	}
	if slices.Contains(o.executors, ExecDocker) {
		cfg := DockerConfig{}
		if o.docker != nil {
			cfg = *o.docker
		}
		if cfg.OnBusy == nil {
			cfg.OnBusy = n.setBusy
		}
		cfg.Owner = n.host.ID().String()
		if _, sim := n.gpus.(gpu.Simulator); cfg.EnvOnlyGPUs && !sim && n.gpus != nil {
			return nil, errors.New("node: env-only GPUs are for simulated GPUs only: real GPUs need the engine's NVIDIA runtime")
		}
		d, err := executor.NewDocker(cfg)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		nvidia, err := d.Ping(ctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("node: docker executor: %w", err)
		}
		if !nvidia && !cfg.EnvOnlyGPUs {
			n.log.Warn("the container engine has no NVIDIA runtime: docker leases will be refused")
		}
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		iso, err := d.Isolation(ctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("node: docker executor: %w", err)
		}
		n.addIsolation(dockerIsolation(iso))
		if !iso.UserNS {
			n.log.Warn("the container engine does not remap user namespaces: a container's root is the host's root, held back only by dropped capabilities (set userns-remap, see README)")
		}
		if !iso.DiskQuota {
			n.log.Warn("the container engine's storage has no quota: the disk sold is a memory-backed /scratch, and leases asking for a writable root are refused when disk is sold", "driver", iso.StorageDriver)
		}
		execs[ExecDocker] = d
	} else if o.docker != nil {
		return nil, errors.New("node: WithDocker without WithExecutors(\"docker\")")
	}
	if slices.Contains(o.executors, ExecSlurm) {
		x, err := n.newSlurmExecutor(o)
		if err != nil {
			return nil, err
		}
		execs[ExecSlurm] = x
	}
	return execs, nil
}

// leaseLimits is what a lease of gpus GPUs may use on this provider.
func (n *Node) leaseLimits(gpus int) executor.Limits {
	p := n.resourcesPerGPU()
	return executor.Limits{MilliCPUs: p.milliCPUs * int64(gpus), MemoryBytes: int64(p.ram) * int64(gpus), DiskBytes: int64(p.disk) * int64(gpus)}
}

// resourcesPerGPU is what each GPU is sold with: as configured, or the
// host's cores and memory shared out among its GPUs.
func (n *Node) resourcesPerGPU() perGPU {
	p := n.perGPU
	gpus := 1
	if inv := n.inventoryCount(); inv > 0 {
		gpus = inv
	}
	if p.milliCPUs == 0 {
		p.milliCPUs = int64(runtime.NumCPU()) * 1000 / int64(gpus)
	}
	if p.ram == 0 {
		p.ram = hostMemory() / uint64(gpus)
	}
	return p
}

// hostMemory is the machine's RAM in bytes, 0 if unknown.
func hostMemory() uint64 {
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) != nil {
		return 0
	}
	return uint64(si.Totalram) * uint64(si.Unit)
}

// inventoryCount is how many GPUs this provider has, 0 for a buyer.
func (n *Node) inventoryCount() int {
	if n.gpus == nil {
		return 0
	}
	inv, err := n.gpus.Inventory()
	if err != nil {
		return 0
	}
	return len(inv.Devices)
}

// pausedHold is HeldSince while a workload is prepared: billing waits for
// it to run.
const pausedHold = math.MaxInt64

// workloadOf is the executor's view of a lease's workload.
func (n *Node) workloadOf(r *leaseRun, spec WorkloadSpec) Workload {
	return Workload{LeaseID: r.id, GPUs: r.terms.Gpus, Command: spec.Command, Image: spec.Image, Ports: spec.Ports,
		SSHKey: spec.SSHKey, WritableRoot: spec.WritableRoot, Limits: n.leaseLimits(len(r.terms.Gpus)),
		End: market.LeaseEnd(r.terms), Spot: market.LeaseType(r.terms.LeaseType) == market.Spot}
}

// handleExec is the provider's side of /suanli/exec/1.0.0: it runs the
// buyer's workload with the executor it asks for, streaming what it is,
// its output and how it ended, until it exits or the lease ends. A
// workload that cannot run fails the lease; one that ends by itself ends
// it (exited), and billing stops with it.
func (n *Node) handleExec(ctx context.Context, from peer.ID, body []byte, out *p2p.FrameWriter) {
	exit := func(res ExitResult) {
		b, _ := json.Marshal(res)
		out.Frame(p2p.FrameExit, b)
	}
	req, err := decodeExecRequest(body)
	if err != nil {
		n.metrics.rejects.WithLabelValues("exec", "malformed").Inc()
		exit(ExitResult{Code: -1, Error: err.Error()})
		return
	}
	r, err := n.leaseRun(req.Lease)
	if err != nil || r.rec.Role != market.RoleProvider || r.peer != from {
		exit(ExitResult{Code: -1, Error: "no such lease with this buyer"})
		return
	}
	r.mu.Lock()
	asked := r.rec.Workload != nil
	r.mu.Unlock()
	if req.Attach || asked {
		n.attachExec(ctx, r, req, out)
		return
	}
	name := n.executorFor(req.ExecutorName())
	r.mu.Lock()
	if r.ml.State != market.LeaseRunning {
		r.mu.Unlock()
		exit(ExitResult{Code: -1, Error: "lease not running"})
		return
	}
	spec := req.WorkloadSpec
	r.rec.Workload, r.rec.Executor, r.rec.Exec = &spec, name, spec.Command
	// An image may take minutes to pull, a Slurm job to be scheduled; a
	// process starts at once.
	pause := name == ExecDocker || name == ExecSlurm
	if pause {
		r.rec.HeldSince = pausedHold
	}
	n.putRecordLocked(r)
	r.mu.Unlock()

	if wait := time.UnixMilli(r.terms.StartUnixMs).Sub(n.now()); wait > 0 {
		// A lease agreed now for later (its GPUs freed by a preemption):
		// its workload starts with it.
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(wait):
		}
	}
	var run Execution
	ex, ok := n.leases.executors[name]
	if !ok {
		err = fmt.Errorf("%w: %w: %s", executor.ErrRefused, api.ErrExecutor, name)
	} else {
		w := n.workloadOf(r, spec)
		w.Stdout, w.Stderr = lenient{out.Kind(p2p.FrameStdout)}, lenient{out.Kind(p2p.FrameStderr)}
		sctx, cancel := context.WithTimeout(n.ctx, workloadStartBudget)
		run, err = ex.Start(sctx, w)
		cancel()
	}
	if err != nil {
		reason := "workload refused"
		if !errors.Is(err, executor.ErrRefused) {
			reason = "workload failed to start"
		}
		n.metrics.rejects.WithLabelValues("exec", strings.ReplaceAll(reason, " ", "-")).Inc()
		note := reason + ": " + err.Error()
		res := ExitResult{Code: -1, Error: note}
		r.mu.Lock()
		r.rec.Exit = &res
		failed := r.ml.State == market.LeaseRunning
		if failed {
			n.endLocked(r, market.CloseFailed, n.now(), note)
		}
		at := r.ml.ClosedAt
		r.mu.Unlock()
		n.log.Warn("workload not started", "lease", r.id, "executor", name, "err", err)
		if failed {
			n.sendClose(r, market.CloseFailed, at, note)
		}
		r.poke()
		exit(res)
		return
	}
	info := run.Info()
	r.mu.Lock()
	if r.ml.State != market.LeaseRunning {
		// Ended (closed by the buyer, say) while it was prepared.
		r.mu.Unlock()
		run.Stop(leaseStopGrace)
		exit(run.Result())
		return
	}
	old := r.exec
	r.exec, r.rec.Info, r.rec.Handle = run, &info, info.Handle
	if pause {
		r.rec.HeldSince = n.now().UnixMilli()
	}
	n.putRecordLocked(r)
	r.mu.Unlock()
	if old != nil {
		old.Stop(0)
	}
	n.log.Info("workload started", "lease", r.id, "executor", name, "handle", info.Handle, "image", info.Image)
	b, _ := json.Marshal(info)
	out.Frame(p2p.FrameStarted, b)
	if res := n.watchWorkload(r, run); !res.Detached {
		exit(res)
	} // else the daemon is closing: the buyer reattaches after its restart
}

// attachExec answers a buyer reconnecting to its lease's workload: what it
// is, its output since the request's time, and how it ends.
func (n *Node) attachExec(ctx context.Context, r *leaseRun, req execRequest, out *p2p.FrameWriter) {
	var run Execution
	for {
		r.mu.Lock()
		if r.rec.Info != nil && r.exec != nil && r.rec.Exit == nil {
			run = r.exec
		}
		exit, open := r.rec.Exit, r.ml.State == market.LeaseRunning
		r.mu.Unlock()
		if run != nil {
			break
		}
		if exit != nil || !open {
			if exit == nil {
				exit = &ExitResult{Code: -1, Error: "the lease ended before its workload ran"}
			}
			b, _ := json.Marshal(exit)
			out.Frame(p2p.FrameExit, b)
			return
		}
		select { // still being prepared
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
	b, _ := json.Marshal(run.Info())
	out.Frame(p2p.FrameStarted, b)
	if lf, ok := run.(executor.LogFollower); ok {
		lctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go lf.FollowLogs(lctx, time.UnixMilli(req.SinceMs), lenient{out.Kind(p2p.FrameStdout)}, lenient{out.Kind(p2p.FrameStderr)})
	}
	select {
	case <-run.Done():
	case <-ctx.Done():
		return
	}
	if res := run.Result(); !res.Detached {
		b, _ = json.Marshal(res)
		out.Frame(p2p.FrameExit, b)
	}
}

// watchWorkload waits for run to end and records how; a lease still
// running then ends as exited. It returns the result.
func (n *Node) watchWorkload(r *leaseRun, run Execution) ExitResult {
	<-run.Done()
	res := run.Result()
	if res.Detached {
		return res
	}
	info := run.Info()
	r.mu.Lock()
	if r.exec != run {
		r.mu.Unlock()
		return res
	}
	r.rec.Exit, r.rec.Info = &res, &info
	var note string
	// A preempted lease's workload was told to stop; the lease ends at
	// its notice's end all the same.
	ended := r.ml.State == market.LeaseRunning && r.rec.PreemptAt.IsZero()
	if ended {
		note = exitNote(res)
		n.endLocked(r, market.CloseExited, n.now(), note)
	} else {
		n.putRecordLocked(r)
	}
	at := r.ml.ClosedAt
	r.mu.Unlock()
	n.log.Info("workload ended", "lease", r.id, "code", res.Code, "signal", res.Signal, "oom", res.OOMKilled)
	if ended {
		n.sendClose(r, market.CloseExited, at, note)
	}
	r.poke()
	return res
}

func exitNote(res ExitResult) string {
	switch {
	case res.OOMKilled:
		return "workload killed for exceeding its memory limit"
	case res.Signal != "":
		return "workload killed by " + res.Signal
	case res.Error != "":
		return "workload ended: " + res.Error
	}
	return fmt.Sprintf("workload exited with code %d", res.Code)
}

// resumeWorkload takes back, after a restart, the workload a provider's
// lease ran: adopted when its executor can (containers), else the lease
// fails, since what the buyer bought no longer runs.
func (n *Node) resumeWorkload(r *leaseRun) {
	handle := r.rec.Handle
	if handle == "" && r.rec.Pgid != 0 {
		handle = fmt.Sprint(r.rec.Pgid) // a record from before handles
	}
	spec := WorkloadSpec{Executor: r.rec.Executor, Command: r.rec.Exec}
	if r.rec.Workload != nil {
		spec = *r.rec.Workload
	}
	var run Execution
	err := fmt.Errorf("%w: executor %s is not enabled", executor.ErrGone, r.rec.Executor)
	if ad, ok := n.leases.executors[r.rec.Executor].(executor.Adopter); ok {
		ctx, cancel := context.WithTimeout(n.ctx, time.Minute)
		run, err = ad.Adopt(ctx, n.workloadOf(r, spec), handle)
		cancel()
	}
	r.mu.Lock()
	r.rec.Pgid = 0
	if err != nil {
		res := ExitResult{Code: -1, Error: "provider restarted: " + err.Error()}
		r.rec.Exit = &res
		r.exec, _ = executor.ReserveExecutor{}.Start(n.ctx, Workload{})
		note := "the workload did not survive the provider's restart"
		n.endLocked(r, market.CloseFailed, n.now(), note)
		at := r.ml.ClosedAt
		r.mu.Unlock()
		n.log.Warn("workload not resumed", "lease", r.id, "err", err)
		n.spawn(func() {
			n.sendClose(r, market.CloseFailed, at, note)
		})
		return
	}
	info := run.Info()
	r.exec, r.rec.Info, r.rec.Handle = run, &info, info.Handle
	if r.rec.HeldSince == pausedHold {
		r.rec.HeldSince = n.now().UnixMilli()
	}
	n.putRecordLocked(r)
	r.mu.Unlock()
	n.log.Info("workload adopted", "lease", r.id, "executor", r.rec.Executor, "handle", info.Handle)
	n.spawn(func() {
		n.watchWorkload(r, run)
	})
}

// sweepWorkloads removes what executors left of leases this node no
// longer runs (a lease closed while the daemon was down, say).
func (n *Node) sweepWorkloads() {
	keep := func(id string) bool {
		n.leases.mu.Lock()
		defer n.leases.mu.Unlock()
		r := n.leases.runs[id]
		if r == nil {
			return false
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.rec.Role == market.RoleProvider && r.ml.State != market.LeaseClosed
	}
	for name, ex := range n.leases.executors {
		ad, ok := ex.(executor.Adopter)
		if !ok {
			continue
		}
		ctx, cancel := context.WithTimeout(n.ctx, time.Minute)
		removed, err := ad.Sweep(ctx, keep)
		cancel()
		if err != nil {
			n.log.Warn("sweeping workloads failed", "executor", name, "err", err)
		}
		if len(removed) > 0 {
			n.log.Info("removed workloads of no open lease", "executor", name, "leases", removed)
		}
	}
}

// followExec is the buyer's side: it sends the order's workload once the
// lease starts, then stores what the provider streams back — what runs
// and where to reach it, the output, the exit. A broken stream (the
// provider restarting) is reopened as an attach while the lease runs.
func (n *Node) followExec(r *leaseRun) {
	backoff := 500 * time.Millisecond
	var lastOutput int64
	for attempt := 0; ; attempt++ {
		r.mu.Lock()
		spec := WorkloadSpec{Command: r.rec.Exec}
		if r.rec.Workload != nil {
			spec = *r.rec.Workload
		}
		running := r.ml.State == market.LeaseRunning
		r.mu.Unlock()
		if !running && attempt > 0 {
			return
		}
		req, _ := json.Marshal(execRequest{Lease: r.id, WorkloadSpec: spec, Attach: attempt > 0, SinceMs: lastOutput})
		done, err := n.execOnce(r, req, &lastOutput)
		if done {
			return
		}
		r.mu.Lock()
		if r.execDownSince.IsZero() {
			r.execDownSince = n.now() // no word from the workload (market.VouchWindow)
		}
		r.mu.Unlock()
		if attempt == 0 && err != nil {
			n.appendLog(r, p2p.FrameStderr, []byte("suanli: "+err.Error()+"\n"))
		}
		n.log.Debug("exec stream broke; reconnecting", "lease", r.id, "err", err)
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// execOnce runs one exec stream; done reports that the workload's end was
// told (or the node is closing).
func (n *Node) execOnce(r *leaseRun, req []byte, lastOutput *int64) (done bool, err error) {
	ctx, cancel := context.WithTimeout(n.ctx, 30*time.Second)
	s, err := p2p.OpenExec(ctx, n.host, r.peer, req)
	cancel()
	if err != nil {
		return n.ctx.Err() != nil, err
	}
	defer s.Close()
	stop := context.AfterFunc(n.ctx, func() { s.Reset() })
	defer stop()
	br := bufio.NewReader(s)
	for {
		kind, body, err := p2p.ReadFrame(br)
		if err != nil {
			return n.ctx.Err() != nil, err
		}
		switch kind {
		case p2p.FrameStdout, p2p.FrameStderr:
			*lastOutput = n.now().UnixMilli()
			n.appendLog(r, kind, body)
		case p2p.FrameStarted:
			var info executor.Info
			if json.Unmarshal(body, &info) == nil {
				r.mu.Lock()
				r.rec.Info, r.rec.Executor = &info, info.Executor
				r.execDownSince = time.Time{}
				n.putRecordLocked(r)
				r.mu.Unlock()
			}
		case p2p.FrameExit:
			var res ExitResult
			if json.Unmarshal(body, &res) == nil {
				r.mu.Lock()
				r.rec.Exit = &res
				if r.exitedAt.IsZero() {
					r.exitedAt = n.now()
				}
				if r.rec.Executor == "" {
					r.rec.Executor = ExecProcess
				}
				if r.rec.Info != nil {
					r.rec.Info.State = "exited"
				}
				n.putRecordLocked(r)
				r.mu.Unlock()
			}
			return true, nil
		}
	}
}

// putRecordLocked stores r's record; a failed write ends a running lease
// as failed (failStoreLocked). Holds r.mu.
func (n *Node) putRecordLocked(r *leaseRun) {
	if err := n.putLeaseRecord(r.id, &r.rec); err != nil {
		n.failStoreLocked(r, "lease record", err)
	}
}

// lenient drops write errors: a buyer that goes away must not block or
// kill the workload.
type lenient struct {
	w interface{ Write([]byte) (int, error) }
}

func (l lenient) Write(b []byte) (int, error) { l.w.Write(b); return len(b), nil }
