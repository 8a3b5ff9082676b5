package node

import (
	"context"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/internal/resale"
	"github.com/suanli/suanli/node/internal/trade"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// The take protocol lives in node/internal/trade; this file wires it to
// the rest of the node (tradeNode) and keeps the node's names for what
// the other files call.

// newTrader builds the node's side of the take protocol, once the host,
// store and books are up.
func (n *Node) newTrader() *trade.Trader {
	return trade.New(trade.Config{
		Host: n.host, Key: n.key, Store: n.store, Books: n.books, Inflight: &n.inflight, Now: n.now, Log: n.log,
		Rejects: n.metrics.Rejects, Verified: n.verified, Node: tradeNode{n},
		BillingInterval: n.billingInterval, PreemptNotice: n.preemptNotice, ChargeIncrement: n.chargeIncrement,
		Schedule: n.schedule, ScheduleOffset: n.scheduleOffset, PreemptMargin: n.preemptMargin,
	})
}

// tradeNode is the rest of the node as package trade sees it.
type tradeNode struct{ n *Node }

var _ trade.Node = tradeNode{}

func (w tradeNode) AskFacts(ctx context.Context, o *market.Order, seq uint64) error {
	return w.n.askFacts(ctx, o, seq)
}
func (w tradeNode) OfferOf(ctx context.Context, p peer.ID, minSeq uint64) (*proto.Offer, error) {
	return w.n.offerOf(ctx, p, minSeq)
}
func (w tradeNode) FreeGPUs(mkt string) ([]string, error) { return w.n.prov.FreeGPUs(mkt) }
func (w tradeNode) FreeGPUsFor(mkt string, start, end time.Time) ([]string, error) {
	return w.n.prov.FreeGPUsFor(mkt, start, end)
}
func (w tradeNode) LeaseStart(bid *market.Order, now time.Time) time.Time {
	return market.LeaseStartFor(bid, now)
}
func (w tradeNode) WantStart(o *market.Order, blockStart, now time.Time) time.Time {
	return market.WantStart(o, blockStart, now)
}
func (w tradeNode) CheckCredit(l *proto.Lease, now time.Time) error { return w.n.credit.Check(l, now) }
func (w tradeNode) CheckBidCredit(bidID, buyer string, count uint32, price int64, currency string, d time.Duration) error {
	interval := int64(w.n.billingInterval / time.Second) // as the provider's offer bills it
	if t := w.n.Published().GetTerms().GetBillingIncrementS(); t > 0 {
		interval = t
	}
	return w.n.credit.CheckBid(bidID, buyer, count, price, currency, d, interval, w.n.now())
}
func (w tradeNode) CapacityChanged()             { w.n.capacityChanged() }
func (w tradeNode) StartLease(ev *p2p.BookEvent) { w.n.leases.FromFill(ev) }
func (w tradeNode) PublishBook(ctx context.Context, mkt string, m *proto.BookMessage, ev *p2p.BookEvent) error {
	return w.n.publishBook(ctx, mkt, m, ev)
}
func (w tradeNode) Spawn(fn func()) bool     { return w.n.spawn(fn) }
func (w tradeNode) Context() context.Context { return w.n.ctx }
func (w tradeNode) StoreFailed(what string, err error, lease string) {
	w.n.storeFailed(what, err, lease)
}

func (w tradeNode) TermsFailed(lease string, err error) { w.n.leases.TermsFailed(lease, err) }
func (w tradeNode) OwnFilled(order string) uint32       { return w.n.orders.FilledQty(order) }
func (w tradeNode) OwnFailed(order string, err error)   { w.n.orders.Failed(order, err) }

func (w tradeNode) Preemptible(mkt string) []market.Preemptible { return w.n.leases.Preemptible(mkt) }
func (w tradeNode) LeaseOf(id string) (market.Role, peer.ID, *proto.Lease, bool) {
	return w.n.leases.Party(id)
}
func (w tradeNode) MarkPreempted(id string, at time.Time, note string) (trade.Preempted, bool) {
	p, ok := w.n.leases.MarkPreempted(id, at, note)
	return trade.Preempted(p), ok
}
func (w tradeNode) HoldBlock(ctx context.Context, lease string, gpus []string, start, end time.Time) error {
	return w.n.leases.HoldBlock(ctx, lease, gpus, start, end)
}
func (w tradeNode) ReleaseBlock(ctx context.Context, lease string) {
	w.n.leases.ReleaseBlock(ctx, lease)
}
func (w tradeNode) Requeue(bidID string, gpus int, left time.Duration) {
	w.n.orders.Requeue(bidID, gpus, left)
}

func (w tradeNode) ResaleTake(ctx context.Context, from peer.ID, take *proto.Take, takeEnv []byte, takeID string) (*proto.TradeReply, bool) {
	return w.n.resale.HandleTake(ctx, from, take, takeEnv, takeID)
}
func (w tradeNode) TakeResale(o *market.Order, m market.Match, takeEnv, askEnv []byte, rep *proto.ResaleReply) (uint32, error) {
	return w.n.resale.TakeResale(o, m, takeEnv, askEnv, rep)
}

// newResale builds the node's side of resales.
func (n *Node) newResale() *resale.Manager {
	return resale.New(resale.Config{
		Host: n.host, Key: n.key, Store: n.store, Books: n.books, Now: n.now, Log: n.log,
		Rejects: n.metrics.Rejects, Node: resaleNode{n},
	})
}

// Forwarders for the other files of node.

// resaleNode is the rest of the node as package resale sees it.
type resaleNode struct{ *Node }

var _ resale.Node = resaleNode{}

func (w resaleNode) Lease(id string) (resale.Lease, error) {
	l, err := w.leases.Snapshot(id)
	return resale.Lease(l), err
}
func (w resaleNode) EndResold(id string, at time.Time, note string) {
	w.leases.EndResold(id, at, note)
}
func (w resaleNode) HandOver(id string, fn func(billedTo time.Time) (time.Time, string, error)) (time.Time, error) {
	return w.leases.HandOver(id, fn)
}
func (w resaleNode) ResoldClosed(id string, at time.Time) { w.leases.ResoldClosed(id, at) }
func (w resaleNode) StartLease(ev *p2p.BookEvent)         { w.leases.FromFill(ev) }

func (w resaleNode) ResaleOf(order string) string { return w.orders.ResaleOf(order) }
func (w resaleNode) AddOwn(o *market.Order, env []byte, req api.OrderRequest) {
	w.orders.Add(o, env, req)
}
func (w resaleNode) OwnFilled(f market.Fill, l *proto.Lease) { w.orders.Filled(f, l) }
func (w resaleNode) PublishBook(ctx context.Context, mkt string, m *proto.BookMessage, ev *p2p.BookEvent) error {
	return w.publishBook(ctx, mkt, m, ev)
}
func (w resaleNode) AskFacts(ctx context.Context, o *market.Order, seq uint64) error {
	return w.askFacts(ctx, o, seq)
}
func (w resaleNode) OfferOf(ctx context.Context, p peer.ID, minSeq uint64) (*proto.Offer, error) {
	return w.offerOf(ctx, p, minSeq)
}
func (w resaleNode) AttestedLevel(ctx context.Context, p peer.ID, offer *proto.Offer) string {
	return w.attestedLevel(ctx, p, offer)
}
func (w resaleNode) Spawn(fn func()) bool     { return w.spawn(fn) }
func (w resaleNode) Context() context.Context { return w.ctx }
