package node

import (
	"cmp"
	"context"
	"sort"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/internal/exchange"
	"github.com/suanli/suanli/node/internal/orders"
	"github.com/suanli/suanli/node/internal/view"
)

// Book implements API: it joins the market if needed (fetching its open
// orders from peers) and shows the replica in currency (default USD).
func (n *Node) Book(ctx context.Context, mkt, currency string) (_ api.BookView, err error) {
	defer classified(&err)
	if err := n.JoinMarket(ctx, mkt); err != nil {
		return api.BookView{}, err
	}
	cur := cmp.Or(currency, "USD")
	if _, err := market.LookupCurrency(cur); err != nil {
		return api.BookView{}, api.BadRequest("%v", err)
	}
	var v api.BookView
	if err := n.books.With(mkt, cur, func(s *exchange.Replica) { v = view.Book(s, mkt, cur, n.now()) }); err != nil {
		return api.BookView{}, api.BadRequest("%v", err)
	}
	return v, nil
}

// Trades implements API: the recent fills of a market this node has seen,
// newest first.
func (n *Node) Trades(ctx context.Context, mkt string) (_ []api.TradeView, err error) {
	defer classified(&err)
	if err := n.JoinMarket(ctx, mkt); err != nil {
		return nil, err
	}
	out := []api.TradeView{}
	n.books.Each(func(s *exchange.Replica) {
		if s.Book.Market() != mkt {
			return
		}
		for _, r := range s.Fills() {
			out = append(out, orders.TradeView(r.Fill, r.Lease))
		}
	})
	out = append(out, n.orders.Resales(mkt)...)
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Time.Equal(out[j].Time) {
			return out[i].Time.After(out[j].Time)
		}
		return out[i].ID > out[j].ID
	})
	return out, nil
}

// HoldsOrder reports whether this node's replica of a market in a currency
// holds the open order id. It is cheap (a map lookup under the books lock),
// for harnesses that watch an order spread through the network.
func (n *Node) HoldsOrder(mkt, cur, id string) bool { return n.books.Holds(mkt, cur, id) }

// BookDigest summarizes this node's replica of a market: the open orders
// with what remains of each, and the IDs of the recent fills, hashed, of
// the makers with a maker stamp (what replicas reconcile; an unstamped
// new maker's orders stay where gossip brought them). Two replicas that
// converged have the same digest; orders and fills count what went into
// it.
func (n *Node) BookDigest(mkt, cur string) (digest string, orders, fills int) {
	return n.books.Digest(mkt, cur)
}
