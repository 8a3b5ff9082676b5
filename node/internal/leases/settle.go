package leases

import (
	"bytes"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/internal/store"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// Ledger builds the settlement ledger of the node self from its store:
// every countersigned receipt of every lease it keeps a record of, and
// every payment acknowledgement. A receipt or payment that does not add
// up is an error naming it: the store holds only what was checked when
// it was signed or received.
func Ledger(self peer.ID, st *store.Store) (*market.Ledger, error) {
	l := market.NewLedger([]byte(self))
	recs, err := st.LeaseRecords()
	if err != nil {
		return nil, err
	}
	for id := range recs {
		terms, err := st.GetLease(id)
		if err != nil {
			continue
		}
		chain, err := st.Receipts(id)
		if err != nil {
			return nil, err
		}
		for _, sr := range chain {
			if len(sr.Countersign) == 0 {
				continue
			}
			rc, err := DecodeReceipt(sr.Receipt)
			if err != nil {
				return nil, err
			}
			cs, err := DecodeCountersign(sr.Countersign)
			if err != nil {
				return nil, err
			}
			if _, err := l.AddReceipt(terms, rc, proto.ReceiptHash(sr.Receipt), cs); err != nil {
				return nil, fmt.Errorf("lease %s seq %d: %w", id, rc.Seq, err)
			}
		}
	}
	// Resale premiums the new buyer countersigned: holder and buyer
	// settle them as they do leases.
	if err := st.SignedPremiums(func(sp *proto.SignedPremium) error {
		if len(sp.Countersign) == 0 {
			return nil
		}
		p, signer, err := p2p.Open[*proto.Premium](sp.Premium, proto.MaxReceiptSize)
		if err != nil || !bytes.Equal([]byte(signer), p.Holder) {
			return nil // not one this node could have stored: not counted
		}
		cs, csSigner, err := p2p.Open[*proto.PremiumCountersign](sp.Countersign, proto.MaxReceiptSize)
		if err != nil || !bytes.Equal([]byte(csSigner), p.Buyer) {
			return nil
		}
		_, err = l.AddPremium(p, proto.ReceiptHash(sp.Premium), cs)
		return err
	}); err != nil {
		return nil, err
	}
	err = st.Payments(func(v []byte) error {
		ack, _, err := p2p.Open[*proto.PaymentAck](v, proto.MaxReceiptSize)
		if err != nil {
			return err
		}
		_, err = l.AddPayment(ack)
		return err
	})
	return l, err
}

// NewPayment is the next payment acknowledgement from provider to buyer,
// for m, unsigned and unchecked (market.Ledger.AddPayment checks it): its
// seq follows the last one stored between them.
func NewPayment(st *store.Store, provider, buyer peer.ID, m market.Money, reference string, now time.Time) (*proto.PaymentAck, error) {
	var seq uint64
	if err := st.PaymentsBetween(provider, buyer, func(s uint64, _ []byte) error { seq = s; return nil }); err != nil {
		return nil, err
	}
	ack := &proto.PaymentAck{Provider: []byte(provider), Buyer: []byte(buyer), AmountMicros: m.Micros, Currency: m.Currency,
		Seq: seq + 1, CreatedUnixMs: now.UnixMilli(), Reference: reference}
	return ack, nil
}

// TakePayment checks a sealed payment acknowledgement that from sent to
// self (signed by its provider, from, to this buyer, and well formed) and
// stores it, synced.
func TakePayment(st *store.Store, self, from peer.ID, env []byte) error {
	ack, signer, err := p2p.Open[*proto.PaymentAck](env, proto.MaxReceiptSize)
	if err != nil {
		return err
	}
	if signer != from || string(ack.Provider) != string(signer) || string(ack.Buyer) != string(self) {
		return fmt.Errorf("%w: not from its provider to this node", market.ErrPayment)
	}
	if _, err := market.NewLedger(ack.Buyer).AddPayment(ack); err != nil {
		return err
	}
	return PutPayment(st, ack, env)
}

// PutPayment stores a sealed payment acknowledgement, synced.
func PutPayment(st *store.Store, ack *proto.PaymentAck, env []byte) error {
	return st.PutPayment(peer.ID(ack.Provider), peer.ID(ack.Buyer), ack.Seq, env)
}
