package leases

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/internal/store"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// Evidence is what a node keeps of other peers' signed misbehaviour, for
// its operator and for a third party: two receipts a provider signed with
// one seq (store.PutEvidence), and a doubly-signed fill this node's book
// refused (fillEvidence, store.PutFillEvidence). Either exports as a file
// that VerifyEvidence checks without a node.

// Kinds of evidence.
const (
	EvidenceEquivocation = "equivocation" // a provider signed two different receipts with one seq
	EvidenceRefusedFill  = "refused-fill" // a fill both parties signed that contradicts the book (overfill, bad price)
)

// fillEvidence is a refused fill as stored.
type fillEvidence struct {
	Fill   []byte    `json:"fill"` // proto.Fill: the signed take and accept
	Reason string    `json:"reason"`
	Error  string    `json:"error"`
	At     time.Time `json:"at"`
	Buyer  string    `json:"buyer"`
	Seller string    `json:"provider"`
}

// evidenceExport is the file ExportEvidence writes and VerifyEvidence reads.
type evidenceExport struct {
	Kind     string   `json:"kind"`
	Receipts [][]byte `json:"receipts,omitempty"` // two sealed receipts (equivocation)
	Fill     []byte   `json:"fill,omitempty"`     // proto.Fill (refused fill)
	Reason   string   `json:"reason,omitempty"`   // what the exporting node's book said
}

// PutFillEvidence keeps a doubly-signed fill the book refused with err.
func PutFillEvidence(st *store.Store, f market.Fill, raw *proto.Fill, err error, at time.Time) error {
	b, merr := gproto.Marshal(raw)
	if merr != nil {
		return merr
	}
	v, merr := json.Marshal(fillEvidence{Fill: b, Reason: market.Reason(err), Error: err.Error(), At: at.UTC(), Buyer: f.Buyer, Seller: f.Provider})
	if merr != nil {
		return merr
	}
	return st.PutFillEvidence(f.ID, v)
}

// IsFillEvidence reports whether a refusal of a fill whose signatures
// checked out shows its signers misbehaving, rather than this replica
// lagging (an order it has not seen, a duplicate).
func IsFillEvidence(err error) bool {
	return errors.Is(err, market.ErrOverfill) || errors.Is(err, market.ErrBadFill)
}

// Evidence is the evidence kept in st, newest first, only that signed by
// the peer who when who is not "".
func Evidence(st *store.Store, who string) (_ []api.EvidenceView, err error) {
	if who != "" {
		if _, err := peer.Decode(who); err != nil {
			return nil, api.BadRequest("peer: %v", err)
		}
	}
	var out []api.EvidenceView
	err = st.Evidence(func(lease string, seq uint64, v []byte) error {
		ev := api.EvidenceView{ID: fmt.Sprintf("receipt/%s/%d", lease, seq), Kind: EvidenceEquivocation, Lease: lease, Seq: seq,
			Reason: "two different receipts signed with one seq"}
		var rc proto.ReceiptChain
		if gproto.Unmarshal(v, &rc) == nil && len(rc.Receipts) == 2 {
			if r, signer, err := p2p.Open[*proto.Receipt](rc.Receipts[1].Receipt, proto.MaxReceiptSize); err == nil {
				ev.Peers, ev.At = []string{signer.String()}, time.UnixMilli(r.CreatedUnixMs).UTC()
			}
		}
		out = append(out, ev)
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = st.FillEvidence(func(id string, v []byte) error {
		var fe fillEvidence
		if json.Unmarshal(v, &fe) != nil {
			return nil
		}
		out = append(out, api.EvidenceView{ID: "fill/" + id, Kind: EvidenceRefusedFill, Fill: id, Peers: []string{fe.Buyer, fe.Seller},
			Reason: fe.Reason + ": " + fe.Error, At: fe.At})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if who != "" {
		out = slices.DeleteFunc(out, func(e api.EvidenceView) bool { return !slices.Contains(e.Peers, who) })
	}
	slices.SortStableFunc(out, func(a, b api.EvidenceView) int { return b.At.Compare(a.At) })
	return out, nil
}

// ExportEvidence is one piece of the evidence kept in st, by its ID
// (receipt/<lease>/<seq> or fill/<id>), as a file a third party checks
// with VerifyEvidence.
func ExportEvidence(st *store.Store, id string) (_ []byte, err error) {
	var x evidenceExport
	switch kind, rest, _ := strings.Cut(id, "/"); kind {
	case "receipt":
		i := strings.LastIndexByte(rest, '/')
		if i < 0 {
			return nil, api.BadRequest("evidence id %q: want receipt/<lease>/<seq>", id)
		}
		var seq uint64
		if _, err := fmt.Sscan(rest[i+1:], &seq); err != nil {
			return nil, api.BadRequest("evidence id %q: seq: %v", id, err)
		}
		v, err := st.GetEvidence(rest[:i], seq)
		if err != nil {
			return nil, fmt.Errorf("%w: %s", api.ErrUnknownEvidence, id)
		}
		var rc proto.ReceiptChain
		if err := gproto.Unmarshal(v, &rc); err != nil || len(rc.Receipts) != 2 {
			return nil, fmt.Errorf("leases: stored evidence %s is damaged", id)
		}
		x = evidenceExport{Kind: EvidenceEquivocation, Receipts: [][]byte{rc.Receipts[0].Receipt, rc.Receipts[1].Receipt}}
	case "fill":
		v, err := st.GetFillEvidence(rest)
		var fe fillEvidence
		if err != nil || json.Unmarshal(v, &fe) != nil {
			return nil, fmt.Errorf("%w: %s", api.ErrUnknownEvidence, id)
		}
		x = evidenceExport{Kind: EvidenceRefusedFill, Fill: fe.Fill, Reason: fe.Reason + ": " + fe.Error}
	default:
		return nil, api.BadRequest("evidence id %q: want receipt/<lease>/<seq> or fill/<id>", id)
	}
	return json.Marshal(x)
}

// VerifyEvidence checks an exported piece of evidence offline: every
// signature, and that it shows what its kind says.
func VerifyEvidence(b []byte) (api.EvidenceReport, error) {
	var x evidenceExport
	if err := json.Unmarshal(b, &x); err != nil {
		return api.EvidenceReport{}, fmt.Errorf("leases: not an evidence file: %w", err)
	}
	switch x.Kind {
	case EvidenceEquivocation:
		if len(x.Receipts) != 2 {
			return api.EvidenceReport{}, errors.New("leases: equivocation evidence needs two receipts")
		}
		a, sa, err := p2p.Open[*proto.Receipt](x.Receipts[0], proto.MaxReceiptSize)
		if err != nil {
			return api.EvidenceReport{}, fmt.Errorf("leases: first receipt: %w", err)
		}
		c, sc, err := p2p.Open[*proto.Receipt](x.Receipts[1], proto.MaxReceiptSize)
		if err != nil {
			return api.EvidenceReport{}, fmt.Errorf("leases: second receipt: %w", err)
		}
		switch {
		case sa != sc || !bytes.Equal(a.Provider, []byte(sa)):
			return api.EvidenceReport{}, errors.New("leases: the receipts are not signed by one provider")
		case a.LeaseId != c.LeaseId || a.Seq != c.Seq:
			return api.EvidenceReport{}, errors.New("leases: the receipts are for different leases or seqs: no equivocation")
		case bytes.Equal(proto.ReceiptHash(x.Receipts[0]), proto.ReceiptHash(x.Receipts[1])):
			return api.EvidenceReport{}, errors.New("leases: the receipts are the same: no equivocation")
		}
		return api.EvidenceReport{Kind: x.Kind, Peers: []string{sa.String()},
			Proves: fmt.Sprintf("provider %s signed two different receipts #%d for lease %s", sa, a.Seq, a.LeaseId)}, nil
	case EvidenceRefusedFill:
		var f proto.Fill
		if err := gproto.Unmarshal(x.Fill, &f); err != nil {
			return api.EvidenceReport{}, fmt.Errorf("leases: fill: %w", err)
		}
		take, _, err := p2p.Open[*proto.Take](f.Take, proto.MaxBookMessageSize)
		if err != nil {
			return api.EvidenceReport{}, fmt.Errorf("leases: fill's take: %w", err)
		}
		ev, err := p2p.OpenFill(&f, time.UnixMilli(take.CreatedUnixMs))
		if err != nil {
			return api.EvidenceReport{}, fmt.Errorf("leases: fill signatures: %w", err)
		}
		return api.EvidenceReport{Kind: x.Kind, Peers: []string{ev.Fill.Buyer, ev.Fill.Provider},
			Proves: fmt.Sprintf("buyer %s and provider %s both signed fill %s of %d GPUs at %s (refused by the exporting node: %s)",
				ev.Fill.Buyer, ev.Fill.Provider, ev.Fill.ID, ev.Fill.Quantity, market.FormatMicros(ev.Fill.Price, ev.Fill.Currency), x.Reason)}, nil
	}
	return api.EvidenceReport{}, fmt.Errorf("leases: unknown evidence kind %q", x.Kind)
}
