package history

import (
	"slices"
	"strings"
	"time"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/internal/exchange"
	"github.com/suanli/suanli/proto"
)

// BookSummary is the row of one replica: its book's depth and prices,
// its fills and index at now. The caller holds the books' lock
// (exchange.Books.Each).
func BookSummary(s *exchange.Replica, now time.Time) api.MarketSummary {
	cur := s.Book.Currency()
	f := func(p int64) string { return market.FormatMicros(p, cur) }
	m := api.MarketSummary{Market: s.Book.Market(), Currency: cur, Joined: true, Fills: len(s.Fills())}
	bids, asks := s.Book.Depth(0)
	for _, l := range bids {
		m.Bids += l.Orders
	}
	for _, l := range asks {
		m.Asks += l.Orders
	}
	if p, ok := s.Book.BestBid(); ok {
		m.BestBid = f(p)
	}
	if p, ok := s.Book.BestAsk(); ok {
		m.BestAsk = f(p)
	}
	if p, ok := s.Book.Spot(); ok {
		m.Spot = f(p)
	}
	if p, ok := s.Index.Value(now); ok {
		m.Index = f(p)
	}
	return m
}

// Summaries are the API's Markets: the rows of the replicas this node
// holds (BookSummary), and one per market and currency of offers (how
// many providers offer how many GPUs from what list price), joined or
// not; a market in joinedMarkets with neither a replica nor an offer gets
// a bare row. Sorted by market, then currency.
func Summaries(books []api.MarketSummary, joinedMarkets []string, offers []*proto.Offer) []api.MarketSummary {
	type key struct{ market, currency string }
	rows := map[key]*api.MarketSummary{}
	joined := map[string]bool{}
	for i := range books {
		m := &books[i]
		joined[m.Market] = true
		rows[key{m.Market, m.Currency}] = m
	}
	joinedOnly := map[string]bool{}
	for _, mkt := range joinedMarkets {
		if !joined[mkt] {
			joinedOnly[mkt] = true
		}
		joined[mkt] = true
	}
	// What providers offer, per market and currency.
	lowest := map[key]int64{}
	for _, o := range offers {
		cur := o.GetPricing().GetCurrency()
		if _, err := market.LookupCurrency(cur); err != nil {
			continue
		}
		counted := map[string]bool{}
		for _, g := range o.Gpus {
			if !market.ValidMarketKey(g.Market) {
				continue
			}
			k := key{g.Market, cur}
			m := rows[k]
			if m == nil {
				m = &api.MarketSummary{Market: g.Market, Currency: cur, Joined: joined[g.Market]}
				rows[k] = m
				delete(joinedOnly, g.Market)
			}
			m.OfferedGPUs++
			if !counted[g.Market] {
				counted[g.Market] = true
				m.Providers++
				if p := o.GetPricing().GetOnDemandMicros(); p > 0 && (lowest[k] == 0 || p < lowest[k]) {
					lowest[k] = p
					m.LowestOffer = market.FormatMicros(p, cur)
				}
			}
		}
	}
	out := make([]api.MarketSummary, 0, len(rows)+len(joinedOnly))
	for _, m := range rows {
		out = append(out, *m)
	}
	for mkt := range joinedOnly {
		out = append(out, api.MarketSummary{Market: mkt, Joined: true})
	}
	slices.SortFunc(out, func(a, b api.MarketSummary) int {
		if c := strings.Compare(a.Market, b.Market); c != 0 {
			return c
		}
		return strings.Compare(a.Currency, b.Currency)
	})
	return out
}
