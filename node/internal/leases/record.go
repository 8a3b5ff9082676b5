package leases

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/executor"
	"github.com/suanli/suanli/node/internal/store"
)

// Record is a lease's own state, beside its terms (store.PutLease): it is
// stored as JSON under lease/<id> (store.PutLeaseRecord), synced, at each
// change of state.
type Record struct {
	Role      market.Role        `json:"-"`
	RoleName  string             `json:"role"` // Role, as stored
	State     market.LeaseState  `json:"state"`
	Reason    market.CloseReason `json:"reason"`
	StartedAt time.Time          `json:"started_at"`
	EndingAt  time.Time          `json:"ending_at"`
	ClosedAt  time.Time          `json:"closed_at"`
	Executor  string             `json:"executor,omitempty"`
	Exec      []string           `json:"exec,omitempty"` // the command the buyer's order asked for
	// Workload is what the buyer's order asked to run (buyer), or what the
	// provider was asked and runs (provider).
	Workload *executor.Spec `json:"workload,omitempty"`
	// Info is what runs: executor, image digest, endpoints, state.
	Info *executor.Info `json:"info,omitempty"`
	// Handle names the running workload outside the daemon (a process
	// group, a container), to adopt or remove it after a restart.
	Handle    string               `json:"handle,omitempty"`
	Exit      *executor.ExitResult `json:"exit,omitempty"`
	Pgid      int                  `json:"pgid,omitempty"` // records before Handle: the process group
	HeldSince int64                `json:"held_since_ms,omitempty"`
	Fill      []byte               `json:"fill,omitempty"` // proto.Fill: the signed take and accept
	Note      string               `json:"note,omitempty"`
	// PeerAddrs are the counterparty's addresses when the lease began,
	// to redial it after a restart or a disconnect.
	PeerAddrs []string `json:"peer_addrs,omitempty"`
	// PreemptAt is when a preempted spot lease ends.
	PreemptAt time.Time `json:"preempt_at,omitzero"`
	// BidID is the buyer's bid the lease came from (buyer).
	BidID string `json:"bid_id,omitempty"`
	// CloseOwed is the close notice this node still owes its counterparty:
	// re-sent, across restarts, until the counterparty acknowledges it.
	CloseOwed *CloseNotice `json:"close_owed,omitempty"`
	// CloseRefused: the counterparty refused this node's close notice, so
	// the counterparty's own close is the one both keep.
	CloseRefused bool `json:"close_refused,omitempty"`
}

// CloseNotice is the body of a close message (p2p.FrameClose): which
// lease, why and when its sender ended it.
type CloseNotice struct {
	Lease  string             `json:"lease"`
	Reason market.CloseReason `json:"reason"`
	AtMs   int64              `json:"at_ms"`
	Note   string             `json:"note,omitempty"` // why, in words (a workload's exit, say)
}

// PutRecord stores a lease's record, synced.
func PutRecord(st *store.Store, id string, rec *Record) error {
	rec.RoleName = rec.Role.String()
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return st.PutLeaseRecord(id, b)
}

// Records reads every stored lease record, by lease ID.
func Records(st *store.Store) (map[string]Record, error) {
	raw, err := st.LeaseRecords()
	if err != nil {
		return nil, err
	}
	out := make(map[string]Record, len(raw))
	for id, v := range raw {
		rec, err := decodeRecord(v)
		if err != nil {
			return nil, fmt.Errorf("leases: lease record %s: %w", id, err)
		}
		out[id] = rec
	}
	return out, nil
}

func decodeRecord(v []byte) (Record, error) {
	var rec Record
	if err := json.Unmarshal(v, &rec); err != nil {
		return rec, err
	}
	rec.Role = market.RoleBuyer
	if rec.RoleName == market.RoleProvider.String() {
		rec.Role = market.RoleProvider
	}
	return rec, nil
}
