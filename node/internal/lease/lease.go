package lease

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/gpu"
	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/executor"
	"github.com/suanli/suanli/node/internal/leases"
	"github.com/suanli/suanli/node/internal/store"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// workloadStartBudget bounds a workload's preparation (for docker: the
// image pull and container start) beyond the executor's own limits.
const workloadStartBudget = 15 * time.Minute

// leaseStopGrace is how long a workload gets between SIGTERM and SIGKILL.
const leaseStopGrace = 2 * time.Second

// Run is one lease this node is party to, in memory. Its fields are
// guarded by mu; id, terms and peer never change.
type Run struct {
	id    string
	terms *proto.Lease
	peer  peer.ID // the counterparty

	mu     sync.Mutex
	ml     *market.Lease // replaced in place (rebuildLocked), never swapped
	rec    leases.Record
	exec   executor.Execution
	meter  map[string]*gpuMeter
	logSeq uint64
	wake   chan struct{}
	active bool // a loop is running
	// stopping: the lease is closed and its workload is being stopped
	// (endLocked); the GPUs are handed back once it has stopped.
	stopping bool
	// resumedAt is when this node took the lease up again after a
	// restart: its own downtime does not count against the buyer.
	resumedAt time.Time
	// execDownSince is when the buyer's exec stream broke and was not
	// taken up again since; exitedAt when it heard the workload exit
	// (buyer; zero: not so). See market.VouchWindow.
	execDownSince, exitedAt time.Time
	// closeTried is when the owed close notice was last sent (zero: send
	// at the next step), closeWait how long until it is sent again.
	closeTried time.Time
	closeWait  time.Duration
	// closeTakenAt is when this node last took a close from the
	// counterparty: the lease is settled from then, not from a close
	// time long past (leaseUnsettled).
	closeTakenAt time.Time
}

type gpuMeter struct {
	utilSum, samples      uint64
	maxMem                uint64
	energyFirst, energyAt uint64
}

// Manager runs the leases this node is party to: their loops, messages,
// workloads and redials.
type Manager struct {
	host    host.Host
	key     crypto.PrivKey
	store   *store.Store
	clock   Clock
	log     *slog.Logger
	metrics Metrics
	gpus    gpu.Backend // nil: a buyer
	hooks   Hooks
	ctx     context.Context
	spawn   func(func()) bool

	logs leaseLogs // stored workload output under its cap (logs.go)

	mu          sync.Mutex
	runs        map[string]*Run
	runAdded    chan struct{} // wakes redialLoop when runs gets its first lease
	executors   map[string]executor.Executor
	unpaidGrace time.Duration // 0: market.DefaultUnpaidGrace intervals
	withhold    bool          // test hook: never countersign
	handlers    sync.WaitGroup
	closed      bool
}

// Config is what a Manager is built from: the node's parts it uses.
type Config struct {
	Host  host.Host
	Key   crypto.PrivKey
	Store *store.Store
	Clock Clock
	Log   *slog.Logger
	// Metrics counts refusals, failed writes and dropped receipts.
	Metrics Metrics
	// GPUs is the provider's backend, sampled into receipts (nil: a buyer).
	GPUs gpu.Backend
	// Executors run workloads, by name (NewExecutors).
	Executors map[string]executor.Executor
	Hooks     Hooks
	// Ctx ends with the node; Spawn runs work the node's Close waits for
	// and reports false once it closes.
	Ctx   context.Context
	Spawn func(func()) bool
	// Grace is the unpaid grace (0: market.DefaultUnpaidGrace intervals);
	// Withhold makes a buyer never countersign (tests of the unpaid path).
	Grace    time.Duration
	Withhold bool
	// LogCap is how many bytes of each lease's output are kept.
	LogCap int64
}

// Metrics is what the lease runtime counts.
type Metrics interface {
	// Reject counts a refused message or object of kind for reason.
	Reject(kind, reason string)
	// StoreError counts a failed write on the money path, by what.
	StoreError(what string)
	// ReceiptsDropped counts receipts dropped past an agreed close.
	ReceiptsDropped(n int)
}

// Hooks are what the lease runtime needs from the rest of the node.
// Each is called without the manager's lock unless it says otherwise.
type Hooks struct {
	// CreditOthers is buyer's credit with this provider in currency
	// outside lease (ok false: no limit applies).
	CreditOthers func(lease string, buyer peer.ID, currency string, now time.Time) (market.Credit, bool)
	// OverCreditLocked reports whether the lease ml takes the buyer over
	// its limit, and the note to close it with. Holds the run's lock: it
	// must lock nothing of this package.
	OverCreditLocked func(others market.Credit, limited bool, ml *market.Lease, now time.Time) (string, bool)
	// LeaseEnded: a provider's lease ended; its capacity is free again.
	LeaseEnded func()
	// The receipt protocol's frames the lease runtime does not own:
	// payments, preemption notices, resale handovers and premiums.
	TakePayment, TakePreemption, TakePremium func(from peer.ID, body []byte) error
	TakeHandover                             func(from peer.ID, body []byte) ([]byte, error)
	// BidWorkload is the workload the buyer's bid asks for (ok false: none).
	BidWorkload func(bidID string) (executor.Spec, bool)
	// CachedOffer is p's offer if this node has it (its addresses help redial).
	CachedOffer func(p peer.ID) *proto.Offer
	// Limits is what a lease of gpus GPUs may use on this provider.
	Limits func(gpus int) executor.Limits
}

// New builds the lease runtime; Start takes up the stored leases.
func New(c Config) *Manager {
	return &Manager{
		host: c.Host, key: c.Key, store: c.Store, clock: c.Clock, log: c.Log, metrics: c.Metrics, gpus: c.GPUs,
		hooks: c.Hooks, ctx: c.Ctx, spawn: c.Spawn,
		logs: leaseLogs{limit: c.LogCap, used: map[string]int64{}},
		runs: map[string]*Run{}, runAdded: make(chan struct{}, 1), executors: c.Executors, unpaidGrace: c.Grace, withhold: c.Withhold,
	}
}

func (m *Manager) now() time.Time { return m.clock.Now() }

// Start registers the lease protocols and resumes every stored lease:
// closed ones are listed, open ones go on (or close with a reason when
// their end passed while the node was down).
func (m *Manager) Start() error {
	p2p.HandleReceipts(m.host, m.guard(m.handleReceiptMsg))
	p2p.HandleExec(m.ctx, m.host, func(ctx context.Context, from peer.ID, req []byte, out *p2p.FrameWriter) {
		if !m.enter() {
			return
		}
		defer m.handlers.Done()
		m.handleExec(ctx, from, req, out)
	})
	recs, err := leases.Records(m.store)
	if err != nil {
		return err
	}
	now := m.now()
	for id, rec := range recs {
		terms, err := m.store.GetLease(id)
		if err != nil {
			m.log.Warn("lease without terms", "lease", id, "err", err)
			continue
		}
		r, err := m.replayLease(terms, rec)
		if err != nil {
			m.log.Warn("lease not resumed", "lease", id, "err", err)
			continue
		}
		r.resumedAt = now
		m.mu.Lock()
		m.runs[id] = r
		m.mu.Unlock()
		m.wakeRedial()
		m.addPeerAddrs(r)
		if r.ml.State == market.LeaseClosed && !m.leaseUnsettled(r, now) {
			continue
		}
		if rec.Role == market.RoleProvider && r.ml.State != market.LeaseClosed {
			if rec.Workload != nil || rec.Handle != "" || rec.Pgid != 0 {
				m.resumeWorkload(r)
			} else {
				r.rec.HeldSince = now.UnixMilli()
				r.exec, _ = executor.ReserveExecutor{}.Start(m.ctx, executor.Workload{})
				r.rec.Executor = executor.Reserve
				if err := leases.PutRecord(m.store, id, &r.rec); err != nil {
					return fmt.Errorf("node: resuming lease %s: %w", id, err)
				}
			}
		}
		m.log.Info("lease resumed", "lease", id, "role", rec.Role, "state", r.ml.State)
		m.RunLoop(r)
	}
	m.sweepWorkloads()
	m.spawn(func() {
		m.redialLoop()
	})
	return nil
}

// guard wraps a handler so none runs once the node is closing.
func (m *Manager) guard(h p2p.ReceiptHandler) p2p.ReceiptHandler {
	return func(from peer.ID, kind byte, body []byte) (byte, []byte) {
		if !m.enter() {
			return p2p.FrameRefuse, []byte(errNodeClosing)
		}
		defer m.handlers.Done()
		return h(from, kind, body)
	}
}

func (m *Manager) enter() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.handlers.Add(1)
	return true
}

// Stop refuses new lease messages, waits for those in flight and stops
// the running workloads. Leases stay open in storage: a restarted node
// resumes them.
func (m *Manager) Stop() {
	m.host.RemoveStreamHandler(p2p.ReceiptProtocol)
	m.host.RemoveStreamHandler(p2p.ExecProtocol)
	m.mu.Lock()
	m.closed = true
	runs := make([]*Run, 0, len(m.runs))
	for _, r := range m.runs {
		runs = append(runs, r)
	}
	m.mu.Unlock()
	for _, r := range runs {
		r.mu.Lock()
		ex := r.exec
		r.mu.Unlock()
		if d, ok := ex.(executor.Detacher); ok {
			// A container runs on; the restarted daemon adopts it.
			d.Detach()
		} else if ex != nil {
			ex.Stop(leaseStopGrace)
		}
	}
	m.handlers.Wait()
}

// NewRun is a run of lease terms in state ml and record rec that no
// manager runs: for the node's tests and benchmarks of what reads runs.
func NewRun(terms *proto.Lease, ml *market.Lease, rec leases.Record) *Run {
	r := &Run{id: terms.Id, terms: terms, ml: ml, rec: rec, wake: make(chan struct{}, 1), meter: map[string]*gpuMeter{}}
	r.peer = peer.ID(terms.Buyer)
	if rec.Role == market.RoleBuyer {
		r.peer = peer.ID(terms.Provider)
	}
	return r
}

// replayLease rebuilds a lease from storage: its events in order.
func (m *Manager) replayLease(terms *proto.Lease, rec leases.Record) (*Run, error) {
	ml, err := market.NewLease(terms)
	if err != nil {
		return nil, err
	}
	r := NewRun(terms, ml, rec)
	if !rec.StartedAt.IsZero() {
		ml.Start(rec.StartedAt)
	}
	chain, err := m.store.Receipts(terms.Id)
	if err != nil {
		return nil, err
	}
	for _, sr := range chain {
		rc, err := leases.DecodeReceipt(sr.Receipt)
		if err != nil {
			return nil, err
		}
		hash := proto.ReceiptHash(sr.Receipt)
		if err := ml.AddReceipt(rc, hash, m.now()); err != nil {
			return nil, fmt.Errorf("stored receipt %d: %w", rc.Seq, err)
		}
		if len(sr.Countersign) > 0 {
			cs, err := leases.DecodeCountersign(sr.Countersign)
			if err != nil {
				return nil, err
			}
			if err := ml.AddCountersign(cs, time.UnixMilli(cs.CreatedUnixMs)); err != nil {
				return nil, err
			}
		}
	}
	r.logSeq, _ = m.store.LastLogSeq(terms.Id)
	if rec.State >= market.LeaseEnding && rec.Reason != 0 {
		if rec.Reason == market.CloseFailed {
			ml.Fail(rec.EndingAt)
		} else if err := ml.End(rec.Reason, rec.EndingAt); err != nil {
			return nil, err
		}
	}
	if rec.State == market.LeaseClosed && ml.State == market.LeaseEnding {
		ml.Close(rec.ClosedAt)
	}
	return r, nil
}

// FromFill starts a lease from a fill this node is party to; the
// lease terms are already stored (node/internal/trade, maker.go). A fill seen again changes
// nothing, and so does a nil Manager (a node without a lease runtime).
func (m *Manager) FromFill(ev *p2p.BookEvent) {
	if m == nil || ev.Lease == nil {
		return
	}
	terms := ev.Lease
	me := []byte(m.host.ID())
	var role market.Role
	switch {
	case bytes.Equal(terms.Provider, me):
		role = market.RoleProvider
	case bytes.Equal(terms.Buyer, me):
		role = market.RoleBuyer
	default:
		return
	}
	ml, err := market.NewLease(terms)
	if err != nil {
		m.log.Warn("lease terms refused", "lease", terms.Id, "err", err)
		return
	}
	// The run is built whole before it is put in the runs map: from then
	// on views and handlers read it, under r.mu only.
	r := &Run{id: terms.Id, terms: terms, ml: ml, wake: make(chan struct{}, 1), meter: map[string]*gpuMeter{}}
	r.rec.Role = role
	r.peer = peer.ID(terms.Buyer)
	if role == market.RoleBuyer {
		r.peer = peer.ID(terms.Provider)
	}
	if ev.Raw != nil {
		r.rec.Fill, _ = gproto.Marshal(ev.Raw)
	}
	if role == market.RoleBuyer {
		r.rec.BidID = ev.Fill.BidID
		if spec, ok := m.hooks.BidWorkload(ev.Fill.BidID); ok && !spec.Empty() {
			r.rec.Workload, r.rec.Exec = &spec, spec.Command
		}
	}
	r.rec.PeerAddrs = m.peerAddrs(r.peer)
	r.mu.Lock()
	m.mu.Lock()
	if _, ok := m.runs[terms.Id]; ok || m.closed {
		m.mu.Unlock()
		r.mu.Unlock()
		return
	}
	m.runs[terms.Id] = r
	m.mu.Unlock()
	m.wakeRedial()
	start := time.UnixMilli(terms.StartUnixMs)
	if role == market.RoleProvider {
		r.exec, _ = executor.ReserveExecutor{}.Start(m.ctx, executor.Workload{LeaseID: terms.Id, GPUs: terms.Gpus})
		r.rec.Executor, r.rec.HeldSince = executor.Reserve, terms.StartUnixMs
	}
	if now := m.now(); now.After(start) {
		start = now
	}
	r.ml.Start(start)
	r.syncRecord()
	if err := leases.PutRecord(m.store, terms.Id, &r.rec); err != nil {
		m.FailStoreLocked(r, "lease record", err)
	}
	r.mu.Unlock()
	m.log.Info("lease started", "lease", terms.Id, "role", role, "gpus", len(terms.Gpus))
	m.RunLoop(r)
	if role == market.RoleBuyer && r.rec.Workload != nil {
		m.spawn(func() {
			m.followExec(r)
		})
	}
}

// billedToLocked is where r's receipts end: its last window billed, or
// its start. Holds r.mu.
func (r *Run) billedToLocked() time.Time {
	return time.UnixMilli(max(r.ml.Chain.WindowEndUnixMs, r.terms.StartUnixMs))
}

// syncRecord copies the market lease's state into the record. Holds r.mu.
func (r *Run) syncRecord() {
	r.rec.State, r.rec.Reason = r.ml.State, r.ml.Reason
	r.rec.StartedAt, r.rec.EndingAt, r.rec.ClosedAt = r.ml.StartedAt, r.ml.EndingAt, r.ml.ClosedAt
}

// RunLoop starts r's loop unless one runs: the provider's meters, bills,
// sends receipts and owed notices and ends the lease when due; the
// buyer's closes it at its end or on a silent provider. It steps on the
// clock's ticks (a quarter interval, 50–250 ms) and at each Poke, and
// stops once the lease is closed and settled or the node closes.
func (m *Manager) RunLoop(r *Run) {
	r.mu.Lock()
	if r.active {
		r.mu.Unlock()
		return
	}
	r.active = true
	r.mu.Unlock()
	started := m.spawn(func() {
		every := min(max(market.BillingInterval(r.terms)/4, 50*time.Millisecond), 250*time.Millisecond)
		t := m.clock.NewTicker(every)
		defer t.Stop()
		for {
			var done bool
			if r.rec.Role == market.RoleProvider {
				done = m.providerStep(r)
			} else {
				done = m.buyerStep(r)
			}
			if done {
				// A poke since the step (a close taken, say) found the
				// loop still active and started none: step once more.
				r.mu.Lock()
				select {
				case <-r.wake:
					r.mu.Unlock()
					continue
				default:
				}
				r.active = false
				r.mu.Unlock()
				return
			}
			select {
			case <-m.ctx.Done():
				r.mu.Lock()
				r.active = false
				r.mu.Unlock()
				return
			case <-t.Chan():
			case <-r.wake:
			}
		}
	})
	if !started { // the node is closing
		r.mu.Lock()
		r.active = false
		r.mu.Unlock()
	}
}

// Poke makes r's loop step now.
func (r *Run) Poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// grace is the unpaid grace of a lease.
func (m *Manager) grace(terms *proto.Lease) time.Duration {
	if m.unpaidGrace > 0 {
		return m.unpaidGrace
	}
	return market.DefaultUnpaidGrace * market.BillingInterval(terms)
}

// leaseUnsettled reports whether a closed lease still waits for receipts
// or countersignatures. Holds no lock; reads r under r.mu.
func (m *Manager) leaseUnsettled(r *Run, now time.Time) bool {
	if r.rec.CloseOwed != nil {
		return true // the counterparty has yet to hear of the close
	}
	final := min(market.LeaseEnd(r.terms).UnixMilli(), r.ml.ClosedAt.UnixMilli())
	if r.ml.StartedAt.IsZero() || r.ml.Chain.WindowEndUnixMs >= final && r.ml.Countersigned.Seq == r.ml.Chain.Seq {
		return false
	}
	from := r.ml.ClosedAt
	if r.closeTakenAt.After(from) {
		from = r.closeTakenAt
	}
	return now.Before(from.Add(m.grace(r.terms) + market.BillingInterval(r.terms)))
}

// providerStep meters, ends the lease when due, bills due windows and
// sends receipts not yet countersigned. It reports whether the lease needs
// no more work.
func (m *Manager) providerStep(r *Run) bool {
	m.sample(r)
	now := m.now()
	var others market.Credit
	var limited bool
	if r.rec.Role == market.RoleProvider {
		others, limited = m.hooks.CreditOthers(r.id, r.peer, r.terms.Currency, now)
	}
	r.mu.Lock()
	var notify market.CloseReason
	switch {
	case r.ml.State == market.LeaseRunning && !r.rec.PreemptAt.IsZero() && !now.Before(r.rec.PreemptAt) && r.rec.PreemptAt.Before(market.LeaseEnd(r.terms)):
		m.EndLocked(r, market.ClosePreempted, r.rec.PreemptAt, "")
		notify = market.ClosePreempted
	case r.ml.State == market.LeaseRunning && r.ml.Expired(now):
		m.EndLocked(r, market.CloseCompleted, now, "")
	case r.ml.State == market.LeaseRunning && r.ml.Unpaid(now, m.grace(r.terms)) &&
		market.Unpaid(r.terms, r.resumedAt, now, m.grace(r.terms)):
		m.EndLocked(r, market.CloseUnpaid, now, "buyer did not countersign within the grace")
		notify = market.CloseUnpaid
	}
	if note, over := m.hooks.OverCreditLocked(others, limited, r.ml, now); over {
		m.EndLocked(r, market.CloseUnpaid, r.billedToLocked(), note)
		notify = market.CloseUnpaid
	}
	var failNote string
	for {
		w, ok := r.ml.Due(now)
		if !ok {
			break
		}
		if err := m.billLocked(r, w, now); err != nil {
			if se := (*StoreError)(nil); errors.As(err, &se) {
				// The receipt is not stored: it is never sent, and the
				// lease cannot go on billing.
				m.StoreFailed(se, r.id)
				if r.ml.State == market.LeaseRunning || r.ml.State == market.LeaseStarting {
					failNote = se.Error()
					m.EndLocked(r, market.CloseFailed, now, failNote)
					notify = market.CloseFailed
				}
			} else {
				m.log.Error("billing failed", "lease", r.id, "err", err)
			}
			break
		}
		if note, over := m.hooks.OverCreditLocked(others, limited, r.ml, now); over {
			m.EndLocked(r, market.CloseUnpaid, w.End, note)
			notify = market.CloseUnpaid
		}
	}
	closedAt := r.ml.ClosedAt
	r.mu.Unlock()
	if notify == market.CloseFailed {
		m.SendClose(r, notify, closedAt, failNote)
	} else if notify != 0 {
		m.SendClose(r, notify, closedAt)
	}
	m.sendPending(r)
	m.sendOwedClose(r)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ml.State == market.LeaseClosed && !m.leaseUnsettled(r, m.now())
}

// EndLocked ends and closes a lease at at for reason. Its workload is
// stopped (up to leaseStopGrace) without r.mu, so that views and the
// lease's messages never wait for it; the exit is recorded, the record
// stored and the GPUs handed back once it has stopped. Until then the
// lease shows as ending. Holds r.mu.
func (m *Manager) EndLocked(r *Run, reason market.CloseReason, at time.Time, note string) {
	at = time.UnixMilli(at.UnixMilli()) // as close notices and receipts carry it: both ends keep one time
	var err error
	if reason == market.CloseFailed {
		err = r.ml.Fail(at)
	} else {
		err = r.ml.End(reason, at)
	}
	if err != nil {
		m.log.Warn("lease end refused", "lease", r.id, "reason", reason, "err", err)
		return
	}
	if r.ml.State == market.LeaseEnding {
		r.ml.Close(at)
	}
	r.syncRecord()
	if note != "" {
		r.rec.Note = note
	}
	ex := r.exec
	if ex == nil {
		m.closedLocked(r, nil)
		return
	}
	r.stopping = true
	m.spawn(func() {
		if err := ex.Stop(leaseStopGrace); err != nil {
			m.log.Warn("stopping the workload failed", "lease", r.id, "err", err)
		}
		r.mu.Lock()
		m.closedLocked(r, ex)
		r.mu.Unlock()
		r.Poke()
	})
}

// closedLocked finishes a lease's end once its workload ex (nil: none)
// has stopped: the exit recorded, the record stored, the GPUs handed
// back. Holds r.mu.
func (m *Manager) closedLocked(r *Run, ex executor.Execution) {
	if ex != nil {
		if r.rec.Executor != executor.Reserve && r.rec.Executor != "" && r.rec.Exit == nil {
			res := ex.Result()
			r.rec.Exit = &res
		}
		if r.rec.Info != nil {
			info := ex.Info()
			r.rec.Info.State = cmp.Or(info.State, "exited")
		}
		r.rec.Pgid = 0
	}
	r.stopping = false
	r.syncRecord()
	if err := leases.PutRecord(m.store, r.id, &r.rec); err != nil {
		// Closed already: nothing more to end; the resumed lease ends again.
		m.StoreFailed(&StoreError{What: "lease record", Err: err}, r.id)
	}
	if r.rec.Role == market.RoleProvider {
		if err := m.store.ReleaseGPUs(r.terms.Gpus, r.id); err != nil {
			m.StoreFailed(&StoreError{What: "GPU release", Err: err}, r.id) // the holds lapse at their end
		}
		m.hooks.LeaseEnded()
	}
	m.log.Info("lease closed", "lease", r.id, "reason", r.ml.Reason, "role", r.rec.Role)
}

// StoreError is a failed write of the store on the money path.
type StoreError struct {
	What string // what was written
	Err  error
}

// Error says what failed to be stored.
func (e *StoreError) Error() string { return "storing " + e.What + " failed: " + e.Err.Error() }

// Unwrap is the store's error.
func (e *StoreError) Unwrap() error { return e.Err }

// StoreFailed logs and counts a failed write on the money path.
func (m *Manager) StoreFailed(e *StoreError, lease string) {
	m.metrics.StoreError(e.What)
	m.log.Error("store write failed", "what", e.What, "lease", lease, "err", e.Err)
}

// FailStoreLocked ends a running lease as failed after a failed write of
// what, the error as its note, and tells the counterparty (in the
// background: r.mu is held). A closed lease only logs and counts it.
// Holds r.mu.
func (m *Manager) FailStoreLocked(r *Run, what string, err error) {
	se := &StoreError{What: what, Err: err}
	m.StoreFailed(se, r.id)
	if r.ml.State != market.LeaseRunning && r.ml.State != market.LeaseStarting {
		return
	}
	note := se.Error()
	m.EndLocked(r, market.CloseFailed, m.now(), note)
	at := r.ml.ClosedAt
	reason := market.CloseFailed
	if r.rec.Role == market.RoleBuyer {
		reason = market.CloseBuyer // a buyer's reason to give the provider
	}
	m.spawn(func() {
		m.SendClose(r, reason, at, note)
		r.Poke()
	})
}

// sample reads the leased GPUs' telemetry into the window's meters.
func (m *Manager) sample(r *Run) {
	if m.gpus == nil {
		return
	}
	tel, err := m.gpus.Telemetry()
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range tel {
		if !slices.Contains(r.terms.Gpus, t.UUID) {
			continue
		}
		m := r.meter[t.UUID]
		if m == nil {
			m = &gpuMeter{energyFirst: t.EnergyMillijoules}
			r.meter[t.UUID] = m
		}
		m.utilSum += uint64(t.UtilizationPercent)
		m.samples++
		m.maxMem = max(m.maxMem, t.MemoryUsedBytes)
		m.energyAt = t.EnergyMillijoules
	}
}

// billLocked signs, stores and adds the receipt for window w. Holds r.mu.
func (m *Manager) billLocked(r *Run, w market.Window, now time.Time) error {
	ws, we := w.Start.UnixMilli(), w.End.UnixMilli()
	from := max(ws, r.rec.HeldSince)
	held := uint64(max(0, we-from))
	rc := &proto.Receipt{
		LeaseId: r.id, Seq: r.ml.Chain.Seq + 1, WindowStartUnixMs: ws, WindowEndUnixMs: we,
		Provider: []byte(m.host.ID()), CreatedUnixMs: max(now.UnixMilli(), we),
	}
	if r.ml.Chain.Seq > 0 {
		rc.PrevHash = r.ml.Chain.Hash
	}
	for _, g := range r.terms.Gpus {
		u := &proto.GPUUsage{Uuid: g, GpuMs: held}
		if m := r.meter[g]; m != nil && m.samples > 0 {
			u.MeanUtilizationPermille = uint32(min(1000, m.utilSum*10/m.samples))
			u.MaxMemoryUsedBytes = m.maxMem
			if m.energyAt > m.energyFirst {
				u.EnergyMj = m.energyAt - m.energyFirst
			}
		}
		rc.Usage = append(rc.Usage, u)
		rc.GpuMs += held
	}
	rc.CumulativeGpuMs = r.ml.Chain.GPUMillis + rc.GpuMs
	total, err := market.ReceiptTotal(r.terms, r.ml.Chain.Cumulative, r.ml.Chain.GPUMillis, rc.GpuMs, ws)
	if err != nil {
		return err
	}
	rc.AmountMicros, rc.CumulativeMicros = total-r.ml.Chain.Cumulative, total
	env, err := p2p.Seal(m.key, rc, proto.MaxReceiptSize)
	if err != nil {
		return err
	}
	hash := proto.ReceiptHash(env)
	if err := r.ml.AddReceipt(rc, hash, now); err != nil {
		return err
	}
	if err := m.store.PutReceipt(r.id, rc.Seq, &proto.SignedReceipt{Receipt: env}); err != nil {
		return &StoreError{What: "receipt", Err: err}
	}
	clear(r.meter)
	return nil
}

// sendPending sends the receipts the buyer has not countersigned, oldest
// first, and takes its countersignatures.
func (m *Manager) sendPending(r *Run) {
	r.mu.Lock()
	from, to := r.ml.Countersigned.Seq+1, r.ml.Chain.Seq
	r.mu.Unlock()
	for seq := from; seq <= to; seq++ {
		sr, err := m.store.GetReceipt(r.id, seq)
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(m.ctx, p2p.ReceiptTimeout)
		kind, body, err := p2p.SendReceiptMessage(ctx, m.host, r.peer, p2p.FrameReceipt, sr.Receipt)
		cancel()
		if err != nil {
			m.log.Debug("sending receipt failed", "lease", r.id, "seq", seq, "err", err)
			return
		}
		if kind != p2p.FrameCountersign {
			m.log.Debug("receipt not countersigned", "lease", r.id, "seq", seq, "answer", string(body))
			return
		}
		if err := m.takeCountersign(r, sr, body); err != nil {
			if se := (*StoreError)(nil); errors.As(err, &se) {
				return // the lease failed (takeCountersign)
			}
			m.metrics.Reject("countersign", market.Reason(err))
			m.log.Warn("countersignature refused", "lease", r.id, "seq", seq, "err", err)
			return
		}
	}
}

// takeCountersign checks the buyer's countersignature of sr and stores the
// doubly-signed receipt.
func (m *Manager) takeCountersign(r *Run, sr *proto.SignedReceipt, csEnv []byte) error {
	cs, signer, err := p2p.Open[*proto.Countersign](csEnv, proto.MaxReceiptSize)
	if err != nil {
		return err
	}
	if string(signer) != string(r.terms.Buyer) {
		return fmt.Errorf("%w: signed by %s, not the buyer", market.ErrCountersign, signer)
	}
	rc, err := leases.DecodeReceipt(sr.Receipt)
	if err != nil {
		return err
	}
	hash := proto.ReceiptHash(sr.Receipt)
	if err := market.VerifyCountersign(r.terms, rc, hash, cs); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := m.store.PutReceipt(r.id, rc.Seq, &proto.SignedReceipt{Receipt: sr.Receipt, Countersign: csEnv}); err != nil {
		m.FailStoreLocked(r, "countersigned receipt", err)
		return &StoreError{What: "countersigned receipt", Err: err}
	}
	return r.ml.AddCountersign(cs, m.now())
}

// buyerStep closes the buyer's lease at its end, or when the provider has
// gone silent past the grace. It reports whether the lease needs no more
// work.
func (m *Manager) buyerStep(r *Run) bool {
	m.sendOwedClose(r)
	now := m.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.ml.State == market.LeaseRunning && !r.rec.PreemptAt.IsZero() && !now.Before(r.rec.PreemptAt) && r.rec.PreemptAt.Before(market.LeaseEnd(r.terms)):
		m.EndLocked(r, market.ClosePreempted, r.rec.PreemptAt, "")
	case r.ml.State == market.LeaseRunning && r.ml.Expired(now):
		m.EndLocked(r, market.CloseCompleted, now, "")
	case r.ml.State == market.LeaseRunning:
		last := time.UnixMilli(max(r.terms.StartUnixMs, r.ml.Chain.WindowEndUnixMs, r.resumedAt.UnixMilli()))
		if now.After(last.Add(market.BillingInterval(r.terms) + m.grace(r.terms) + 2*time.Second)) {
			m.EndLocked(r, market.CloseBuyer, now, "no receipts from the provider")
			// The provider hears of it when it is back (sendOwedClose).
			r.rec.CloseOwed = &leases.CloseNotice{Lease: r.id, Reason: market.CloseBuyer, AtMs: r.ml.ClosedAt.UnixMilli(), Note: r.rec.Note}
			m.PutRecordLocked(r)
		}
	}
	return r.ml.State == market.LeaseClosed && !m.leaseUnsettled(r, now)
}

// handleReceiptMsg answers the lease protocol's messages.
func (m *Manager) handleReceiptMsg(from peer.ID, kind byte, body []byte) (byte, []byte) {
	var err error
	var reply []byte
	switch kind {
	case p2p.FrameReceipt:
		reply, err = m.takeReceipt(from, body)
		if err == nil {
			return p2p.FrameCountersign, reply
		}
		// BookReason labels envelope and signer failures, then the
		// market's receipt reasons.
		label := p2p.BookReason(err)
		if errors.Is(err, market.ErrNotVouched) {
			label = "not-running"
		}
		m.metrics.Reject("receipt", label)
		m.log.Debug("receipt refused", "from", shortID(from), "err", err)
	case p2p.FrameClose:
		err = m.takeClose(from, body)
	case p2p.FramePayment:
		err = m.hooks.TakePayment(from, body)
	case p2p.FramePreempt:
		err = m.hooks.TakePreemption(from, body)
	case p2p.FrameHandover:
		if reply, err = m.hooks.TakeHandover(from, body); err == nil {
			return p2p.FrameOK, reply
		}
	case p2p.FramePremium:
		err = m.hooks.TakePremium(from, body)
	default:
		m.metrics.Reject("frame", "unknown-kind")
		err = fmt.Errorf("unknown message kind %q", kind)
	}
	if err != nil {
		return p2p.FrameRefuse, []byte(err.Error())
	}
	return p2p.FrameOK, nil
}

// errWithheld is the buyer's answer when a test withholds countersignatures.
var errWithheld = errors.New("node: countersignature withheld")

// takeReceipt is the buyer's check of a receipt: signer, chain, window,
// amount; then the countersignature, stored with the receipt (synced)
// before it is returned.
func (m *Manager) takeReceipt(from peer.ID, env []byte) ([]byte, error) {
	rc, signer, err := p2p.Open[*proto.Receipt](env, proto.MaxReceiptSize)
	if err != nil {
		return nil, fmt.Errorf("receipt: %w", err) // bad envelope or too large
	}
	m.mu.Lock()
	r := m.runs[rc.LeaseId]
	m.mu.Unlock()
	switch {
	case r == nil || r.rec.Role != market.RoleBuyer:
		return nil, fmt.Errorf("%w: no lease %q bought by this node", market.ErrReceiptLease, rc.LeaseId)
	case signer != from || string(signer) != string(r.terms.Provider) || !bytes.Equal(rc.Provider, r.terms.Provider):
		return nil, fmt.Errorf("%w: receipt not signed by the lease's provider", p2p.ErrSigner)
	}
	hash := proto.ReceiptHash(env)
	r.mu.Lock()
	defer r.mu.Unlock()
	if rc.Seq > 0 && rc.Seq <= r.ml.Chain.Seq {
		stored, err := m.store.GetReceipt(r.id, rc.Seq)
		if err != nil {
			return nil, err
		}
		if !bytes.Equal(proto.ReceiptHash(stored.Receipt), hash) {
			ev := market.DetectEquivocation(
				market.SignedReceiptDecoded{Receipt: mustReceipt(stored.Receipt), Hash: proto.ReceiptHash(stored.Receipt)},
				market.SignedReceiptDecoded{Receipt: rc, Hash: hash})
			if err := m.store.PutEvidence(r.id, rc.Seq, stored.Receipt, env); err != nil {
				m.StoreFailed(&StoreError{What: "evidence", Err: err}, r.id)
			}
			return nil, ev
		}
		if len(stored.Countersign) > 0 {
			return stored.Countersign, nil // a resend: the same answer
		}
		if m.withhold {
			return nil, errWithheld
		}
		// Kept, not countersigned, when it came: countersigned now if
		// this side can vouch for it now.
		return m.countersignLocked(r, rc, env, hash)
	}
	now := m.now()
	if err := r.ml.AddReceipt(rc, hash, now); err != nil {
		var ev *market.Evidence
		if errors.As(err, &ev) {
			if stored, gerr := m.store.GetReceipt(r.id, rc.Seq); gerr == nil {
				if err := m.store.PutEvidence(r.id, rc.Seq, stored.Receipt, env); err != nil {
					m.StoreFailed(&StoreError{What: "evidence", Err: err}, r.id)
				}
			}
		}
		return nil, err
	}
	vouchErr := market.VouchWindow(r.terms, rc, r.seenLocked())
	if m.withhold || vouchErr != nil {
		// Kept as evidence of what the provider billed, not countersigned.
		if err := m.store.PutReceipt(r.id, rc.Seq, &proto.SignedReceipt{Receipt: env}); err != nil {
			m.FailStoreLocked(r, "receipt", err)
			return nil, &StoreError{What: "receipt", Err: err}
		}
		if vouchErr != nil {
			return nil, vouchErr
		}
		return nil, errWithheld
	}
	return m.countersignLocked(r, rc, env, hash)
}

// seenLocked is what the buyer saw of the lease's workload. Holds r.mu.
func (r *Run) seenLocked() market.WorkSeen {
	return market.WorkSeen{
		Workload: r.rec.Workload != nil && !r.rec.Workload.Empty(), Started: r.rec.Info != nil,
		DownSince: r.execDownSince, ExitedAt: r.exitedAt,
	}
}

// countersignLocked countersigns receipt rc (sealed as env, hashed hash),
// which the buyer's lease holds, once this side vouches for its window;
// the countersignature is stored (synced) with the receipt before it is
// returned. Holds r.mu.
func (m *Manager) countersignLocked(r *Run, rc *proto.Receipt, env, hash []byte) ([]byte, error) {
	if err := market.VouchWindow(r.terms, rc, r.seenLocked()); err != nil {
		return nil, err
	}
	now := m.now()
	cs := &proto.Countersign{LeaseId: r.id, Seq: rc.Seq, ReceiptHash: hash, Buyer: []byte(m.host.ID()), CreatedUnixMs: now.UnixMilli()}
	csEnv, err := p2p.Seal(m.key, cs, proto.MaxReceiptSize)
	if err != nil {
		return nil, err
	}
	// Stored (synced) before the countersignature is sent: a crash never
	// loses a receipt this node countersigned.
	if err := m.store.PutReceipt(r.id, rc.Seq, &proto.SignedReceipt{Receipt: env, Countersign: csEnv}); err != nil {
		m.FailStoreLocked(r, "countersigned receipt", err)
		return nil, &StoreError{What: "countersigned receipt", Err: err}
	}
	if err := r.ml.AddCountersign(cs, now); err != nil {
		return nil, err
	}
	return csEnv, nil
}

func mustReceipt(env []byte) *proto.Receipt {
	rc, _ := leases.DecodeReceipt(env)
	return rc
}

// Closing. Each side that ends a lease owes the other a close notice
// (leases.Record.CloseOwed): stored with the lease and re-sent, across
// restarts and disconnects, until the counterparty answers it (FrameOK: it
// took it; FrameRefuse: it will not, and its own close stands). A side
// that takes a notice while the lease runs ends the lease there; one that
// closed the lease on its own meanwhile keeps, with the other side, the
// close market.AgreeClose picks (the earlier), and a provider drops the
// receipts it billed past that close, which its buyer never countersigned:
// both ends keep one close and one chain. The provider checks every notice
// against the lease's type and its own billing (market.CheckBuyerClose):
// reserved time is not ended early by the buyer while the provider bills.

// An owed close notice is re-sent after closeResendFirst, then at twice
// the wait each time the counterparty does not answer, up to
// closeResendMax; a redial that reaches it sends at once.
const (
	closeResendFirst = time.Second
	closeResendMax   = time.Minute
)

// errNodeClosing is a node's answer to lease messages while it shuts down.
const errNodeClosing = "node closing"

// SendClose records that this node owes the counterparty a notice that
// it ended the lease for reason at at, and sends it. Holds no lock.
func (m *Manager) SendClose(r *Run, reason market.CloseReason, at time.Time, note ...string) {
	c := &leases.CloseNotice{Lease: r.id, Reason: reason, AtMs: at.UnixMilli()}
	if len(note) > 0 {
		c.Note = truncate(note[0], 512)
	}
	r.mu.Lock()
	r.rec.CloseOwed, r.closeTried, r.closeWait = c, time.Time{}, 0
	if err := leases.PutRecord(m.store, r.id, &r.rec); err != nil {
		// Kept in memory: re-sent until the node stops.
		m.StoreFailed(&StoreError{What: "lease record", Err: err}, r.id)
	}
	r.mu.Unlock()
	m.sendOwedClose(r)
}

// sendOwedClose sends the close notice the lease owes its counterparty,
// if any and if its wait since the last try is over (a redial resets it),
// and forgets it once the counterparty answered. Holds no lock.
func (m *Manager) sendOwedClose(r *Run) {
	now := m.now()
	r.mu.Lock()
	c := r.rec.CloseOwed
	if c == nil || !r.closeTried.IsZero() && now.Sub(r.closeTried) < r.closeWait {
		r.mu.Unlock()
		return
	}
	r.closeTried, r.closeWait = now, min(max(2*r.closeWait, closeResendFirst), closeResendMax)
	r.mu.Unlock()
	b, err := SealClose(m.key, *c, now)
	if err != nil {
		m.log.Error("sealing a close notice failed", "lease", r.id, "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(m.ctx, p2p.ReceiptTimeout)
	kind, body, err := p2p.SendReceiptMessage(ctx, m.host, r.peer, p2p.FrameClose, b)
	cancel()
	if err != nil || kind == p2p.FrameRefuse && string(body) == errNodeClosing || kind != p2p.FrameOK && kind != p2p.FrameRefuse {
		m.log.Debug("close notice not taken; re-sent later", "lease", r.id, "err", err, "answer", string(body))
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rec.CloseOwed != c {
		return // a newer notice (a revised close) replaced it
	}
	r.rec.CloseOwed = nil
	if kind == p2p.FrameRefuse {
		r.rec.CloseRefused = true
		r.rec.Note = "close refused by the counterparty: " + truncate(string(body), 256)
		m.log.Warn("close notice refused", "lease", r.id, "reason", c.Reason, "answer", string(body))
	}
	m.PutRecordLocked(r)
}

// rejectClose counts a refused close notice under reason and returns err.
func (m *Manager) rejectClose(reason string, err error) error {
	m.metrics.Reject("close", reason)
	return err
}

// takeClose takes the counterparty's notice that it ended a lease: checked
// against the lease's parties, type and terms, then the lease ended at
// the notice's time, or, closed here already, the two closes agreed.
func (m *Manager) takeClose(from peer.ID, body []byte) error {
	c, signer, err := openClose(body)
	if err != nil {
		return m.rejectClose(closeRejectReason(err), err)
	}
	if signer != from {
		return m.rejectClose("wrong-signer", fmt.Errorf("%w: close notice signed by %s, sent by %s", p2p.ErrSigner, signer, from))
	}
	m.mu.Lock()
	r := m.runs[c.Lease]
	m.mu.Unlock()
	if r == nil || r.peer != from {
		return m.rejectClose("unknown-lease", fmt.Errorf("no lease %q with this peer", c.Lease))
	}
	allowed := []market.CloseReason{market.CloseCompleted, market.CloseBuyer}
	if r.rec.Role == market.RoleBuyer {
		allowed = []market.CloseReason{market.CloseCompleted, market.CloseProvider, market.CloseUnpaid, market.ClosePreempted,
			market.CloseExited, market.CloseFailed, market.CloseResold}
	}
	if !slices.Contains(allowed, c.Reason) {
		return m.rejectClose("reason", fmt.Errorf("%w: reason %s not the counterparty's to give", market.ErrCloseRefused, c.Reason))
	}
	now := m.now()
	at := time.UnixMilli(min(c.AtMs, now.UnixMilli()))
	r.mu.Lock()
	defer func() { r.mu.Unlock(); r.Poke(); m.RunLoop(r) }()
	if r.ml.State == market.LeaseStarting {
		return m.rejectClose("out-of-turn", fmt.Errorf("%w: lease %s has not started", market.ErrCloseRefused, r.id))
	}
	// Time the buyer countersigned (provider) or accepted receipts for
	// (buyer) is not unbilled by a close.
	floor := r.ml.Chain.WindowEndUnixMs
	if r.rec.Role == market.RoleProvider {
		floor = r.ml.Countersigned.WindowEndUnixMs
	}
	if at.UnixMilli() < floor {
		at = time.UnixMilli(floor)
	}
	switch c.Reason {
	case market.CloseCompleted:
		if at.Before(market.LeaseEnd(r.terms)) {
			return m.rejectClose("out-of-turn", fmt.Errorf("%w: completed before the lease's end", market.ErrCloseRefused))
		}
	case market.CloseBuyer:
		var billedTo time.Time
		if r.ml.Countersigned.Seq > 0 {
			billedTo = time.UnixMilli(r.ml.Countersigned.WindowEndUnixMs)
		}
		if err := market.CheckBuyerClose(r.terms, c.Reason, at, billedTo, m.grace(r.terms)); err != nil {
			return m.rejectClose("early-close", err)
		}
	case market.ClosePreempted:
		if !market.LeaseType(r.terms.LeaseType).Interruptible() {
			return m.rejectClose("out-of-turn", fmt.Errorf("%w: %s leases are never preempted", market.ErrCloseRefused, market.LeaseType(r.terms.LeaseType)))
		}
	case market.CloseResold:
		if market.LeaseType(r.terms.LeaseType) != market.Reserved {
			return m.rejectClose("out-of-turn", fmt.Errorf("%w: only reserved leases are resold", market.ErrCloseRefused))
		}
	}
	note := "closed by the counterparty"
	if c.Note != "" {
		note += ": " + truncate(c.Note, 512)
	}
	r.closeTakenAt = now
	if r.ml.State == market.LeaseRunning {
		if err := m.dropBilledPastLocked(r, at); err != nil {
			return err
		}
		m.EndLocked(r, c.Reason, at, note)
		return nil
	}
	// Closed here too: both keep one close.
	reason, agreed := market.AgreeClose(r.ml.Reason, r.ml.ClosedAt, c.Reason, at)
	if r.rec.CloseRefused {
		reason, agreed = c.Reason, at
	}
	if reason == r.ml.Reason && agreed.Equal(r.ml.ClosedAt) {
		return nil // ours stands; the counterparty takes our notice
	}
	return m.reviseCloseLocked(r, reason, agreed, note)
}

// dropBilledPastLocked drops the provider's receipts for windows that end
// after at, which the buyer never countersigned (at is not before the
// last countersigned window's end), and rebuilds the lease from what is
// left. A buyer's lease has nothing to drop. Holds r.mu.
func (m *Manager) dropBilledPastLocked(r *Run, at time.Time) error {
	if r.rec.Role != market.RoleProvider || r.ml.Chain.WindowEndUnixMs <= at.UnixMilli() {
		return nil
	}
	chain, err := m.store.Receipts(r.id)
	if err != nil {
		return err
	}
	from := uint64(0)
	for _, sr := range chain {
		rc, err := leases.DecodeReceipt(sr.Receipt)
		if err != nil {
			return err
		}
		if rc.WindowEndUnixMs > at.UnixMilli() {
			if len(sr.Countersign) > 0 {
				return fmt.Errorf("%w: receipt %d past the close is countersigned", market.ErrCloseRefused, rc.Seq)
			}
			from = rc.Seq
			break
		}
	}
	if from == 0 {
		return nil
	}
	if err := m.store.DropReceipts(r.id, from, r.ml.Chain.Seq); err != nil {
		m.FailStoreLocked(r, "dropped receipts", err)
		return &StoreError{What: "dropped receipts", Err: err}
	}
	m.metrics.ReceiptsDropped(int(r.ml.Chain.Seq - from + 1))
	m.log.Info("receipts past the agreed close dropped", "lease", r.id, "from", from, "to", r.ml.Chain.Seq)
	return m.rebuildLocked(r)
}

// rebuildLocked replaces r's market lease with one replayed from storage
// and r.rec. Holds r.mu.
func (m *Manager) rebuildLocked(r *Run) error {
	fresh, err := m.replayLease(r.terms, r.rec)
	if err != nil {
		return err
	}
	*r.ml = *fresh.ml // in place: handles keep the pointer (RunParts)
	return nil
}

// reviseCloseLocked makes a closed lease's close the one both sides agreed
// on: reason at at (earlier than this node's own). Holds r.mu.
func (m *Manager) reviseCloseLocked(r *Run, reason market.CloseReason, at time.Time, note string) error {
	if err := m.dropBilledPastLocked(r, at); err != nil {
		return err
	}
	m.log.Info("lease close agreed with the counterparty", "lease", r.id, "was", r.ml.Reason, "now", reason)
	r.rec.Reason, r.rec.EndingAt, r.rec.ClosedAt, r.rec.Note = reason, at, at, note
	r.rec.CloseOwed = nil // the counterparty's close stands
	if err := m.rebuildLocked(r); err != nil {
		return err
	}
	r.syncRecord()
	m.PutRecordLocked(r)
	return nil
}

// CloseLease ends lease id early, as this node's own close (the buyer's
// or the provider's): refused while reserved time runs (the buyer's) or
// once the lease is no longer running.
func (m *Manager) CloseLease(id string) error {
	r, err := m.Lookup(id)
	if err != nil {
		return err
	}
	reason := market.CloseBuyer
	if r.rec.Role == market.RoleProvider {
		reason = market.CloseProvider
	} else if market.LeaseType(r.terms.LeaseType) == market.Reserved && m.now().Before(market.LeaseEnd(r.terms)) {
		// Reserved time is a commitment: the buyer pays for all of it.
		return api.Errorf(api.CodeLeaseState, "lease %s is reserved until %s: a commitment, not closed early by the buyer", id,
			market.LeaseEnd(r.terms).Format(time.RFC3339))
	}
	r.mu.Lock()
	if r.ml.State != market.LeaseRunning && r.ml.State != market.LeaseStarting {
		r.mu.Unlock()
		return api.Errorf(api.CodeLeaseState, "lease %s is %s", id, r.ml.State)
	}
	m.EndLocked(r, reason, m.now(), "")
	at := r.ml.ClosedAt
	r.mu.Unlock()
	m.SendClose(r, reason, at)
	r.Poke()
	m.RunLoop(r)
	return nil
}

// Lookup is lease id's run, or api.ErrUnknownLease.
func (m *Manager) Lookup(id string) (*Run, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.runs[id]
	if r == nil {
		return nil, fmt.Errorf("%w: %s", api.ErrUnknownLease, id)
	}
	return r, nil
}

// View is what the API shows of r (its resale part aside).
func (r *Run) View() api.LeaseView {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.terms
	v := api.LeaseView{
		ID: r.id, Role: r.rec.Role.String(), Provider: peer.ID(t.Provider).String(), Buyer: peer.ID(t.Buyer).String(),
		Market: t.Market, State: r.ml.State.String(), Reason: r.ml.Reason.String(), GPUs: t.Gpus,
		Price: market.FormatMicros(t.PriceMicros, t.Currency), Currency: t.Currency, PriceMicros: t.PriceMicros,
		LeaseType: market.LeaseType(t.LeaseType).String(),
		Start:     time.UnixMilli(t.StartUnixMs).UTC(), End: market.LeaseEnd(t),
		Interval: market.BillingInterval(t).String(), Executor: r.rec.Executor, Exec: r.rec.Exec, Exit: r.rec.Exit,
		Receipts: r.ml.Chain.Seq, Countersigned: r.ml.Countersigned.Seq,
		Cumulative: market.FormatMicros(r.ml.Countersigned.Cumulative, t.Currency), Note: r.rec.Note,
	}
	if !r.ml.ClosedAt.IsZero() {
		c := r.ml.ClosedAt.UTC()
		v.ClosedAt = &c
	}
	if r.stopping {
		v.State = market.LeaseEnding.String() // closed once the workload has stopped
	}
	if w := r.rec.Workload; w != nil {
		v.Image = w.Image
	}
	if !r.rec.PreemptAt.IsZero() {
		p := r.rec.PreemptAt.UTC()
		v.PreemptAt = &p
	}
	if i := r.rec.Info; i != nil {
		v.Image = cmp.Or(v.Image, i.Image)
		v.ImageDigest = cmp.Or(i.RepoDigest, i.ImageID)
		v.Endpoints, v.GPUAccess = i.Endpoints, i.GPUAccess
		if i.Executor == executor.Docker {
			v.ContainerState = i.State
		}
	}
	return v
}

// truncate cuts s to at most n bytes.
func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// Leases are the views of every lease this node is party to, newest first.
func (m *Manager) Leases() []api.LeaseView {
	m.mu.Lock()
	runs := make([]*Run, 0, len(m.runs))
	for _, r := range m.runs {
		runs = append(runs, r)
	}
	m.mu.Unlock()
	out := make([]api.LeaseView, 0, len(runs))
	for _, r := range runs {
		out = append(out, r.View())
	}
	slices.SortFunc(out, func(a, b api.LeaseView) int {
		if c := b.Start.Compare(a.Start); c != 0 {
			return c
		}
		return bytes.Compare([]byte(a.ID), []byte(b.ID))
	})
	return out
}

// Fill is a lease's stored fill (the sealed take and accept), for export.
func (r *Run) Fill() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rec.Fill
}

func shortID(p peer.ID) string {
	s := p.String()
	if len(s) > 8 {
		return s[len(s)-8:]
	}
	return s
}
