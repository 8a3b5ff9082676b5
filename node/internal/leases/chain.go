package leases

import (
	"bytes"
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

// DecodeReceipt opens a sealed receipt without checking who signed it.
func DecodeReceipt(env []byte) (*proto.Receipt, error) {
	rc, _, err := p2p.Open[*proto.Receipt](env, proto.MaxReceiptSize)
	return rc, err
}

// DecodeCountersign opens a sealed countersignature without checking who
// signed it.
func DecodeCountersign(env []byte) (*proto.Countersign, error) {
	cs, _, err := p2p.Open[*proto.Countersign](env, proto.MaxReceiptSize)
	return cs, err
}

// ReceiptViews shows a lease's chain receipt by receipt, each signature
// checked against the terms: the provider's on the receipt, the buyer's
// on its countersignature ("valid", "invalid" or "missing").
func ReceiptViews(terms *proto.Lease, chain []*proto.SignedReceipt) []api.ReceiptView {
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
	return out
}

// Export is a lease's signed terms (the fill's sealed Accept, from the
// proto.Fill kept in its record) and chain, as a proto.ReceiptChain that
// VerifyExport checks without a node.
func Export(fill []byte, chain []*proto.SignedReceipt) ([]byte, error) {
	var f proto.Fill
	if err := gproto.Unmarshal(fill, &f); err != nil || len(f.Accept) == 0 {
		return nil, errors.New("leases: no stored signed terms")
	}
	return gproto.MarshalOptions{Deterministic: true}.Marshal(&proto.ReceiptChain{Lease: f.Accept, Receipts: chain})
}

// VerifyExport checks an exported chain offline: the terms signed by one
// of the parties, every receipt signed by the provider, every
// countersignature by the buyer, and every link and amount.
func VerifyExport(b []byte) (api.ChainReport, error) {
	var rc proto.ReceiptChain
	if err := gproto.Unmarshal(b, &rc); err != nil {
		return api.ChainReport{}, fmt.Errorf("leases: not a receipt chain: %w", err)
	}
	acc, signer, err := p2p.Open[*proto.Accept](rc.Lease, proto.MaxBookMessageSize)
	if err != nil {
		return api.ChainReport{}, fmt.Errorf("leases: lease terms: %w", err)
	}
	terms := acc.GetLease()
	if terms == nil || !bytes.Equal(acc.Maker, []byte(signer)) ||
		(!bytes.Equal(terms.Provider, []byte(signer)) && !bytes.Equal(terms.Buyer, []byte(signer))) {
		return api.ChainReport{}, errors.New("leases: lease terms not signed by a party to the lease")
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
