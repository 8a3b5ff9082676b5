package lease

import (
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/internal/leases"
	"github.com/suanli/suanli/proto"
)

// What the node's other parts ask of the leases: spot preemption
// (node/internal/trade), the credit policy's scan of a buyer's leases
// (node/internal/credit), the resale of reserved time
// (node/internal/resale), and the API's reads of stored chains. Each takes the manager's lock, then a run's,
// never the other way (see Locks in the package doc).

// preemptibleLocked is whether r may still be preempted: it runs and was
// not preempted before. The one statement of it, for both sides. Holds
// r.mu.
func (r *Run) preemptibleLocked() bool {
	return r.ml.State == market.LeaseRunning && r.rec.PreemptAt.IsZero()
}

// Preemptible lists the running spot leases this node provides in mkt
// and has not preempted yet.
func (m *Manager) Preemptible(mkt string) []market.Preemptible {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []market.Preemptible
	for _, r := range m.runs {
		r.mu.Lock()
		if r.rec.Role == market.RoleProvider && r.terms.Market == mkt && r.preemptibleLocked() {
			out = append(out, market.Preemptible{ID: r.id, GPUs: r.terms.Gpus, Price: r.terms.PriceMicros,
				Type: market.LeaseType(r.terms.LeaseType), Since: r.ml.StartedAt})
		}
		r.mu.Unlock()
	}
	return out
}

// Preempted is a lease MarkPreempted marked.
type Preempted struct {
	Peer  peer.ID // the counterparty
	BidID string  // the buyer's bid the lease was bought by, on the buyer's side
	// Stop stops the lease's workload within grace, on the provider's
	// side; nil on the buyer's.
	Stop func(grace time.Duration)
	// Poke wakes the lease's loop to see the preemption.
	Poke func()
}

// MarkPreempted records that lease id is preempted at at, with note, if
// it may still be (ok false: unknown, not running, or preempted before).
func (m *Manager) MarkPreempted(id string, at time.Time, note string) (Preempted, bool) {
	r, err := m.Lookup(id)
	if err != nil {
		return Preempted{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.preemptibleLocked() {
		return Preempted{}, false
	}
	r.rec.PreemptAt, r.rec.Note = at, note
	m.PutRecordLocked(r)
	p := Preempted{Peer: r.peer, BidID: r.rec.BidID, Poke: r.Poke}
	if r.rec.Role == market.RoleProvider {
		p.Stop = func(grace time.Duration) {
			r.mu.Lock()
			ex := r.exec
			r.mu.Unlock()
			if ex != nil {
				ex.Stop(grace)
			}
		}
	}
	return p, true
}

// Party is this node's role in lease id, its counterparty and its terms
// (ok false: no such lease).
func (m *Manager) Party(id string) (_ market.Role, _ peer.ID, _ *proto.Lease, ok bool) {
	r, err := m.Lookup(id)
	if err != nil {
		return 0, "", nil, false
	}
	return r.rec.Role, r.peer, r.terms, true
}

// EachProvided calls add with each lease this node provides to buyer in
// currency, but except, each under its own lock, with the manager's not
// held; it stops at add's first error.
func (m *Manager) EachProvided(buyer peer.ID, currency, except string, add func(*market.Lease) error) error {
	m.mu.Lock()
	runs := make([]*Run, 0, len(m.runs))
	for _, r := range m.runs {
		if r.id != except && r.rec.Role == market.RoleProvider && r.peer == buyer && r.terms.Currency == currency {
			runs = append(runs, r)
		}
	}
	m.mu.Unlock()
	for _, r := range runs {
		r.mu.Lock()
		err := add(r.ml)
		r.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// TermsFailed ends lease id as failed after its terms failed to be
// stored (FailStoreLocked); for a lease not running here it only logs
// and counts it.
func (m *Manager) TermsFailed(id string, err error) {
	r, lerr := m.Lookup(id)
	if lerr != nil {
		m.StoreFailed(&StoreError{What: "lease terms", Err: err}, id)
		return
	}
	r.mu.Lock()
	m.FailStoreLocked(r, "lease terms", err)
	r.mu.Unlock()
}

// Snapshot is what resale reads of a lease, at one moment.
type Snapshot struct {
	ID    string
	Peer  peer.ID
	Role  market.Role
	Terms *proto.Lease
	State market.LeaseState
	Fill  []byte // the signed terms as stored (a marshalled proto.Fill)
}

// Snapshot is lease id as it is now.
func (m *Manager) Snapshot(id string) (Snapshot, error) {
	r, err := m.Lookup(id)
	if err != nil {
		return Snapshot{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return Snapshot{ID: r.id, Peer: r.peer, Role: r.rec.Role, Terms: r.terms, State: r.ml.State, Fill: r.rec.Fill}, nil
}

// EndResold ends lease id, if it runs, as resold at at, and runs its
// loop to settle it.
func (m *Manager) EndResold(id string, at time.Time, note string) {
	r, err := m.Lookup(id)
	if err != nil {
		return
	}
	r.mu.Lock()
	if r.ml.State == market.LeaseRunning {
		m.EndLocked(r, market.CloseResold, at, note)
	}
	r.mu.Unlock()
	r.Poke()
	m.RunLoop(r)
}

// HandOver ends running lease id as resold, under its lock, at the time
// and with the note fn gives from where its receipts end; it returns
// when the lease closed. A lease not running is refused with a
// market.ResaleError, and fn's error ends nothing.
func (m *Manager) HandOver(id string, fn func(billedTo time.Time) (time.Time, string, error)) (time.Time, error) {
	r, err := m.Lookup(id)
	if err != nil {
		return time.Time{}, &market.ResaleError{Label: "unknown-lease", Reason: err.Error()}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ml.State != market.LeaseRunning {
		return time.Time{}, &market.ResaleError{Label: "ended", Reason: fmt.Sprintf("lease %s is %s", r.id, r.ml.State)}
	}
	at, note, err := fn(time.UnixMilli(max(r.ml.Chain.WindowEndUnixMs, r.ml.StartedAt.UnixMilli())))
	if err != nil {
		return time.Time{}, err
	}
	m.EndLocked(r, market.CloseResold, at, note)
	return r.ml.ClosedAt, nil
}

// ResoldClosed settles lease id, ended as resold at at, and sends its
// close notice.
func (m *Manager) ResoldClosed(id string, at time.Time) {
	r, err := m.Lookup(id)
	if err != nil {
		return
	}
	r.Poke()
	m.RunLoop(r)
	m.SendClose(r, market.CloseResold, at)
}

// Adopt puts r, made by NewRun, in the table without running it: for the
// node's benchmarks of what reads the leases.
func (m *Manager) Adopt(r *Run) {
	m.mu.Lock()
	m.runs[r.id] = r
	m.mu.Unlock()
	m.wakeRedial()
}

// Receipts is lease id's stored chain, each signature checked.
func (m *Manager) Receipts(id string) ([]api.ReceiptView, error) {
	terms, err := m.store.GetLease(id)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", api.ErrUnknownLease, id)
	}
	chain, err := m.store.Receipts(id)
	if err != nil {
		return nil, err
	}
	return leases.ReceiptViews(terms, chain), nil
}

// VerifyReceipts checks every signature and link of lease id's stored
// chain again.
func (m *Manager) VerifyReceipts(id string) (api.ChainReport, error) {
	terms, err := m.store.GetLease(id)
	if err != nil {
		return api.ChainReport{}, fmt.Errorf("%w: %s", api.ErrUnknownLease, id)
	}
	chain, err := m.store.Receipts(id)
	if err != nil {
		return api.ChainReport{}, err
	}
	return leases.VerifyChain(terms, chain), nil
}

// Export is lease id's signed terms (the fill's sealed Accept) and
// chain, as a proto.ReceiptChain that leases.VerifyExport checks without
// a node.
func (m *Manager) Export(id string) ([]byte, error) {
	r, err := m.Lookup(id)
	if err != nil {
		return nil, err
	}
	chain, err := m.store.Receipts(id)
	if err != nil {
		return nil, err
	}
	b, err := leases.Export(r.Fill(), chain)
	if err != nil {
		return nil, fmt.Errorf("node: lease %s: %w", id, err)
	}
	return b, nil
}
