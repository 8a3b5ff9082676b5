package node

import (
	"context"
	"time"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/internal/orders"
)

// The node's own orders are package orders'; this file wires them and
// keeps their API methods.

// newOrders makes the node's own orders, once its books are built.
func (n *Node) newOrders() *orders.Own {
	return orders.New(orders.Config{Self: n.host.ID(), Key: n.key, Books: n.books, Now: n.now, Log: n.log, Ctx: n.ctx, Spawn: n.spawn,
		PreemptMargin: n.preemptMargin, Node: ordersNode{n}})
}

// ordersNode is the rest of the node as the own orders see it.
type ordersNode struct{ *Node }

var _ orders.Node = ordersNode{}

func (w ordersNode) TakeLoop(ctx context.Context, o *market.Order, env []byte) {
	w.trade.TakeLoop(ctx, o, env)
}
func (w ordersNode) NoGPU() error { return w.noGPU }
func (w ordersNode) ReservedAskPrice(minDuration string) (string, error) {
	return w.prov.ReservedAskPrice(minDuration)
}
func (w ordersNode) FreeGPUs(mkt string) ([]string, error) { return w.prov.FreeGPUs(mkt) }
func (w ordersNode) FreeGPUsFor(mkt string, from, end time.Time) ([]string, error) {
	return w.prov.FreeGPUsFor(mkt, from, end)
}
func (w ordersNode) Preemptible(mkt string) []market.Preemptible { return w.leases.Preemptible(mkt) }
func (w ordersNode) AskFacts(ctx context.Context, o *market.Order, seq uint64) error {
	return w.askFacts(ctx, o, seq)
}
func (w ordersNode) PlaceResale(ctx context.Context, req api.OrderRequest) (api.OrderView, error) {
	return w.resale.Place(ctx, req)
}
func (w ordersNode) Stand(id string, req api.OrderRequest) { w.standing.Stand(id, req) }

// PlaceOrder signs and places a bid or ask: it joins the market, takes
// whatever the order crosses in this node's replica (agreeing each trade
// with its maker), and rests the rest on the book unless it is IOC.
func (n *Node) PlaceOrder(ctx context.Context, req api.OrderRequest) (_ api.OrderView, err error) {
	defer classified(&err)
	return n.orders.Place(ctx, req)
}

// Order returns one of this node's orders.
func (n *Node) Order(_ context.Context, id string) (_ api.OrderView, err error) {
	defer classified(&err)
	return n.orders.Order(id)
}

// Orders lists this node's orders, newest first.
func (n *Node) Orders(context.Context) ([]api.OrderView, error) { return n.orders.List(), nil }

// OrdersPage implements DashboardAPI.
func (n *Node) OrdersPage(_ context.Context, q api.PageQuery) (_ api.OrdersPageView, err error) {
	defer classified(&err)
	return n.orders.Page(q)
}

// CancelOrder withdraws one of this node's resting orders and gossips the
// signed cancel.
func (n *Node) CancelOrder(ctx context.Context, id string) (_ api.OrderView, err error) {
	defer classified(&err)
	return n.orders.Cancel(ctx, id)
}
