package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/gpu"
	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/executor"
	"github.com/suanli/suanli/node/internal/leases"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// A lease is stored as its terms (store.PutLease), its record
// (leases.Record as JSON, store.PutLeaseRecord), its receipts, the evidence
// against its provider and its workload's output; the keys are in
// internal/store/keys.go.

// The lease protocol (/suanli/receipt/1.0.0), as each side applies it.
// States are market.LeaseState; "owed" is a close notice this side still
// has to deliver (Record.CloseOwed).
//
//	state     message in              provider                                 buyer
//	running   receipt (R)             refused: not the buyer                   checked, then countersigned if vouched
//	                                                                           (market.VouchWindow), else kept, refused
//	running   countersign (answer)    stored, chain advances                   -
//	running   close (X), its reason   checked (parties; type: reserved not     checked (parties, the provider's reasons)
//	                                  ended early, market.CheckBuyerClose;     → closed at the notice's time
//	                                  completed only at the end) → closed at
//	                                  the notice's time, receipts past it
//	                                  dropped (never countersigned)
//	running   close, not its reason   refused (kind=close, reason=reason)      refused
//	running   preemption (N)          refused: not the buyer                   checked (market.CheckPreemption), ends then
//	starting  close                   refused, out-of-turn                     refused, out-of-turn
//	closed    receipt                 -                                        taken for windows up to the close, else
//	                                                                           refused (market.Lease.AddReceipt)
//	closed    close                   AgreeClose(own, theirs): the earlier;    same
//	                                  own refused by them: theirs
//	closed    owed                    re-sent until FrameOK or FrameRefuse     same
//	any       unknown lease or peer   refused (kind=close, unknown-lease)      same

// leaseStopGrace is how long a workload gets between SIGTERM and SIGKILL.
const leaseStopGrace = 2 * time.Second

// leaseRun is one lease this node is party to, in memory.
type leaseRun struct {
	id    string
	terms *proto.Lease
	peer  peer.ID // the counterparty

	mu     sync.Mutex
	ml     *market.Lease
	rec    leases.Record
	exec   Execution
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

// leaseManager is the node's leases and settlement state.
type leaseManager struct {
	mu        sync.Mutex
	runs      map[string]*leaseRun
	executors map[string]Executor
	grace     time.Duration // 0: market.DefaultUnpaidGrace intervals
	withhold  bool          // test hook: never countersign
	handlers  sync.WaitGroup
	closed    bool
}

// WithUnpaidGrace sets how long a receipt may wait for the buyer's
// countersignature before the lease ends as unpaid. Default: 3 billing
// intervals.
func WithUnpaidGrace(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return errors.New("node: negative unpaid grace")
		}
		o.unpaidGrace = d
		return nil
	}
}

// WithWithheldCountersigns makes a buyer store receipts but never
// countersign them: for tests of the unpaid path.
func WithWithheldCountersigns() Option {
	return func(o *options) error { o.withhold = true; return nil }
}

func (n *Node) newLeaseManager(o options) (*leaseManager, error) {
	execs, err := n.newExecutors(o)
	if err != nil {
		return nil, err
	}
	return &leaseManager{runs: map[string]*leaseRun{}, executors: execs, grace: o.unpaidGrace, withhold: o.withhold}, nil
}

// setBusy tells a simulated backend that a workload runs on gpus.
func (n *Node) setBusy(gpus []string, busy bool) {
	if sim, ok := n.gpus.(gpu.Simulator); ok {
		for _, g := range gpus {
			sim.SetBusy(g, busy)
		}
	}
}

// startLeases registers the lease protocols and resumes every stored
// lease: closed ones are listed, open ones go on (or close with a reason
// when their end passed while the node was down).
func (n *Node) startLeases(o options) error {
	m, err := n.newLeaseManager(o)
	if err != nil {
		return err
	}
	n.leases = m
	p2p.HandleReceipts(n.host, n.guard(n.handleReceiptMsg))
	p2p.HandleExec(n.ctx, n.host, func(ctx context.Context, from peer.ID, req []byte, out *p2p.FrameWriter) {
		if !n.leases.enter() {
			return
		}
		defer n.leases.handlers.Done()
		n.handleExec(ctx, from, req, out)
	})
	recs, err := n.leaseRecords()
	if err != nil {
		return err
	}
	now := n.now()
	for id, rec := range recs {
		terms, err := n.store.GetLease(id)
		if err != nil {
			n.log.Warn("lease without terms", "lease", id, "err", err)
			continue
		}
		r, err := n.replayLease(terms, rec)
		if err != nil {
			n.log.Warn("lease not resumed", "lease", id, "err", err)
			continue
		}
		r.resumedAt = now
		n.leases.mu.Lock()
		n.leases.runs[id] = r
		n.leases.mu.Unlock()
		n.addPeerAddrs(r)
		if r.ml.State == market.LeaseClosed && !n.leaseUnsettled(r, now) {
			continue
		}
		if rec.Role == market.RoleProvider && r.ml.State != market.LeaseClosed {
			if rec.Workload != nil || rec.Handle != "" || rec.Pgid != 0 {
				n.resumeWorkload(r)
			} else {
				r.rec.HeldSince = now.UnixMilli()
				r.exec, _ = executor.ReserveExecutor{}.Start(n.ctx, Workload{})
				r.rec.Executor = ExecReserve
				if err := n.putLeaseRecord(id, &r.rec); err != nil {
					return fmt.Errorf("node: resuming lease %s: %w", id, err)
				}
			}
		}
		n.log.Info("lease resumed", "lease", id, "role", rec.Role, "state", r.ml.State)
		n.runLease(r)
	}
	n.sweepWorkloads()
	n.spawn(func() {
		n.redialLoop()
	})
	return nil
}

// guard wraps a handler so none runs once the node is closing.
func (n *Node) guard(h p2p.ReceiptHandler) p2p.ReceiptHandler {
	return func(from peer.ID, kind byte, body []byte) (byte, []byte) {
		if !n.leases.enter() {
			return p2p.FrameRefuse, []byte(errNodeClosing)
		}
		defer n.leases.handlers.Done()
		return h(from, kind, body)
	}
}

func (m *leaseManager) enter() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.handlers.Add(1)
	return true
}

// stopLeases refuses new lease messages, waits for those in flight and
// stops the running workloads. Leases stay open in storage: a restarted
// node resumes them.
func (n *Node) stopLeases() {
	if n.leases == nil {
		return
	}
	n.host.RemoveStreamHandler(p2p.ReceiptProtocol)
	n.host.RemoveStreamHandler(p2p.ExecProtocol)
	n.leases.mu.Lock()
	n.leases.closed = true
	runs := make([]*leaseRun, 0, len(n.leases.runs))
	for _, r := range n.leases.runs {
		runs = append(runs, r)
	}
	n.leases.mu.Unlock()
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
	n.leases.handlers.Wait()
}

// replayLease rebuilds a lease from storage: its events in order.
func (n *Node) replayLease(terms *proto.Lease, rec leases.Record) (*leaseRun, error) {
	ml, err := market.NewLease(terms)
	if err != nil {
		return nil, err
	}
	r := &leaseRun{id: terms.Id, terms: terms, ml: ml, rec: rec, wake: make(chan struct{}, 1), meter: map[string]*gpuMeter{}}
	r.peer = peer.ID(terms.Buyer)
	if rec.Role == market.RoleBuyer {
		r.peer = peer.ID(terms.Provider)
	}
	if !rec.StartedAt.IsZero() {
		ml.Start(rec.StartedAt)
	}
	chain, err := n.store.Receipts(terms.Id)
	if err != nil {
		return nil, err
	}
	for _, sr := range chain {
		rc, err := leases.DecodeReceipt(sr.Receipt)
		if err != nil {
			return nil, err
		}
		hash := proto.ReceiptHash(sr.Receipt)
		if err := ml.AddReceipt(rc, hash, n.now()); err != nil {
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
	r.logSeq, _ = n.store.LastLogSeq(terms.Id)
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

// leaseFromFill starts a lease from a fill this node is party to; the
// lease terms are already stored (trade.go). A fill seen again changes
// nothing.
func (n *Node) leaseFromFill(ev *p2p.BookEvent) {
	if ev.Lease == nil || n.leases == nil {
		return
	}
	terms := ev.Lease
	me := []byte(n.host.ID())
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
		n.log.Warn("lease terms refused", "lease", terms.Id, "err", err)
		return
	}
	// The run is built whole before it is put in the runs map: from then
	// on views and handlers read it, under r.mu only.
	r := &leaseRun{id: terms.Id, terms: terms, ml: ml, wake: make(chan struct{}, 1), meter: map[string]*gpuMeter{}}
	r.rec.Role = role
	r.peer = peer.ID(terms.Buyer)
	if role == market.RoleBuyer {
		r.peer = peer.ID(terms.Provider)
	}
	if ev.Raw != nil {
		r.rec.Fill, _ = gproto.Marshal(ev.Raw)
	}
	if role == market.RoleBuyer {
		n.ownMu.Lock()
		r.rec.BidID = ev.Fill.BidID
		if oo := n.own[ev.Fill.BidID]; oo != nil && !oo.workload.Empty() {
			spec := oo.workload
			r.rec.Workload, r.rec.Exec = &spec, spec.Command
		}
		n.ownMu.Unlock()
	}
	r.rec.PeerAddrs = n.peerAddrs(r.peer)
	r.mu.Lock()
	n.leases.mu.Lock()
	if _, ok := n.leases.runs[terms.Id]; ok || n.leases.closed {
		n.leases.mu.Unlock()
		r.mu.Unlock()
		return
	}
	n.leases.runs[terms.Id] = r
	n.leases.mu.Unlock()
	start := time.UnixMilli(terms.StartUnixMs)
	if role == market.RoleProvider {
		r.exec, _ = executor.ReserveExecutor{}.Start(n.ctx, Workload{LeaseID: terms.Id, GPUs: terms.Gpus})
		r.rec.Executor, r.rec.HeldSince = ExecReserve, terms.StartUnixMs
	}
	if now := n.now(); now.After(start) {
		start = now
	}
	r.ml.Start(start)
	r.syncRecord()
	if err := n.putLeaseRecord(terms.Id, &r.rec); err != nil {
		n.failStoreLocked(r, "lease record", err)
	}
	r.mu.Unlock()
	n.log.Info("lease started", "lease", terms.Id, "role", role, "gpus", len(terms.Gpus))
	n.runLease(r)
	if role == market.RoleBuyer && r.rec.Workload != nil {
		n.spawn(func() {
			n.followExec(r)
		})
	}
}

// syncRecord copies the market lease's state into the record. Holds r.mu.
func (r *leaseRun) syncRecord() {
	r.rec.State, r.rec.Reason = r.ml.State, r.ml.Reason
	r.rec.StartedAt, r.rec.EndingAt, r.rec.ClosedAt = r.ml.StartedAt, r.ml.EndingAt, r.ml.ClosedAt
}

func (n *Node) runLease(r *leaseRun) {
	r.mu.Lock()
	if r.active {
		r.mu.Unlock()
		return
	}
	r.active = true
	r.mu.Unlock()
	started := n.spawn(func() {
		every := min(max(market.BillingInterval(r.terms)/4, 50*time.Millisecond), 250*time.Millisecond)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			var done bool
			if r.rec.Role == market.RoleProvider {
				done = n.providerStep(r)
			} else {
				done = n.buyerStep(r)
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
			case <-n.ctx.Done():
				r.mu.Lock()
				r.active = false
				r.mu.Unlock()
				return
			case <-t.C:
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

func (r *leaseRun) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// grace is the unpaid grace of a lease.
func (n *Node) grace(terms *proto.Lease) time.Duration {
	if n.leases.grace > 0 {
		return n.leases.grace
	}
	return market.DefaultUnpaidGrace * market.BillingInterval(terms)
}

// leaseUnsettled reports whether a closed lease still waits for receipts
// or countersignatures. Holds no lock; reads r under r.mu.
func (n *Node) leaseUnsettled(r *leaseRun, now time.Time) bool {
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
	return now.Before(from.Add(n.grace(r.terms) + market.BillingInterval(r.terms)))
}

// providerStep meters, ends the lease when due, bills due windows and
// sends receipts not yet countersigned. It reports whether the lease needs
// no more work.
func (n *Node) providerStep(r *leaseRun) bool {
	n.sample(r)
	now := n.now()
	others, limited := n.creditOthers(r, now) // credit.go
	r.mu.Lock()
	var notify market.CloseReason
	switch {
	case r.ml.State == market.LeaseRunning && !r.rec.PreemptAt.IsZero() && !now.Before(r.rec.PreemptAt) && r.rec.PreemptAt.Before(market.LeaseEnd(r.terms)):
		n.endLocked(r, market.ClosePreempted, r.rec.PreemptAt, "")
		notify = market.ClosePreempted
	case r.ml.State == market.LeaseRunning && r.ml.Expired(now):
		n.endLocked(r, market.CloseCompleted, now, "")
	case r.ml.State == market.LeaseRunning && r.ml.Unpaid(now, n.grace(r.terms)) &&
		market.Unpaid(r.terms, r.resumedAt, now, n.grace(r.terms)):
		n.endLocked(r, market.CloseUnpaid, now, "buyer did not countersign within the grace")
		notify = market.CloseUnpaid
	}
	if note, over := n.overCreditLocked(others, limited, r, now); over {
		n.endLocked(r, market.CloseUnpaid, r.billedTo(), note)
		notify = market.CloseUnpaid
	}
	var failNote string
	for {
		w, ok := r.ml.Due(now)
		if !ok {
			break
		}
		if err := n.billLocked(r, w, now); err != nil {
			if se := (*storeError)(nil); errors.As(err, &se) {
				// The receipt is not stored: it is never sent, and the
				// lease cannot go on billing.
				n.storeFailed(se, r.id)
				if r.ml.State == market.LeaseRunning || r.ml.State == market.LeaseStarting {
					failNote = se.Error()
					n.endLocked(r, market.CloseFailed, now, failNote)
					notify = market.CloseFailed
				}
			} else {
				n.log.Error("billing failed", "lease", r.id, "err", err)
			}
			break
		}
		if note, over := n.overCreditLocked(others, limited, r, now); over {
			n.endLocked(r, market.CloseUnpaid, w.End, note)
			notify = market.CloseUnpaid
		}
	}
	closedAt := r.ml.ClosedAt
	r.mu.Unlock()
	if notify == market.CloseFailed {
		n.sendClose(r, notify, closedAt, failNote)
	} else if notify != 0 {
		n.sendClose(r, notify, closedAt)
	}
	n.sendPending(r)
	n.sendOwedClose(r)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ml.State == market.LeaseClosed && !n.leaseUnsettled(r, n.now())
}

// endLocked ends and closes a lease at at for reason. Its workload is
// stopped (up to leaseStopGrace) without r.mu, so that views and the
// lease's messages never wait for it; the exit is recorded, the record
// stored and the GPUs handed back once it has stopped. Until then the
// lease shows as ending. Holds r.mu.
func (n *Node) endLocked(r *leaseRun, reason market.CloseReason, at time.Time, note string) {
	at = time.UnixMilli(at.UnixMilli()) // as close notices and receipts carry it: both ends keep one time
	var err error
	if reason == market.CloseFailed {
		err = r.ml.Fail(at)
	} else {
		err = r.ml.End(reason, at)
	}
	if err != nil {
		n.log.Warn("lease end refused", "lease", r.id, "reason", reason, "err", err)
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
		n.closedLocked(r, nil)
		return
	}
	r.stopping = true
	n.spawn(func() {
		if err := ex.Stop(leaseStopGrace); err != nil {
			n.log.Warn("stopping the workload failed", "lease", r.id, "err", err)
		}
		r.mu.Lock()
		n.closedLocked(r, ex)
		r.mu.Unlock()
		r.poke()
	})
}

// closedLocked finishes a lease's end once its workload ex (nil: none)
// has stopped: the exit recorded, the record stored, the GPUs handed
// back. Holds r.mu.
func (n *Node) closedLocked(r *leaseRun, ex Execution) {
	if ex != nil {
		if r.rec.Executor != ExecReserve && r.rec.Executor != "" && r.rec.Exit == nil {
			res := ex.Result()
			r.rec.Exit = &res
		}
		if r.rec.Info != nil {
			info := ex.Info()
			r.rec.Info.State = cmpOr(info.State, "exited")
		}
		r.rec.Pgid = 0
	}
	r.stopping = false
	r.syncRecord()
	if err := n.putLeaseRecord(r.id, &r.rec); err != nil {
		// Closed already: nothing more to end; the resumed lease ends again.
		n.storeFailed(&storeError{what: "lease record", err: err}, r.id)
	}
	if r.rec.Role == market.RoleProvider {
		if err := n.store.ReleaseGPUs(r.terms.Gpus, r.id); err != nil {
			n.storeFailed(&storeError{what: "GPU release", err: err}, r.id) // the holds lapse at their end
		}
		n.leaseEnded() // capacity.go
	}
	n.log.Info("lease closed", "lease", r.id, "reason", r.ml.Reason, "role", r.rec.Role)
}

// storeError is a failed write of the store on the money path.
type storeError struct {
	what string
	err  error
}

func (e *storeError) Error() string { return "storing " + e.what + " failed: " + e.err.Error() }
func (e *storeError) Unwrap() error { return e.err }

// storeFailed logs and counts a failed write on the money path.
func (n *Node) storeFailed(e *storeError, lease string) {
	n.metrics.storeErrors.WithLabelValues(e.what).Inc()
	n.log.Error("store write failed", "what", e.what, "lease", lease, "err", e.err)
}

// failStoreLocked ends a running lease as failed after a failed write of
// what, the error as its note, and tells the counterparty (in the
// background: r.mu is held). A closed lease only logs and counts it.
// Holds r.mu.
func (n *Node) failStoreLocked(r *leaseRun, what string, err error) {
	se := &storeError{what: what, err: err}
	n.storeFailed(se, r.id)
	if r.ml.State != market.LeaseRunning && r.ml.State != market.LeaseStarting {
		return
	}
	note := se.Error()
	n.endLocked(r, market.CloseFailed, n.now(), note)
	at := r.ml.ClosedAt
	reason := market.CloseFailed
	if r.rec.Role == market.RoleBuyer {
		reason = market.CloseBuyer // a buyer's reason to give the provider
	}
	n.spawn(func() {
		n.sendClose(r, reason, at, note)
		r.poke()
	})
}

// sample reads the leased GPUs' telemetry into the window's meters.
func (n *Node) sample(r *leaseRun) {
	if n.gpus == nil {
		return
	}
	tel, err := n.gpus.Telemetry()
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
func (n *Node) billLocked(r *leaseRun, w market.Window, now time.Time) error {
	ws, we := w.Start.UnixMilli(), w.End.UnixMilli()
	from := max(ws, r.rec.HeldSince)
	held := uint64(max(0, we-from))
	rc := &proto.Receipt{
		LeaseId: r.id, Seq: r.ml.Chain.Seq + 1, WindowStartUnixMs: ws, WindowEndUnixMs: we,
		Provider: []byte(n.host.ID()), CreatedUnixMs: max(now.UnixMilli(), we),
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
	env, err := p2p.Seal(n.key, rc, proto.MaxReceiptSize)
	if err != nil {
		return err
	}
	hash := proto.ReceiptHash(env)
	if err := r.ml.AddReceipt(rc, hash, now); err != nil {
		return err
	}
	if err := n.store.PutReceipt(r.id, rc.Seq, &proto.SignedReceipt{Receipt: env}); err != nil {
		return &storeError{what: "receipt", err: err}
	}
	clear(r.meter)
	return nil
}

// sendPending sends the receipts the buyer has not countersigned, oldest
// first, and takes its countersignatures.
func (n *Node) sendPending(r *leaseRun) {
	r.mu.Lock()
	from, to := r.ml.Countersigned.Seq+1, r.ml.Chain.Seq
	r.mu.Unlock()
	for seq := from; seq <= to; seq++ {
		sr, err := n.store.GetReceipt(r.id, seq)
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(n.ctx, p2p.ReceiptTimeout)
		kind, body, err := p2p.SendReceiptMessage(ctx, n.host, r.peer, p2p.FrameReceipt, sr.Receipt)
		cancel()
		if err != nil {
			n.log.Debug("sending receipt failed", "lease", r.id, "seq", seq, "err", err)
			return
		}
		if kind != p2p.FrameCountersign {
			n.log.Debug("receipt not countersigned", "lease", r.id, "seq", seq, "answer", string(body))
			return
		}
		if err := n.takeCountersign(r, sr, body); err != nil {
			if se := (*storeError)(nil); errors.As(err, &se) {
				return // the lease failed (takeCountersign)
			}
			n.metrics.rejects.WithLabelValues("countersign", market.Reason(err)).Inc()
			n.log.Warn("countersignature refused", "lease", r.id, "seq", seq, "err", err)
			return
		}
	}
}

// takeCountersign checks the buyer's countersignature of sr and stores the
// doubly-signed receipt.
func (n *Node) takeCountersign(r *leaseRun, sr *proto.SignedReceipt, csEnv []byte) error {
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
	if err := n.store.PutReceipt(r.id, rc.Seq, &proto.SignedReceipt{Receipt: sr.Receipt, Countersign: csEnv}); err != nil {
		n.failStoreLocked(r, "countersigned receipt", err)
		return &storeError{what: "countersigned receipt", err: err}
	}
	return r.ml.AddCountersign(cs, n.now())
}

// buyerStep closes the buyer's lease at its end, or when the provider has
// gone silent past the grace. It reports whether the lease needs no more
// work.
func (n *Node) buyerStep(r *leaseRun) bool {
	n.sendOwedClose(r)
	now := n.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.ml.State == market.LeaseRunning && !r.rec.PreemptAt.IsZero() && !now.Before(r.rec.PreemptAt) && r.rec.PreemptAt.Before(market.LeaseEnd(r.terms)):
		n.endLocked(r, market.ClosePreempted, r.rec.PreemptAt, "")
	case r.ml.State == market.LeaseRunning && r.ml.Expired(now):
		n.endLocked(r, market.CloseCompleted, now, "")
	case r.ml.State == market.LeaseRunning:
		last := time.UnixMilli(max(r.terms.StartUnixMs, r.ml.Chain.WindowEndUnixMs, r.resumedAt.UnixMilli()))
		if now.After(last.Add(market.BillingInterval(r.terms) + n.grace(r.terms) + 2*time.Second)) {
			n.endLocked(r, market.CloseBuyer, now, "no receipts from the provider")
			// The provider hears of it when it is back (sendOwedClose).
			r.rec.CloseOwed = &leases.CloseNotice{Lease: r.id, Reason: market.CloseBuyer, AtMs: r.ml.ClosedAt.UnixMilli(), Note: r.rec.Note}
			n.putRecordLocked(r)
		}
	}
	return r.ml.State == market.LeaseClosed && !n.leaseUnsettled(r, now)
}

// handleReceiptMsg answers the lease protocol's messages.
func (n *Node) handleReceiptMsg(from peer.ID, kind byte, body []byte) (byte, []byte) {
	var err error
	var reply []byte
	switch kind {
	case p2p.FrameReceipt:
		reply, err = n.takeReceipt(from, body)
		if err == nil {
			return p2p.FrameCountersign, reply
		}
		// BookReason labels envelope and signer failures, then the
		// market's receipt reasons.
		label := p2p.BookReason(err)
		if errors.Is(err, market.ErrNotVouched) {
			label = "not-running"
		}
		n.metrics.rejects.WithLabelValues("receipt", label).Inc()
		n.log.Debug("receipt refused", "from", shortID(from), "err", err)
	case p2p.FrameClose:
		err = n.takeClose(from, body)
	case p2p.FramePayment:
		err = n.takePayment(from, body)
	case p2p.FramePreempt:
		err = n.takePreemption(from, body)
	case p2p.FrameHandover:
		if reply, err = n.takeHandover(from, body); err == nil {
			return p2p.FrameOK, reply
		}
	case p2p.FramePremium:
		err = n.takePremiumCountersign(from, body)
	default:
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
func (n *Node) takeReceipt(from peer.ID, env []byte) ([]byte, error) {
	rc, signer, err := p2p.Open[*proto.Receipt](env, proto.MaxReceiptSize)
	if err != nil {
		return nil, fmt.Errorf("receipt: %w", err) // bad envelope or too large
	}
	n.leases.mu.Lock()
	r := n.leases.runs[rc.LeaseId]
	n.leases.mu.Unlock()
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
		stored, err := n.store.GetReceipt(r.id, rc.Seq)
		if err != nil {
			return nil, err
		}
		if !bytes.Equal(proto.ReceiptHash(stored.Receipt), hash) {
			ev := market.DetectEquivocation(
				market.SignedReceiptDecoded{Receipt: mustReceipt(stored.Receipt), Hash: proto.ReceiptHash(stored.Receipt)},
				market.SignedReceiptDecoded{Receipt: rc, Hash: hash})
			if err := n.store.PutEvidence(r.id, rc.Seq, stored.Receipt, env); err != nil {
				n.storeFailed(&storeError{what: "evidence", err: err}, r.id)
			}
			return nil, ev
		}
		if len(stored.Countersign) > 0 {
			return stored.Countersign, nil // a resend: the same answer
		}
		if n.leases.withhold {
			return nil, errWithheld
		}
		// Kept, not countersigned, when it came: countersigned now if
		// this side can vouch for it now.
		return n.countersignLocked(r, rc, env, hash)
	}
	now := n.now()
	if err := r.ml.AddReceipt(rc, hash, now); err != nil {
		var ev *market.Evidence
		if errors.As(err, &ev) {
			if stored, gerr := n.store.GetReceipt(r.id, rc.Seq); gerr == nil {
				if err := n.store.PutEvidence(r.id, rc.Seq, stored.Receipt, env); err != nil {
					n.storeFailed(&storeError{what: "evidence", err: err}, r.id)
				}
			}
		}
		return nil, err
	}
	vouchErr := market.VouchWindow(r.terms, rc, r.seenLocked())
	if n.leases.withhold || vouchErr != nil {
		// Kept as evidence of what the provider billed, not countersigned.
		if err := n.store.PutReceipt(r.id, rc.Seq, &proto.SignedReceipt{Receipt: env}); err != nil {
			n.failStoreLocked(r, "receipt", err)
			return nil, &storeError{what: "receipt", err: err}
		}
		if vouchErr != nil {
			return nil, vouchErr
		}
		return nil, errWithheld
	}
	return n.countersignLocked(r, rc, env, hash)
}

// seenLocked is what the buyer saw of the lease's workload. Holds r.mu.
func (r *leaseRun) seenLocked() market.WorkSeen {
	return market.WorkSeen{
		Workload: r.rec.Workload != nil && !r.rec.Workload.Empty(), Started: r.rec.Info != nil,
		DownSince: r.execDownSince, ExitedAt: r.exitedAt,
	}
}

// countersignLocked countersigns receipt rc (sealed as env, hashed hash),
// which the buyer's lease holds, once this side vouches for its window;
// the countersignature is stored (synced) with the receipt before it is
// returned. Holds r.mu.
func (n *Node) countersignLocked(r *leaseRun, rc *proto.Receipt, env, hash []byte) ([]byte, error) {
	if err := market.VouchWindow(r.terms, rc, r.seenLocked()); err != nil {
		return nil, err
	}
	now := n.now()
	cs := &proto.Countersign{LeaseId: r.id, Seq: rc.Seq, ReceiptHash: hash, Buyer: []byte(n.host.ID()), CreatedUnixMs: now.UnixMilli()}
	csEnv, err := p2p.Seal(n.key, cs, proto.MaxReceiptSize)
	if err != nil {
		return nil, err
	}
	// Stored (synced) before the countersignature is sent: a crash never
	// loses a receipt this node countersigned.
	if err := n.store.PutReceipt(r.id, rc.Seq, &proto.SignedReceipt{Receipt: env, Countersign: csEnv}); err != nil {
		n.failStoreLocked(r, "countersigned receipt", err)
		return nil, &storeError{what: "countersigned receipt", err: err}
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

// sendClose records that this node owes the counterparty a notice that
// it ended the lease for reason at at, and sends it. Holds no lock.
func (n *Node) sendClose(r *leaseRun, reason market.CloseReason, at time.Time, note ...string) {
	c := &leases.CloseNotice{Lease: r.id, Reason: reason, AtMs: at.UnixMilli()}
	if len(note) > 0 {
		c.Note = truncate(note[0], 512)
	}
	r.mu.Lock()
	r.rec.CloseOwed, r.closeTried, r.closeWait = c, time.Time{}, 0
	if err := n.putLeaseRecord(r.id, &r.rec); err != nil {
		// Kept in memory: re-sent until the node stops.
		n.storeFailed(&storeError{what: "lease record", err: err}, r.id)
	}
	r.mu.Unlock()
	n.sendOwedClose(r)
}

// sendOwedClose sends the close notice the lease owes its counterparty,
// if any and if its wait since the last try is over (a redial resets it),
// and forgets it once the counterparty answered. Holds no lock.
func (n *Node) sendOwedClose(r *leaseRun) {
	now := n.now()
	r.mu.Lock()
	c := r.rec.CloseOwed
	if c == nil || !r.closeTried.IsZero() && now.Sub(r.closeTried) < r.closeWait {
		r.mu.Unlock()
		return
	}
	r.closeTried, r.closeWait = now, min(max(2*r.closeWait, closeResendFirst), closeResendMax)
	r.mu.Unlock()
	b, _ := json.Marshal(c)
	ctx, cancel := context.WithTimeout(n.ctx, p2p.ReceiptTimeout)
	kind, body, err := p2p.SendReceiptMessage(ctx, n.host, r.peer, p2p.FrameClose, b)
	cancel()
	if err != nil || kind == p2p.FrameRefuse && string(body) == errNodeClosing || kind != p2p.FrameOK && kind != p2p.FrameRefuse {
		n.log.Debug("close notice not taken; re-sent later", "lease", r.id, "err", err, "answer", string(body))
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
		n.log.Warn("close notice refused", "lease", r.id, "reason", c.Reason, "answer", string(body))
	}
	n.putRecordLocked(r)
}

// rejectClose counts a refused close notice under reason and returns err.
func (n *Node) rejectClose(reason string, err error) error {
	n.metrics.rejects.WithLabelValues("close", reason).Inc()
	return err
}

// takeClose takes the counterparty's notice that it ended a lease: checked
// against the lease's parties, type and terms, then the lease ended at
// the notice's time, or, closed here already, the two closes agreed.
func (n *Node) takeClose(from peer.ID, body []byte) error {
	var c leases.CloseNotice
	if err := json.Unmarshal(body, &c); err != nil {
		return n.rejectClose("malformed", fmt.Errorf("close notice: %v", err))
	}
	n.leases.mu.Lock()
	r := n.leases.runs[c.Lease]
	n.leases.mu.Unlock()
	if r == nil || r.peer != from {
		return n.rejectClose("unknown-lease", fmt.Errorf("no lease %q with this peer", c.Lease))
	}
	allowed := []market.CloseReason{market.CloseCompleted, market.CloseBuyer}
	if r.rec.Role == market.RoleBuyer {
		allowed = []market.CloseReason{market.CloseCompleted, market.CloseProvider, market.CloseUnpaid, market.ClosePreempted,
			market.CloseExited, market.CloseFailed, market.CloseResold}
	}
	if !slices.Contains(allowed, c.Reason) {
		return n.rejectClose("reason", fmt.Errorf("%w: reason %s not the counterparty's to give", market.ErrCloseRefused, c.Reason))
	}
	now := n.now()
	at := time.UnixMilli(min(c.AtMs, now.UnixMilli()))
	r.mu.Lock()
	defer func() { r.mu.Unlock(); r.poke(); n.runLease(r) }()
	if r.ml.State == market.LeaseStarting {
		return n.rejectClose("out-of-turn", fmt.Errorf("%w: lease %s has not started", market.ErrCloseRefused, r.id))
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
			return n.rejectClose("out-of-turn", fmt.Errorf("%w: completed before the lease's end", market.ErrCloseRefused))
		}
	case market.CloseBuyer:
		var billedTo time.Time
		if r.ml.Countersigned.Seq > 0 {
			billedTo = time.UnixMilli(r.ml.Countersigned.WindowEndUnixMs)
		}
		if err := market.CheckBuyerClose(r.terms, c.Reason, at, billedTo, n.grace(r.terms)); err != nil {
			return n.rejectClose("early-close", err)
		}
	case market.ClosePreempted:
		if !market.LeaseType(r.terms.LeaseType).Interruptible() {
			return n.rejectClose("out-of-turn", fmt.Errorf("%w: %s leases are never preempted", market.ErrCloseRefused, market.LeaseType(r.terms.LeaseType)))
		}
	case market.CloseResold:
		if market.LeaseType(r.terms.LeaseType) != market.Reserved {
			return n.rejectClose("out-of-turn", fmt.Errorf("%w: only reserved leases are resold", market.ErrCloseRefused))
		}
	}
	note := "closed by the counterparty"
	if c.Note != "" {
		note += ": " + truncate(c.Note, 512)
	}
	r.closeTakenAt = now
	if r.ml.State == market.LeaseRunning {
		if err := n.dropBilledPastLocked(r, at); err != nil {
			return err
		}
		n.endLocked(r, c.Reason, at, note)
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
	return n.reviseCloseLocked(r, reason, agreed, note)
}

// dropBilledPastLocked drops the provider's receipts for windows that end
// after at, which the buyer never countersigned (at is not before the
// last countersigned window's end), and rebuilds the lease from what is
// left. A buyer's lease has nothing to drop. Holds r.mu.
func (n *Node) dropBilledPastLocked(r *leaseRun, at time.Time) error {
	if r.rec.Role != market.RoleProvider || r.ml.Chain.WindowEndUnixMs <= at.UnixMilli() {
		return nil
	}
	chain, err := n.store.Receipts(r.id)
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
	if err := n.store.DropReceipts(r.id, from, r.ml.Chain.Seq); err != nil {
		n.failStoreLocked(r, "dropped receipts", err)
		return &storeError{what: "dropped receipts", err: err}
	}
	n.metrics.leaseReceiptsDropped.Add(float64(r.ml.Chain.Seq - from + 1))
	n.log.Info("receipts past the agreed close dropped", "lease", r.id, "from", from, "to", r.ml.Chain.Seq)
	return n.rebuildLocked(r)
}

// rebuildLocked replaces r's market lease with one replayed from storage
// and r.rec. Holds r.mu.
func (n *Node) rebuildLocked(r *leaseRun) error {
	fresh, err := n.replayLease(r.terms, r.rec)
	if err != nil {
		return err
	}
	r.ml = fresh.ml
	return nil
}

// reviseCloseLocked makes a closed lease's close the one both sides agreed
// on: reason at at (earlier than this node's own). Holds r.mu.
func (n *Node) reviseCloseLocked(r *leaseRun, reason market.CloseReason, at time.Time, note string) error {
	if err := n.dropBilledPastLocked(r, at); err != nil {
		return err
	}
	n.log.Info("lease close agreed with the counterparty", "lease", r.id, "was", r.ml.Reason, "now", reason)
	r.rec.Reason, r.rec.EndingAt, r.rec.ClosedAt, r.rec.Note = reason, at, at, note
	r.rec.CloseOwed = nil // the counterparty's close stands
	if err := n.rebuildLocked(r); err != nil {
		return err
	}
	r.syncRecord()
	n.putRecordLocked(r)
	return nil
}

// CloseLease implements API: this node ends the lease early.
func (n *Node) CloseLease(ctx context.Context, id string) (_ api.LeaseView, err error) {
	defer classified(&err)
	r, err := n.leaseRun(id)
	if err != nil {
		return api.LeaseView{}, err
	}
	reason := market.CloseBuyer
	if r.rec.Role == market.RoleProvider {
		reason = market.CloseProvider
	} else if market.LeaseType(r.terms.LeaseType) == market.Reserved && n.now().Before(market.LeaseEnd(r.terms)) {
		// Reserved time is a commitment: the buyer pays for all of it.
		return api.LeaseView{}, api.Errorf(api.CodeLeaseState, "lease %s is reserved until %s: a commitment, not closed early by the buyer", id,
			market.LeaseEnd(r.terms).Format(time.RFC3339))
	}
	r.mu.Lock()
	if r.ml.State != market.LeaseRunning && r.ml.State != market.LeaseStarting {
		r.mu.Unlock()
		return api.LeaseView{}, api.Errorf(api.CodeLeaseState, "lease %s is %s", id, r.ml.State)
	}
	n.endLocked(r, reason, n.now(), "")
	at := r.ml.ClosedAt
	r.mu.Unlock()
	n.sendClose(r, reason, at)
	r.poke()
	n.runLease(r)
	return n.Lease(ctx, id)
}

func (n *Node) leaseRun(id string) (*leaseRun, error) {
	n.leases.mu.Lock()
	defer n.leases.mu.Unlock()
	r := n.leases.runs[id]
	if r == nil {
		return nil, fmt.Errorf("%w: %s", api.ErrUnknownLease, id)
	}
	return r, nil
}

func (r *leaseRun) view() api.LeaseView {
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
		v.Image = cmpOr(v.Image, i.Image)
		v.ImageDigest = cmpOr(i.RepoDigest, i.ImageID)
		v.Endpoints, v.GPUAccess = i.Endpoints, i.GPUAccess
		if i.Executor == ExecDocker {
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

// Leases implements API: every lease this node is party to, newest first.
func (n *Node) Leases(context.Context) (_ []api.LeaseView, err error) {
	defer classified(&err)
	n.leases.mu.Lock()
	runs := make([]*leaseRun, 0, len(n.leases.runs))
	for _, r := range n.leases.runs {
		runs = append(runs, r)
	}
	n.leases.mu.Unlock()
	out := make([]api.LeaseView, 0, len(runs))
	for _, r := range runs {
		out = append(out, r.view())
	}
	slices.SortFunc(out, func(a, b api.LeaseView) int {
		if c := b.Start.Compare(a.Start); c != 0 {
			return c
		}
		return bytes.Compare([]byte(a.ID), []byte(b.ID))
	})
	return out, nil
}

// Lease implements API.
func (n *Node) Lease(_ context.Context, id string) (_ api.LeaseView, err error) {
	defer classified(&err)
	r, err := n.leaseRun(id)
	if err != nil {
		return api.LeaseView{}, err
	}
	v := r.view()
	v.Resale = n.resaleView(id) // resale.go
	return v, nil
}

// --- storage ---

// putLeaseRecord stores a lease's record (JSON), synced.
func (n *Node) putLeaseRecord(id string, rec *leases.Record) error {
	return leases.PutRecord(n.store, id, rec)
}

// leaseRecords reads every stored lease record, by lease ID.
func (n *Node) leaseRecords() (map[string]leases.Record, error) { return leases.Records(n.store) }
