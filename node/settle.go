package node

import (
	"cmp"
	"context"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/internal/leases"
	"github.com/suanli/suanli/node/internal/view"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// ledger builds the node's ledger from storage.
func (n *Node) ledger() (*market.Ledger, error) { return leases.Ledger(n.host.ID(), n.store) }

// Settle implements API: the settlement with peer, or with every peer when
// peer is empty.
func (n *Node) Settle(_ context.Context, peerID string) (_ []api.SettlementView, err error) {
	defer classified(&err)
	l, err := n.ledger()
	if err != nil {
		return nil, err
	}
	peers := l.Peers()
	if peerID != "" {
		p, err := peer.Decode(peerID)
		if err != nil {
			return nil, api.BadRequest("peer: %v", err)
		}
		peers = []string{string(p)}
	}
	out := []api.SettlementView{}
	for _, p := range peers {
		v, bought := view.Settlement(l.Statement(p))
		if len(bought) > 0 {
			v.Credit = n.creditViews(peer.ID(p), bought)
		}
		out = append(out, v)
	}
	return out, nil
}

// AckPayment implements API: the provider signs a PaymentAck, stores it and
// sends it to the buyer, whose ledger applies it too.
func (n *Node) AckPayment(ctx context.Context, req api.PaymentRequest) (_ api.PaymentView, err error) {
	defer classified(&err)
	buyer, err := peer.Decode(req.Peer)
	if err != nil {
		return api.PaymentView{}, api.BadRequest("peer: %v", err)
	}
	m, err := market.ParseAmount(req.Amount, cmp.Or(req.Currency, "USD"))
	if err != nil {
		return api.PaymentView{}, api.BadRequest("amount: %v", err)
	}
	ack, err := leases.NewPayment(n.store, n.host.ID(), buyer, m, req.Reference, n.now())
	if err != nil {
		return api.PaymentView{}, err
	}
	if _, err := market.NewLedger(ack.Provider).AddPayment(ack); err != nil {
		return api.PaymentView{}, api.BadRequest("%v", err)
	}
	env, err := p2p.Seal(n.key, ack, proto.MaxReceiptSize)
	if err != nil {
		return api.PaymentView{}, err
	}
	if err := n.putPayment(ack, env); err != nil {
		return api.PaymentView{}, err
	}
	n.creditFreed(buyer) // wire_provider.go
	kind, body, err := p2p.SendReceiptMessage(ctx, n.host, buyer, p2p.FramePayment, env)
	delivered := err == nil && kind == p2p.FrameOK
	if !delivered {
		n.log.Warn("payment acknowledgement not delivered", "buyer", shortID(buyer), "err", err, "answer", string(body))
	}
	return api.PaymentView{Role: market.RoleProvider.String(), Seq: ack.Seq, Amount: market.FormatMicros(m.Micros, m.Currency),
		Currency: m.Currency, Created: time.UnixMilli(ack.CreatedUnixMs).UTC(), Reference: req.Reference, Delivered: &delivered}, nil
}

// takePayment is the buyer's side of a payment acknowledgement.
func (n *Node) takePayment(from peer.ID, env []byte) error {
	return leases.TakePayment(n.store, n.host.ID(), from, env)
}

// putPayment stores a sealed payment acknowledgement, synced.
func (n *Node) putPayment(ack *proto.PaymentAck, env []byte) error {
	return leases.PutPayment(n.store, ack, env)
}
