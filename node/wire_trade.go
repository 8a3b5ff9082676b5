package node

import (
	"context"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/internal/trade"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// The take protocol lives in node/internal/trade; this file wires it to
// the rest of the node (tradeNode) and keeps the node's names for what
// the other files call.

// gate is trade.Gate: spawn's too.
type gate = trade.Gate

// newTrader builds the node's side of the take protocol, once the host,
// store and books are up.
func (n *Node) newTrader() *trade.Trader {
	return trade.New(trade.Config{
		Host: n.host, Key: n.key, Store: n.store, Books: n.books, Inflight: &n.inflight, Now: n.now, Log: n.log,
		Rejects: n.metrics.rejects, Node: tradeNode{n},
		BillingInterval: n.billingInterval, PreemptNotice: n.preemptNotice, ChargeIncrement: n.chargeIncrement,
		Schedule: n.schedule, ScheduleOffset: n.scheduleOffset, PreemptMargin: n.preemptMargin,
	})
}

// takeLoop takes what o crosses (trade.Trader.TakeLoop).
func (n *Node) takeLoop(ctx context.Context, o *market.Order, env []byte) {
	n.trade.TakeLoop(ctx, o, env)
}

// handleTake answers a take (trade.Trader.HandleTake).
func (n *Node) handleTake(ctx context.Context, from peer.ID, env []byte) *proto.TradeReply {
	return n.trade.HandleTake(ctx, from, env)
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
func (w tradeNode) FreeGPUs(mkt string) ([]string, error) { return w.n.freeGPUs(mkt) }
func (w tradeNode) FreeGPUsFor(mkt string, start, end time.Time) ([]string, error) {
	return w.n.freeGPUsFor(mkt, start, end)
}
func (w tradeNode) LeaseStart(bid *market.Order, now time.Time) time.Time {
	return leaseStartFor(bid, now)
}
func (w tradeNode) WantStart(o *market.Order, blockStart, now time.Time) time.Time {
	return wantStart(o, blockStart, now)
}
func (w tradeNode) CheckCredit(l *proto.Lease, now time.Time) error { return w.n.checkCredit(l, now) }
func (w tradeNode) CheckBidCredit(bidID, buyer string, count uint32, price int64, currency string, d time.Duration) error {
	return w.n.checkBidCredit(bidID, buyer, count, price, currency, d)
}
func (w tradeNode) CapacityChanged() { w.n.capacityChanged() }
func (w tradeNode) PublishBook(ctx context.Context, mkt string, m *proto.BookMessage, ev *p2p.BookEvent) error {
	return w.n.publishBook(ctx, mkt, m, ev)
}
func (w tradeNode) Spawn(fn func()) bool     { return w.n.spawn(fn) }
func (w tradeNode) Context() context.Context { return w.n.ctx }
func (w tradeNode) StoreFailed(what string, err error, lease string) {
	w.n.storeFailed(&storeError{what: what, err: err}, lease)
}

// TermsFailed: a lease adapter (r.mu, failStoreLocked).
func (w tradeNode) TermsFailed(lease string, err error) {
	if r, lerr := w.n.leaseRun(lease); lerr == nil {
		r.mu.Lock()
		w.n.failStoreLocked(r, "lease terms", err)
		r.mu.Unlock()
		return
	}
	w.n.storeFailed(&storeError{what: "lease terms", err: err}, lease)
}
func (w tradeNode) OwnFilled(order string) uint32               { return w.n.ownFilledQty(order) }
func (w tradeNode) OwnFailed(order string, err error)           { w.n.ownFailed(order, err) }
func (w tradeNode) Preemptible(mkt string) []market.Preemptible { return w.n.preemptible(mkt) }
func (w tradeNode) PreemptionEnd(victims []market.Preemptible, now time.Time) time.Time {
	return w.n.preemptionEnd(victims, now)
}
func (w tradeNode) Preempt(victims []market.Preemptible, forLease string, now time.Time) {
	w.n.preempt(victims, forLease, now)
}

// VictimEnd: a lease adapter (r.terms).
func (w tradeNode) VictimEnd(lease string) (time.Time, bool) {
	r, err := w.n.leaseRun(lease)
	if err != nil {
		return time.Time{}, false
	}
	return market.LeaseEnd(r.terms), true
}
func (w tradeNode) ResaleTake(ctx context.Context, from peer.ID, take *proto.Take, takeEnv []byte, takeID string) (*proto.TradeReply, bool) {
	return w.n.handleResaleTake(ctx, from, take, takeEnv, takeID)
}
func (w tradeNode) TakeResale(o *market.Order, m market.Match, takeEnv, askEnv []byte, rep *proto.ResaleReply) (uint32, error) {
	return w.n.takeResale(o, m, takeEnv, askEnv, rep)
}
