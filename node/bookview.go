package node

import (
	"context"
	"sort"
	"time"

	"github.com/suanli/suanli/market"
)

// BookView is one market's book as this node's replica holds it. Money is
// decimal strings beside the currency.
type BookView struct {
	Market   string      `json:"market"`
	Currency string      `json:"currency"`
	Bids     []LevelView `json:"bids"`
	Asks     []LevelView `json:"asks"`
	BestBid  string      `json:"best_bid,omitempty"`
	BestAsk  string      `json:"best_ask,omitempty"`
	Spread   string      `json:"spread,omitempty"`
	// Spot is the price of the last fill both parties signed.
	Spot string `json:"spot,omitempty"`
	// Index is the volume-weighted, one-print-per-provider average of the
	// last hour's fills.
	Index string `json:"index,omitempty"`
	// Blocks are the resting reserved orders for time ahead (a forward
	// start), apart from the depth of time now; they are in Bids and Asks
	// too, at their prices.
	Blocks []BlockView `json:"blocks,omitempty"`
}

// BlockView is a resting order for a forward block of reserved time.
type BlockView struct {
	Side  string    `json:"side"`
	Price string    `json:"price"`
	Count uint32    `json:"count"`
	Start time.Time `json:"start"`
	// Duration is a bid's block; MaxDuration the longest an ask sells.
	Duration    string `json:"duration,omitempty"`
	MaxDuration string `json:"max_duration,omitempty"`
}

// LevelView is one price level.
type LevelView struct {
	Price  string `json:"price"`
	Count  int    `json:"count"`
	Orders int    `json:"orders"`
}

// Book implements API: it joins the market if needed (fetching its open
// orders from peers) and shows the replica in currency (default USD).
func (n *Node) Book(ctx context.Context, mkt, currency string) (BookView, error) {
	if err := n.JoinMarket(ctx, mkt); err != nil {
		return BookView{}, err
	}
	cur := cmpOr(currency, "USD")
	if _, err := market.LookupCurrency(cur); err != nil {
		return BookView{}, badRequest("%v", err)
	}
	n.books.mu.Lock()
	defer n.books.mu.Unlock()
	s, err := n.books.state(mkt, cur)
	if err != nil {
		return BookView{}, badRequest("%v", err)
	}
	f := func(p int64) string { return market.FormatMicros(p, cur) }
	v := BookView{Market: mkt, Currency: cur, Bids: []LevelView{}, Asks: []LevelView{}}
	now := n.now()
	for _, side := range []market.Side{market.Bid, market.Ask} {
		for o, rem := range s.book.Orders(side) {
			if o.Start.After(now) {
				b := BlockView{Side: side.String(), Price: f(o.Price), Count: rem, Start: o.Start.UTC()}
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
		v.Bids = append(v.Bids, LevelView{Price: f(l.Price), Count: l.Quantity, Orders: l.Orders})
	}
	for _, l := range asks {
		v.Asks = append(v.Asks, LevelView{Price: f(l.Price), Count: l.Quantity, Orders: l.Orders})
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
func (n *Node) Trades(ctx context.Context, mkt string) ([]TradeView, error) {
	if err := n.JoinMarket(ctx, mkt); err != nil {
		return nil, err
	}
	n.books.mu.Lock()
	out := []TradeView{}
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
