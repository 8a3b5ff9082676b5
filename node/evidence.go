package node

import (
	"context"
	"time"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/internal/leases"
	"github.com/suanli/suanli/proto"
)

// Kinds of evidence (see leases.Evidence).
const (
	EvidenceEquivocation = leases.EvidenceEquivocation // a provider signed two different receipts with one seq
	EvidenceRefusedFill  = leases.EvidenceRefusedFill  // a fill both parties signed that contradicts the book (overfill, bad price)
)

// putFillEvidence keeps a doubly-signed fill the book refused.
func (n *Node) putFillEvidence(f market.Fill, raw *proto.Fill, err error, at time.Time) error {
	return leases.PutFillEvidence(n.store, f, raw, err, at)
}

// isFillEvidence reports whether a refusal of a fill shows its signers
// misbehaving (leases.IsFillEvidence).
func isFillEvidence(err error) bool { return leases.IsFillEvidence(err) }

// Evidence implements LeaseAPI: the evidence this node keeps of other
// peers' signed misbehaviour, newest first, only that signed by peer when
// peer is not "".
func (n *Node) Evidence(_ context.Context, who string) (_ []api.EvidenceView, err error) {
	defer classified(&err)
	return leases.Evidence(n.store, who)
}

// ExportEvidence implements LeaseAPI: one piece of evidence as a file a
// third party checks with VerifyEvidence (suanli evidence verify --file).
func (n *Node) ExportEvidence(_ context.Context, id string) (_ []byte, err error) {
	defer classified(&err)
	return leases.ExportEvidence(n.store, id)
}

// VerifyEvidence checks an exported piece of evidence offline: every
// signature, and that it shows what its kind says.
func VerifyEvidence(b []byte) (api.EvidenceReport, error) { return leases.VerifyEvidence(b) }
