package trade

import (
	"context"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// Spot preemption: a provider whose GPUs are all leased takes an
// on-demand or reserved trade (or a spot one paying the margin more) by
// interrupting the spot leases that lose it the least revenue
// (market.ChoosePreempted; market.PreemptibleGPUs counts its candidates). Each victim's buyer gets a
// signed notice; its workload gets SIGTERM at once and the notice period
// as grace; at the notice's end both sides close it as preempted, billed
// to that moment, and the new lease starts then on its GPUs.

// Preempted is a lease Node.MarkPreempted marked as preempted.
type Preempted struct {
	Peer  peer.ID // the counterparty
	BidID string  // the buyer's bid the lease was bought by, on the buyer's side
	// Stop stops the lease's workload within grace, on the provider's
	// side; nil when there is none.
	Stop func(grace time.Duration)
	// Poke wakes the lease's loop to see the preemption.
	Poke func()
}

// preemptionEnd is when the last victim's notice runs out, from now.
func (t *Trader) preemptionEnd(victims []market.Preemptible, now time.Time) time.Time {
	end := now
	for _, v := range victims {
		if _, _, terms, ok := t.Node.LeaseOf(v.ID); ok {
			if e := now.Add(market.LeaseNotice(terms)); e.After(end) {
				end = e
			}
		}
	}
	return end
}

// preempt interrupts the victims for lease forLease: notice recorded and
// sent, workloads told to stop within it.
func (t *Trader) preempt(victims []market.Preemptible, forLease string, now time.Time) {
	for _, v := range victims {
		_, _, terms, ok := t.Node.LeaseOf(v.ID)
		if !ok {
			continue
		}
		notice := market.LeaseNotice(terms)
		at := time.UnixMilli(now.Add(notice).UnixMilli()) // as the notice carries it
		l, ok := t.Node.MarkPreempted(v.ID, at, "preempted for lease "+forLease)
		if !ok {
			continue // no longer running, or preempted already
		}
		t.Log.Info("lease preempted", "lease", v.ID, "for", forLease, "ends", at.Format(time.RFC3339Nano))
		p := &proto.Preemption{LeaseId: v.ID, Provider: []byte(t.Host.ID()), CreatedUnixMs: now.UnixMilli(),
			EndsUnixMs: at.UnixMilli(), Reason: "a higher-priority trade"}
		env, err := p2p.Seal(t.Key, p, proto.MaxReceiptSize)
		if err != nil {
			t.Log.Error("sealing a preemption notice failed", "lease", v.ID, "err", err)
			continue
		}
		t.Node.Spawn(func() { t.sendPreemption(v.ID, l.Peer, env, at) })
		t.Node.Spawn(func() {
			if l.Stop != nil {
				l.Stop(notice) // SIGTERM now, SIGKILL at the notice's end
			}
			l.Poke()
		})
	}
}

// sendPreemption tells the buyer, retrying until the notice runs out.
func (t *Trader) sendPreemption(lease string, buyer peer.ID, env []byte, until time.Time) {
	ctx := t.Node.Context()
	for backoff := 250 * time.Millisecond; t.Now().Before(until); backoff = min(2*backoff, 5*time.Second) {
		sctx, cancel := context.WithTimeout(ctx, p2p.ReceiptTimeout)
		kind, body, err := p2p.SendReceiptMessage(sctx, t.Host, buyer, p2p.FramePreempt, env)
		cancel()
		if err == nil && kind == p2p.FrameOK {
			return
		}
		t.Log.Debug("preemption notice not taken", "lease", lease, "err", err, "answer", string(body))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
	}
}

// TakePreemption is the buyer's side of a notice: checked against the
// lease's terms, recorded, the bid re-queued when it asked to be.
func (t *Trader) TakePreemption(from peer.ID, env []byte) error {
	p, signer, err := p2p.Open[*proto.Preemption](env, proto.MaxReceiptSize)
	if err != nil {
		return err
	}
	role, counterparty, terms, ok := t.Node.LeaseOf(p.LeaseId)
	if !ok || role != market.RoleBuyer || counterparty != from {
		return fmt.Errorf("%w: no lease %q of this buyer with this provider", market.ErrPreemption, p.LeaseId)
	}
	if err := market.CheckPreemption(terms, p, []byte(signer), t.Now()); err != nil {
		t.reject("preemption", "bad-notice")
		return err
	}
	at := time.UnixMilli(p.EndsUnixMs)
	reason := p.Reason
	if len(reason) > 256 {
		reason = reason[:256]
	}
	l, ok := t.Node.MarkPreempted(p.LeaseId, at, "preempted by the provider: "+reason)
	if !ok {
		return nil // already known, or over
	}
	t.Log.Info("lease preemption notice", "lease", p.LeaseId, "ends", at.Format(time.RFC3339Nano))
	l.Poke()
	t.Node.Requeue(l.BidID, len(terms.Gpus), market.LeaseEnd(terms).Sub(at))
	return nil
}
