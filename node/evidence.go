package node

import (
	"context"

	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/internal/leases"
)

// Kinds of evidence (see leases.Evidence).
const (
	EvidenceEquivocation = leases.EvidenceEquivocation // a provider signed two different receipts with one seq
	EvidenceRefusedFill  = leases.EvidenceRefusedFill  // a fill both parties signed that contradicts the book (overfill, bad price)
)

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
