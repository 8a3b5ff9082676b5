package lease

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/executor"
	"github.com/suanli/suanli/node/internal/leases"
	"github.com/suanli/suanli/p2p"
)

// execRequest is the first frame of an exec stream: the buyer's workload
// for one of its leases, or (Attach) a reconnection to the one that runs.
type execRequest struct {
	Lease string `json:"lease"`
	executor.Spec
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
		if err := req.Spec.Validate(); err != nil {
			return req, err
		}
	}
	return req, nil
}

// pausedHold is HeldSince while a workload is prepared: billing waits for
// it to run.
const pausedHold = math.MaxInt64

// workloadOf is the executor's view of a lease's workload.
func (m *Manager) workloadOf(r *Run, spec executor.Spec) executor.Workload {
	return executor.Workload{LeaseID: r.id, GPUs: r.terms.Gpus, Command: spec.Command, Image: spec.Image, Ports: spec.Ports,
		SSHKey: spec.SSHKey, WritableRoot: spec.WritableRoot, Limits: m.hooks.Limits(len(r.terms.Gpus)),
		End: market.LeaseEnd(r.terms), Spot: market.LeaseType(r.terms.LeaseType) == market.Spot}
}

// handleExec is the provider's side of /suanli/exec/1.0.0: it runs the
// buyer's workload with the executor it asks for, streaming what it is,
// its output and how it ended, until it exits or the lease ends. A
// workload that cannot run fails the lease; one that ends by itself ends
// it (exited), and billing stops with it.
func (m *Manager) handleExec(ctx context.Context, from peer.ID, body []byte, out *p2p.FrameWriter) {
	exit := func(res executor.ExitResult) {
		b, _ := json.Marshal(res)
		out.Frame(p2p.FrameExit, b)
	}
	req, err := decodeExecRequest(body)
	if err != nil {
		m.metrics.Reject("exec", "malformed")
		exit(executor.ExitResult{Code: -1, Error: err.Error()})
		return
	}
	r, err := m.Lookup(req.Lease)
	if err != nil || r.rec.Role != market.RoleProvider || r.peer != from {
		m.metrics.Reject("exec", "unknown-lease")
		exit(executor.ExitResult{Code: -1, Error: "no such lease with this buyer"})
		return
	}
	r.mu.Lock()
	asked := r.rec.Workload != nil
	r.mu.Unlock()
	if req.Attach || asked {
		m.attachExec(ctx, r, req, out)
		return
	}
	name := m.executorFor(req.ExecutorName())
	r.mu.Lock()
	if r.ml.State != market.LeaseRunning {
		r.mu.Unlock()
		m.metrics.Reject("exec", "not-running")
		exit(executor.ExitResult{Code: -1, Error: "lease not running"})
		return
	}
	spec := req.Spec
	r.rec.Workload, r.rec.Executor, r.rec.Exec = &spec, name, spec.Command
	// An image may take minutes to pull, a Slurm job to be scheduled; a
	// process starts at once.
	pause := name == executor.Docker || name == executor.Slurm
	if pause {
		r.rec.HeldSince = pausedHold
	}
	m.PutRecordLocked(r)
	r.mu.Unlock()

	if wait := time.UnixMilli(r.terms.StartUnixMs).Sub(m.now()); wait > 0 {
		// A lease agreed now for later (its GPUs freed by a preemption):
		// its workload starts with it.
		select {
		case <-m.ctx.Done():
			return
		case <-m.clock.After(wait):
		}
	}
	var run executor.Execution
	ex, ok := m.executors[name]
	if !ok {
		err = fmt.Errorf("%w: %w: %s", executor.ErrRefused, api.ErrExecutor, name)
	} else {
		w := m.workloadOf(r, spec)
		w.Stdout, w.Stderr = lenient{out.Kind(p2p.FrameStdout)}, lenient{out.Kind(p2p.FrameStderr)}
		sctx, cancel := context.WithTimeout(m.ctx, workloadStartBudget)
		run, err = ex.Start(sctx, w)
		cancel()
	}
	if err != nil {
		reason := "workload refused"
		if !errors.Is(err, executor.ErrRefused) {
			reason = "workload failed to start"
		}
		m.metrics.Reject("exec", strings.ReplaceAll(reason, " ", "-"))
		note := reason + ": " + err.Error()
		res := executor.ExitResult{Code: -1, Error: note}
		r.mu.Lock()
		r.rec.Exit = &res
		failed := r.ml.State == market.LeaseRunning
		if failed {
			m.EndLocked(r, market.CloseFailed, m.now(), note)
		}
		at := r.ml.ClosedAt
		r.mu.Unlock()
		m.log.Warn("workload not started", "lease", r.id, "executor", name, "err", err)
		if failed {
			m.SendClose(r, market.CloseFailed, at, note)
		}
		r.Poke()
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
	if u, metered := usageOf(run); metered && u.GPUs != 0 && u.GPUs != len(r.terms.Gpus) {
		// The scheduler's record is what the lease bills by: it must hold
		// exactly the GPUs sold.
		note := fmt.Sprintf("workload refused: %s holds %d GPUs; the lease sold %d", u.Source, u.GPUs, len(r.terms.Gpus))
		res := executor.ExitResult{Code: -1, Error: note}
		r.rec.Exit = &res
		m.EndLocked(r, market.CloseFailed, m.now(), note)
		at := r.ml.ClosedAt
		r.mu.Unlock()
		run.Stop(0)
		m.metrics.Reject("exec", "scheduler-gpus")
		m.log.Warn("workload not started", "lease", r.id, "executor", name, "err", note)
		m.SendClose(r, market.CloseFailed, at, note)
		r.Poke()
		exit(res)
		return
	}
	old := r.exec
	r.exec, r.rec.Info, r.rec.Handle = run, &info, info.Handle
	if pause {
		r.rec.HeldSince = m.heldSince(r, run).UnixMilli()
	}
	m.PutRecordLocked(r)
	r.mu.Unlock()
	if old != nil {
		old.Stop(0)
	}
	m.log.Info("workload started", "lease", r.id, "executor", name, "handle", info.Handle, "image", info.Image)
	b, _ := json.Marshal(info)
	out.Frame(p2p.FrameStarted, b)
	if res := m.watchWorkload(r, run); !res.Detached {
		exit(res)
	} // else the daemon is closing: the buyer reattaches after its restart
}

// attachExec answers a buyer reconnecting to its lease's workload: what it
// is, its output since the request's time, and how it ends.
func (m *Manager) attachExec(ctx context.Context, r *Run, req execRequest, out *p2p.FrameWriter) {
	var run executor.Execution
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
				exit = &executor.ExitResult{Code: -1, Error: "the lease ended before its workload ran"}
			}
			b, _ := json.Marshal(exit)
			out.Frame(p2p.FrameExit, b)
			return
		}
		select { // still being prepared
		case <-ctx.Done():
			return
		case <-m.clock.After(200 * time.Millisecond):
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
func (m *Manager) watchWorkload(r *Run, run executor.Execution) executor.ExitResult {
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
		m.EndLocked(r, market.CloseExited, m.exitedAt(r, run), note)
	} else {
		m.PutRecordLocked(r)
	}
	at := r.ml.ClosedAt
	r.mu.Unlock()
	m.log.Info("workload ended", "lease", r.id, "code", res.Code, "signal", res.Signal, "oom", res.OOMKilled)
	if ended {
		m.SendClose(r, market.CloseExited, at, note)
	}
	r.Poke()
	return res
}

func exitNote(res executor.ExitResult) string {
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
func (m *Manager) resumeWorkload(r *Run) {
	handle := r.rec.Handle
	if handle == "" && r.rec.Pgid != 0 {
		handle = fmt.Sprint(r.rec.Pgid) // a record from before handles
	}
	spec := executor.Spec{Executor: r.rec.Executor, Command: r.rec.Exec}
	if r.rec.Workload != nil {
		spec = *r.rec.Workload
	}
	var run executor.Execution
	err := fmt.Errorf("%w: executor %s is not enabled", executor.ErrGone, r.rec.Executor)
	if ad, ok := m.executors[r.rec.Executor].(executor.Adopter); ok {
		ctx, cancel := context.WithTimeout(m.ctx, time.Minute)
		run, err = ad.Adopt(ctx, m.workloadOf(r, spec), handle)
		cancel()
	}
	r.mu.Lock()
	r.rec.Pgid = 0
	if err != nil {
		res := executor.ExitResult{Code: -1, Error: "provider restarted: " + err.Error()}
		r.rec.Exit = &res
		r.exec, _ = executor.ReserveExecutor{}.Start(m.ctx, executor.Workload{})
		note := "the workload did not survive the provider's restart"
		m.EndLocked(r, market.CloseFailed, m.now(), note)
		at := r.ml.ClosedAt
		r.mu.Unlock()
		m.log.Warn("workload not resumed", "lease", r.id, "err", err)
		m.spawn(func() {
			m.SendClose(r, market.CloseFailed, at, note)
		})
		return
	}
	info := run.Info()
	r.exec, r.rec.Info, r.rec.Handle = run, &info, info.Handle
	if r.rec.HeldSince == pausedHold {
		r.rec.HeldSince = m.now().UnixMilli()
	}
	m.PutRecordLocked(r)
	r.mu.Unlock()
	m.log.Info("workload adopted", "lease", r.id, "executor", r.rec.Executor, "handle", info.Handle)
	m.spawn(func() {
		m.watchWorkload(r, run)
	})
}

// sweepWorkloads removes what executors left of leases this node no
// longer runs (a lease closed while the daemon was down, say).
func (m *Manager) sweepWorkloads() {
	keep := func(id string) bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		r := m.runs[id]
		if r == nil {
			return false
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.rec.Role == market.RoleProvider && r.ml.State != market.LeaseClosed
	}
	for name, ex := range m.executors {
		ad, ok := ex.(executor.Adopter)
		if !ok {
			continue
		}
		ctx, cancel := context.WithTimeout(m.ctx, time.Minute)
		removed, err := ad.Sweep(ctx, keep)
		cancel()
		if err != nil {
			m.log.Warn("sweeping workloads failed", "executor", name, "err", err)
		}
		if len(removed) > 0 {
			m.log.Info("removed workloads of no open lease", "executor", name, "leases", removed)
		}
	}
}

// followExec is the buyer's side: it sends the order's workload once the
// lease starts, then stores what the provider streams back — what runs
// and where to reach it, the output, the exit. A broken stream (the
// provider restarting) is reopened as an attach while the lease runs.
func (m *Manager) followExec(r *Run) {
	backoff := 500 * time.Millisecond
	var lastOutput int64
	for attempt := 0; ; attempt++ {
		r.mu.Lock()
		spec := executor.Spec{Command: r.rec.Exec}
		if r.rec.Workload != nil {
			spec = *r.rec.Workload
		}
		running := r.ml.State == market.LeaseRunning
		r.mu.Unlock()
		if !running && attempt > 0 {
			return
		}
		req, _ := json.Marshal(execRequest{Lease: r.id, Spec: spec, Attach: attempt > 0, SinceMs: lastOutput})
		done, err := m.execOnce(r, req, &lastOutput)
		if done {
			return
		}
		r.mu.Lock()
		if r.execDownSince.IsZero() {
			r.execDownSince = m.now() // no word from the workload (market.VouchWindow)
		}
		r.mu.Unlock()
		if attempt == 0 && err != nil {
			m.appendLog(r, p2p.FrameStderr, []byte("suanli: "+err.Error()+"\n"))
		}
		m.log.Debug("exec stream broke; reconnecting", "lease", r.id, "err", err)
		select {
		case <-m.ctx.Done():
			return
		case <-m.clock.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// execOnce runs one exec stream; done reports that the workload's end was
// told (or the node is closing).
func (m *Manager) execOnce(r *Run, req []byte, lastOutput *int64) (done bool, err error) {
	ctx, cancel := context.WithTimeout(m.ctx, 30*time.Second)
	s, err := p2p.OpenExec(ctx, m.host, r.peer, req)
	cancel()
	if err != nil {
		return m.ctx.Err() != nil, err
	}
	defer s.Close()
	stop := context.AfterFunc(m.ctx, func() { s.Reset() })
	defer stop()
	br := bufio.NewReader(s)
	for {
		kind, body, err := p2p.ReadFrame(br)
		if err != nil {
			return m.ctx.Err() != nil, err
		}
		switch kind {
		case p2p.FrameStdout, p2p.FrameStderr:
			*lastOutput = m.now().UnixMilli()
			m.appendLog(r, kind, body)
		case p2p.FrameStarted:
			var info executor.Info
			if json.Unmarshal(body, &info) == nil {
				r.mu.Lock()
				r.rec.Info, r.rec.Executor = &info, info.Executor
				r.execDownSince = time.Time{}
				m.PutRecordLocked(r)
				r.mu.Unlock()
			}
		case p2p.FrameExit:
			var res executor.ExitResult
			if json.Unmarshal(body, &res) == nil {
				r.mu.Lock()
				r.rec.Exit = &res
				if r.exitedAt.IsZero() {
					r.exitedAt = m.now()
				}
				if r.rec.Executor == "" {
					r.rec.Executor = executor.Process
				}
				if r.rec.Info != nil {
					r.rec.Info.State = "exited"
				}
				m.PutRecordLocked(r)
				r.mu.Unlock()
			}
			return true, nil
		}
	}
}

// PutRecordLocked stores r's record; a failed write ends a running lease
// as failed (failStoreLocked). Holds r.mu.
func (m *Manager) PutRecordLocked(r *Run) {
	if err := leases.PutRecord(m.store, r.id, &r.rec); err != nil {
		m.FailStoreLocked(r, "lease record", err)
	}
}

// lenient drops write errors: a buyer that goes away must not block or
// kill the workload.
type lenient struct {
	w interface{ Write([]byte) (int, error) }
}

func (l lenient) Write(b []byte) (int, error) { l.w.Write(b); return len(b), nil }

// usageOf is a scheduler's record of a workload (executor.Meter), if its
// executor keeps one.
func usageOf(run executor.Execution) (executor.Usage, bool) {
	mt, ok := run.(executor.Meter)
	if !ok {
		return executor.Usage{}, false
	}
	return mt.Usage(), true
}

// heldSince is when a started workload got its GPUs: the scheduler's
// record of it where the executor keeps one (Slurm's job start), else now;
// never before the lease's start. Holds r.mu.
func (m *Manager) heldSince(r *Run, run executor.Execution) time.Time {
	u, _ := usageOf(run)
	return meteredStart(u, time.UnixMilli(r.terms.StartUnixMs), m.now())
}

// exitedAt is when a workload that ended by itself gave its GPUs back:
// the scheduler's record where the executor keeps one (Slurm's job end,
// which the daemon sees a poll later), else now; never before what the
// lease has billed or held already. Holds r.mu.
func (m *Manager) exitedAt(r *Run, run executor.Execution) time.Time {
	u, _ := usageOf(run)
	floor := time.UnixMilli(r.ml.Chain.WindowEndUnixMs)
	if r.rec.HeldSince != pausedHold {
		floor = maxTime(floor, time.UnixMilli(r.rec.HeldSince))
	}
	return meteredEnd(u, floor, m.now())
}

// meteredStart is when GPU time starts by a scheduler's record u (zero
// Usage: none kept): u.Start, within [leaseStart, now].
func meteredStart(u executor.Usage, leaseStart, now time.Time) time.Time {
	if u.Start.IsZero() || u.Start.After(now) {
		return now
	}
	return maxTime(u.Start, leaseStart)
}

// meteredEnd is when GPU time ends by a scheduler's record u: u.End,
// within [floor, now].
func meteredEnd(u executor.Usage, floor, now time.Time) time.Time {
	if u.End.IsZero() || u.End.After(now) {
		return now
	}
	return maxTime(u.End, floor)
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
