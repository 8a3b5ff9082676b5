package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// Spot preemption: a provider whose GPUs are all leased takes an
// on-demand or reserved trade (or a spot one paying the margin more) by
// interrupting the spot leases that lose it the least revenue
// (market.ChoosePreempted). Each
// victim's buyer gets a signed notice; its workload gets SIGTERM at once
// and the notice period as grace; at the notice's end both sides close it
// as preempted, billed to that moment, and the new lease starts then on
// its GPUs.

// WithPreemptionNotice sets the notice this provider's spot leases get
// before an interruption, stated in their terms. Default
// market.PreemptionNotice (30 s).
func WithPreemptionNotice(d time.Duration) Option {
	return func(o *options) error {
		if d < time.Second || d > market.MaxPreemptionNotice {
			return fmt.Errorf("node: preemption notice %s: want 1s..%s", d, market.MaxPreemptionNotice)
		}
		o.preemptNotice = d
		return nil
	}
}

// WithPreemptMargin sets how much more (basis points) a spot trade must pay
// per GPU-hour to preempt a running spot lease. Default
// market.DefaultPreemptMarginBP.
func WithPreemptMargin(bp int64) Option {
	return func(o *options) error {
		if bp < 0 || bp > 1_000_000 {
			return fmt.Errorf("node: preemption margin %d bp", bp)
		}
		o.preemptMargin = &bp
		return nil
	}
}

func cmpOrDuration(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// preemptible lists this provider's running spot leases in mkt not yet
// preempted.
func (n *Node) preemptible(mkt string) []market.Preemptible {
	n.leases.mu.Lock()
	defer n.leases.mu.Unlock()
	var out []market.Preemptible
	for _, r := range n.leases.runs {
		r.mu.Lock()
		if r.rec.Role == market.RoleProvider && r.ml.State == market.LeaseRunning && r.rec.PreemptAt.IsZero() && r.terms.Market == mkt {
			out = append(out, market.Preemptible{ID: r.id, GPUs: r.terms.Gpus, Price: r.terms.PriceMicros,
				Type: market.LeaseType(r.terms.LeaseType), Since: r.ml.StartedAt})
		}
		r.mu.Unlock()
	}
	return out
}

// preemptionEnd is when the last victim's notice runs out, from now.
func (n *Node) preemptionEnd(victims []market.Preemptible, now time.Time) time.Time {
	end := now
	for _, v := range victims {
		if r, err := n.leaseRun(v.ID); err == nil {
			end = maxTime(end, now.Add(market.LeaseNotice(r.terms)))
		}
	}
	return end
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func victimIDs(vs []market.Preemptible) []string {
	var ids []string
	for _, v := range vs {
		ids = append(ids, v.ID)
	}
	return ids
}

// preempt interrupts the victims for lease forLease: notice recorded and
// sent, workloads told to stop within it.
func (n *Node) preempt(victims []market.Preemptible, forLease string, now time.Time) {
	for _, v := range victims {
		r, err := n.leaseRun(v.ID)
		if err != nil {
			continue
		}
		notice := market.LeaseNotice(r.terms)
		r.mu.Lock()
		if r.ml.State != market.LeaseRunning || !r.rec.PreemptAt.IsZero() {
			r.mu.Unlock()
			continue
		}
		r.rec.PreemptAt = time.UnixMilli(now.Add(notice).UnixMilli()) // as the notice carries it
		r.rec.Note = "preempted for lease " + forLease
		n.putRecordLocked(r)
		ex := r.exec
		p := &proto.Preemption{LeaseId: r.id, Provider: []byte(n.host.ID()), CreatedUnixMs: now.UnixMilli(),
			EndsUnixMs: r.rec.PreemptAt.UnixMilli(), Reason: "a higher-priority trade"}
		r.mu.Unlock()
		n.log.Info("lease preempted", "lease", r.id, "for", forLease, "ends", r.rec.PreemptAt.Format(time.RFC3339Nano))
		env, err := p2p.Seal(n.key, p, proto.MaxReceiptSize)
		if err != nil {
			n.log.Error("sealing a preemption notice failed", "lease", r.id, "err", err)
			continue
		}
		n.spawn(func() { n.sendPreemption(r, env) })
		n.spawn(func() {
			if ex != nil {
				ex.Stop(notice) // SIGTERM now, SIGKILL at the notice's end
			}
			r.poke()
		})

	}
}

// sendPreemption tells the buyer, retrying until the notice runs out.
func (n *Node) sendPreemption(r *leaseRun, env []byte) {
	r.mu.Lock()
	until := r.rec.PreemptAt
	r.mu.Unlock()
	for backoff := 250 * time.Millisecond; n.now().Before(until); backoff = min(2*backoff, 5*time.Second) {
		ctx, cancel := context.WithTimeout(n.ctx, p2p.ReceiptTimeout)
		kind, body, err := p2p.SendReceiptMessage(ctx, n.host, r.peer, p2p.FramePreempt, env)
		cancel()
		if err == nil && kind == p2p.FrameOK {
			return
		}
		n.log.Debug("preemption notice not taken", "lease", r.id, "err", err, "answer", string(body))
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(backoff):
		}
	}
}

// takePreemption is the buyer's side of a notice: checked against the
// lease's terms, recorded, the bid re-queued when it asked to be.
func (n *Node) takePreemption(from peer.ID, env []byte) error {
	p, signer, err := p2p.Open[*proto.Preemption](env, proto.MaxReceiptSize)
	if err != nil {
		return err
	}
	r, err := n.leaseRun(p.LeaseId)
	if err != nil || r.rec.Role != market.RoleBuyer || r.peer != from {
		return fmt.Errorf("%w: no lease %q of this buyer with this provider", market.ErrPreemption, p.LeaseId)
	}
	if err := market.CheckPreemption(r.terms, p, []byte(signer), n.now()); err != nil {
		n.metrics.rejects.WithLabelValues("preemption", "bad-notice").Inc()
		return err
	}
	r.mu.Lock()
	if r.ml.State != market.LeaseRunning || !r.rec.PreemptAt.IsZero() {
		r.mu.Unlock()
		return nil // already known, or over
	}
	r.rec.PreemptAt = time.UnixMilli(p.EndsUnixMs)
	r.rec.Note = "preempted by the provider: " + truncate(p.Reason, 256)
	n.putRecordLocked(r)
	bidID, ends := r.rec.BidID, market.LeaseEnd(r.terms)
	r.mu.Unlock()
	n.log.Info("lease preemption notice", "lease", r.id, "ends", r.rec.PreemptAt.Format(time.RFC3339Nano))
	r.poke()
	n.requeue(bidID, ends.Sub(time.UnixMilli(p.EndsUnixMs)))
	return nil
}

// requeue puts a preempted spot bid that asked for it back on the book
// for what was left of its lease.
func (n *Node) requeue(bidID string, left time.Duration) {
	n.ownMu.Lock()
	oo := n.own[bidID]
	var req api.OrderRequest
	ok := oo != nil && oo.requeue
	if ok {
		req = oo.req
	}
	n.ownMu.Unlock()
	left = left.Truncate(time.Second)
	if !ok || left < time.Second {
		return
	}
	req.Duration, req.ClientKey, req.IOC = left.String(), "", false
	n.spawn(func() {
		ctx, cancel := context.WithTimeout(n.ctx, time.Minute)
		defer cancel()
		o, err := n.PlaceOrder(ctx, req)
		if err != nil && !errors.Is(err, context.Canceled) {
			n.log.Warn("re-queueing a preempted bid failed", "bid", bidID, "err", err)
			return
		}
		n.log.Info("preempted bid re-queued", "bid", bidID, "new", o.ID, "duration", req.Duration)
	})
}

// unreserve undoes a trade's GPU reservation after it failed: its GPUs
// go back to the victims it would have preempted, or come free.
func (n *Node) unreserve(gpus []string, lease string, victims []market.Preemptible) {
	if err := n.store.ReleaseGPUs(gpus, lease); err != nil {
		n.storeFailed(&storeError{what: "GPU release", err: err}, lease) // the hold lapses by itself
	}
	for _, v := range victims {
		if r, err := n.leaseRun(v.ID); err == nil {
			end := market.LeaseEnd(r.terms).Add(time.Minute)
			if err := n.store.ReserveGPUs(v.GPUs, v.ID, end); err != nil {
				n.storeFailed(&storeError{what: "GPU hold", err: err}, v.ID)
			}
		}
	}
}
