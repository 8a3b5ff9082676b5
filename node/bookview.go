package node

import (
	"context"
	"sort"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
)

// Book implements API: it joins the market if needed (fetching its open
// orders from peers) and shows the replica in currency (default USD).
func (n *Node) Book(ctx context.Context, mkt, currency string) (_ api.BookView, err error) {
	defer classified(&err)
	if err := n.JoinMarket(ctx, mkt); err != nil {
		return api.BookView{}, err
	}
	cur := cmpOr(currency, "USD")
	if _, err := market.LookupCurrency(cur); err != nil {
		return api.BookView{}, api.BadRequest("%v", err)
	}
	n.books.mu.Lock()
	defer n.books.mu.Unlock()
	s, err := n.books.state(mkt, cur)
	if err != nil {
		return api.BookView{}, api.BadRequest("%v", err)
	}
	f := func(p int64) string { return market.FormatMicros(p, cur) }
	v := api.BookView{Market: mkt, Currency: cur, Bids: []api.LevelView{}, Asks: []api.LevelView{}}
	now := n.now()
	for _, side := range []market.Side{market.Bid, market.Ask} {
		for o, rem := range s.book.Orders(side) {
			if o.Start.After(now) {
				b := api.BlockView{Side: side.String(), Price: f(o.Price), Count: rem, Start: o.Start.UTC()}
				if side == market.Bid {
					b.Duration = o.Duration.String()
				} else {
					b.MaxDuration = o.MaxDuration.String()
				}
				v.Blocks = append(v.Blocks, b)
			}
		}
	}
	bids, asks := s.book.Depth(0)
	for _, l := range bids {
		v.Bids = append(v.Bids, api.LevelView{Price: f(l.Price), Count: l.Quantity, Orders: l.Orders})
	}
	for _, l := range asks {
		v.Asks = append(v.Asks, api.LevelView{Price: f(l.Price), Count: l.Quantity, Orders: l.Orders})
	}
	if p, ok := s.book.BestBid(); ok {
		v.BestBid = f(p)
	}
	if p, ok := s.book.BestAsk(); ok {
		v.BestAsk = f(p)
	}
	if p, ok := s.book.Spread(); ok {
		v.Spread = f(p)
	}
	if p, ok := s.book.Spot(); ok {
		v.Spot = f(p)
	}
	if p, ok := s.index.Value(n.now()); ok {
		v.Index = f(p)
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
	n.books.mu.Lock()
	out := []api.TradeView{}
	for _, s := range n.books.states {
		if s.book.Market() != mkt {
			continue
		}
		for _, r := range s.fills {
			out = append(out, tradeView(r.fill, r.lease))
		}
	}
	n.books.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Time.Equal(out[j].Time) {
			return out[i].Time.After(out[j].Time)
		}
		return out[i].ID > out[j].ID
	})
	return out, nil
}
