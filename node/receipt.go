package node

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// Logs implements API: the output of a lease's command after seq after.
func (n *Node) Logs(_ context.Context, id string, after uint64) (_ api.LogsView, err error) {
	defer classified(&err)
	r, err := n.leaseRun(id)
	if err != nil {
		return api.LogsView{}, err
	}
	v := api.LogsView{Lease: id, Chunks: []api.LogChunk{}, Next: after}
	err = n.store.Logs(id, after, func(seq uint64, val []byte) bool {
		if len(val) == 0 {
			return false
		}
		stream := "stdout"
		if val[0] == p2p.FrameStderr {
			stream = "stderr"
		}
		v.Chunks = append(v.Chunks, api.LogChunk{Seq: seq, Stream: stream, Data: string(val[1:])})
		v.Next = seq
		return true
	})
	r.mu.Lock()
	v.Exit = r.rec.Exit
	v.Done = r.rec.Exit != nil || (r.ml.State == market.LeaseClosed && n.now().After(r.ml.ClosedAt.Add(5*time.Second)))
	r.mu.Unlock()
	return v, err
}

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
	out := make([]api.ReceiptView, 0, len(chain))
	for _, sr := range chain {
		v := api.ReceiptView{ProviderSignature: "invalid", BuyerSignature: "missing", Hash: hex.EncodeToString(proto.ReceiptHash(sr.Receipt))}
		rc, signer, err := p2p.Open[*proto.Receipt](sr.Receipt, proto.MaxReceiptSize)
		if err == nil && string(signer) == string(terms.Provider) && bytes.Equal(rc.Provider, terms.Provider) {
			v.ProviderSignature = "valid"
		}
		if rc != nil {
			v.Seq, v.GPUMillis = rc.Seq, rc.GpuMs
			v.WindowStart, v.WindowEnd = time.UnixMilli(rc.WindowStartUnixMs).UTC(), time.UnixMilli(rc.WindowEndUnixMs).UTC()
			v.AmountMicros, v.CumulativeMicros = rc.AmountMicros, rc.CumulativeMicros
			v.Amount, v.Cumulative = market.FormatMicros(rc.AmountMicros, terms.Currency), market.FormatMicros(rc.CumulativeMicros, terms.Currency)
			for _, u := range rc.Usage {
				v.Utilization = append(v.Utilization, u.MeanUtilizationPermille)
			}
		}
		if len(sr.Countersign) > 0 {
			v.BuyerSignature = "invalid"
			cs, signer, err := p2p.Open[*proto.Countersign](sr.Countersign, proto.MaxReceiptSize)
			if err == nil && string(signer) == string(terms.Buyer) && rc != nil &&
				market.VerifyCountersign(terms, rc, proto.ReceiptHash(sr.Receipt), cs) == nil {
				v.BuyerSignature = "valid"
			}
		}
		out = append(out, v)
	}
	return out, nil
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
	fillB := r.rec.Fill
	r.mu.Unlock()
	var fill proto.Fill
	if err := gproto.Unmarshal(fillB, &fill); err != nil || len(fill.Accept) == 0 {
		return nil, fmt.Errorf("node: lease %s has no stored signed terms", id)
	}
	chain, err := n.store.Receipts(id)
	if err != nil {
		return nil, err
	}
	return gproto.MarshalOptions{Deterministic: true}.Marshal(&proto.ReceiptChain{Lease: fill.Accept, Receipts: chain})
}

// VerifyExport checks an exported chain offline: the terms signed by one
// of the parties, every receipt signed by the provider, every
// countersignature by the buyer, and every link and amount.
func VerifyExport(b []byte) (api.ChainReport, error) {
	var rc proto.ReceiptChain
	if err := gproto.Unmarshal(b, &rc); err != nil {
		return api.ChainReport{}, fmt.Errorf("node: not a receipt chain: %w", err)
	}
	acc, signer, err := p2p.Open[*proto.Accept](rc.Lease, proto.MaxBookMessageSize)
	if err != nil {
		return api.ChainReport{}, fmt.Errorf("node: lease terms: %w", err)
	}
	terms := acc.GetLease()
	if terms == nil || !bytes.Equal(acc.Maker, []byte(signer)) ||
		(!bytes.Equal(terms.Provider, []byte(signer)) && !bytes.Equal(terms.Buyer, []byte(signer))) {
		return api.ChainReport{}, errors.New("node: lease terms not signed by a party to the lease")
	}
	return VerifyChain(terms, rc.Receipts), nil
}

// VerifyChain checks a chain's signatures against terms, then its links and
// amounts (market.VerifyChain).
func VerifyChain(terms *proto.Lease, chain []*proto.SignedReceipt) api.ChainReport {
	rep := api.ChainReport{Lease: terms.Id, Provider: peer.ID(terms.Provider).String(), Buyer: peer.ID(terms.Buyer).String(), Currency: terms.Currency}
	fail := func(err error) api.ChainReport { rep.Error = err.Error(); return rep }
	dec := make([]market.SignedReceiptDecoded, 0, len(chain))
	for i, sr := range chain {
		rc, signer, err := p2p.Open[*proto.Receipt](sr.Receipt, proto.MaxReceiptSize)
		if err != nil {
			return fail(fmt.Errorf("receipt %d: %w", i+1, err))
		}
		if string(signer) != string(terms.Provider) {
			return fail(fmt.Errorf("receipt %d: signed by %s, not the provider", i+1, signer))
		}
		d := market.SignedReceiptDecoded{Receipt: rc, Hash: proto.ReceiptHash(sr.Receipt)}
		if len(sr.Countersign) > 0 {
			cs, signer, err := p2p.Open[*proto.Countersign](sr.Countersign, proto.MaxReceiptSize)
			if err != nil {
				return fail(fmt.Errorf("countersignature %d: %w", i+1, err))
			}
			if string(signer) != string(terms.Buyer) {
				return fail(fmt.Errorf("countersignature %d: signed by %s, not the buyer", i+1, signer))
			}
			d.Countersign = cs
		}
		dec = append(dec, d)
	}
	sum, err := market.VerifyChain(terms, dec)
	rep.Receipts, rep.Countersigned = sum.Last.Seq, sum.Countersigned.Seq
	rep.GPUMillis, rep.OwedMicros = sum.Countersigned.GPUMillis, sum.Countersigned.Cumulative
	rep.Owed = market.FormatMicros(rep.OwedMicros, terms.Currency)
	if err != nil {
		return fail(err)
	}
	rep.Valid = true
	return rep
}
