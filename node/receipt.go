package node

import (
	"context"
	"fmt"

	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/internal/leases"
	"github.com/suanli/suanli/proto"
)

// Receipts implements API: a lease's stored chain, each signature checked.
func (n *Node) Receipts(_ context.Context, id string) ([]api.ReceiptView, error) {
	terms, err := n.store.GetLease(id)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", api.ErrUnknownLease, id)
	}
	chain, err := n.store.Receipts(id)
	if err != nil {
		return nil, err
	}
	return leases.ReceiptViews(terms, chain), nil
}

// VerifyReceipts implements API: every signature and link of a lease's
// stored chain, checked again.
func (n *Node) VerifyReceipts(_ context.Context, id string) (api.ChainReport, error) {
	terms, err := n.store.GetLease(id)
	if err != nil {
		return api.ChainReport{}, fmt.Errorf("%w: %s", api.ErrUnknownLease, id)
	}
	chain, err := n.store.Receipts(id)
	if err != nil {
		return api.ChainReport{}, err
	}
	return VerifyChain(terms, chain), nil
}

// ExportReceipts implements API: a lease's signed terms (the fill's sealed
// Accept) and chain, as a proto.ReceiptChain that VerifyExport checks
// without a node.
func (n *Node) ExportReceipts(_ context.Context, id string) (_ []byte, err error) {
	defer classified(&err)
	r, err := n.leaseRun(id)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	fill := r.rec.Fill
	r.mu.Unlock()
	chain, err := n.store.Receipts(id)
	if err != nil {
		return nil, err
	}
	b, err := leases.Export(fill, chain)
	if err != nil {
		return nil, fmt.Errorf("node: lease %s: %w", id, err)
	}
	return b, nil
}

// VerifyExport checks an exported chain (ExportReceipts) offline: the
// terms signed by one of the parties, every receipt signed by the
// provider, every countersignature by the buyer, and every link and
// amount.
func VerifyExport(b []byte) (api.ChainReport, error) { return leases.VerifyExport(b) }

// VerifyChain checks a chain's signatures against terms, then its links and
// amounts (market.VerifyChain).
func VerifyChain(terms *proto.Lease, chain []*proto.SignedReceipt) api.ChainReport {
	return leases.VerifyChain(terms, chain)
}
