package devnet

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
)

// Markets are the market keys of the simulated models.
var Markets = map[string]string{
	"dgxa100": "nvidia-a100-sxm4-40gb",
	"dgxh100": "nvidia-h100-sxm5-80gb",
	"dgxh200": "nvidia-h200-sxm5-141gb",
	"dgxb200": "nvidia-b200-sxm6-180gb",
}

// MarketOf is the market a simulated model's GPUs trade in.
func MarketOf(model string) string { return Markets[model] }

// LeaseDuration is how long the scenario's bids lease GPUs: a few billing
// intervals, so leases run to settlement while the devnet watches.
const LeaseDuration = 5 * time.Second

// Trading is what the market scenario did: per market, the trades and the
// book as the first buyer sees it.
type Trading struct {
	Asks   []api.OrderView
	Bids   []api.OrderView
	Books  []api.BookView
	Trades map[string][]api.TradeView
}

// Trade runs the order-book scenario: every provider asks 4 of its GPUs at
// a spot price a little under its on-demand price; buyers, round robin over
// the markets, bid for 3 GPUs with a limit that steps up from below the
// best ask to above it, so some bids rest and others trade, and the spot
// price moves. It waits until every node's replica holds every ask before
// bidding and until the first buyer has seen every trade before returning.
func (n *Net) Trade(ctx context.Context) (*Trading, error) {
	out := &Trading{Trades: map[string][]api.TradeView{}}
	markets := map[string]bool{}
	for i, p := range n.Providers {
		m := n.Machines[i]
		mkt := MarketOf(m.Model)
		markets[mkt] = true
		on, err := market.ParseMoney(m.Price, m.Currency)
		if err != nil {
			return nil, err
		}
		spot := market.FormatMicros(on.Micros*95/100/10_000*10_000, m.Currency) // 5% under, whole cents
		o, err := p.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: mkt, Count: 4, Price: spot, Currency: m.Currency, Expires: "30m", MinDuration: "1s"})
		if err != nil {
			return nil, fmt.Errorf("devnet: provider %d ask: %w", i, err)
		}
		out.Asks = append(out.Asks, o)
	}
	keys := make([]string, 0, len(markets))
	for k := range markets {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	// Every buyer must hold every ask before bidding, or it would rest a
	// bid that should have traded.
	for _, b := range n.Buyers {
		for _, mkt := range keys {
			want := 0
			for _, a := range out.Asks {
				if a.Market == mkt {
					want += int(a.Count)
				}
			}
			if err := waitBook(ctx, b, mkt, want); err != nil {
				return nil, err
			}
		}
	}
	steps := []int64{15, 25, -10, 5} // cents against the best ask
	var bidders []*node.Node
	for i, b := range n.Buyers {
		for j, mkt := range keys {
			bk, err := b.Book(ctx, mkt, "USD")
			if err != nil {
				return nil, err
			}
			best, err := market.ParseMoney(bk.BestAsk, "USD")
			if err != nil {
				continue // nothing left to buy in this market
			}
			limit := best.Micros + steps[(i+j)%len(steps)]*10_000
			o, err := b.PlaceOrder(ctx, api.OrderRequest{
				Side: "bid", Market: mkt, Count: 3, Price: market.FormatMicros(limit, "USD"), Duration: LeaseDuration.String(), Expires: "30m",
			})
			if err != nil {
				return nil, fmt.Errorf("devnet: buyer %d bid: %w", i, err)
			}
			out.Bids = append(out.Bids, o)
			bidders = append(bidders, b)
		}
	}
	// Wait until the first buyer has seen every fill the bids made.
	fills := map[string]bool{}
	for _, o := range out.Bids {
		for _, f := range o.Fills {
			fills[f.ID] = true
		}
	}
	watcher := n.Buyers[0]
	for {
		seen := 0
		for _, mkt := range keys {
			ts, err := watcher.Trades(ctx, mkt)
			if err != nil {
				return nil, err
			}
			out.Trades[mkt] = ts
			for _, t := range ts {
				if fills[t.ID] {
					seen++
				}
			}
		}
		if seen >= len(fills) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("devnet: first buyer saw %d of %d trades: %w", seen, len(fills), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	// And every bid that still rests: a provider may have taken part of a
	// resting bid since it was placed, so ask each bidder again.
	for _, mkt := range keys {
		for {
			want := 0
			for i, o := range out.Bids {
				if o.Market != mkt {
					continue
				}
				cur, err := bidders[i].Order(ctx, o.ID)
				if err != nil {
					return nil, err
				}
				out.Bids[i] = cur
				if cur.Status == "resting" {
					want += int(cur.Remaining)
				}
			}
			bk, err := watcher.Book(ctx, mkt, "USD")
			if err != nil {
				return nil, err
			}
			got := 0
			for _, l := range bk.Bids {
				got += l.Count
			}
			if got == want {
				out.Books = append(out.Books, bk)
				out.Trades[mkt], err = watcher.Trades(ctx, mkt)
				if err != nil {
					return nil, err
				}
				break
			}
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("devnet: first buyer sees %d of %d bid GPUs in %s: %w", got, want, mkt, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return out, nil
}

func waitBook(ctx context.Context, b *node.Node, mkt string, askGPUs int) error {
	for {
		bk, err := b.Book(ctx, mkt, "USD")
		if err != nil {
			return err
		}
		got := 0
		for _, l := range bk.Asks {
			got += l.Count
		}
		if got >= askGPUs {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("devnet: %s sees %d of %d asked GPUs in %s: %w", b.PeerID(), got, askGPUs, mkt, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Statement is one buyer's settlement with one provider, as both see it.
type Statement struct {
	Buyer, Provider string
	// BuyerView and ProviderView are each side's settlement with the other.
	BuyerView, ProviderView api.SettlementView
}

// Settle waits until every lease on every node has closed, then returns
// each buyer–provider pair's statement from both sides.
func (n *Net) Settle(ctx context.Context) ([]Statement, error) {
	for _, nd := range n.Nodes() {
		for {
			ls, err := nd.Leases(ctx)
			if err != nil {
				return nil, err
			}
			open := 0
			for _, l := range ls {
				if l.State != "closed" {
					open++
				}
			}
			if open == 0 {
				break
			}
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("devnet: %s still has %d open leases: %w", nd.PeerID(), open, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	byID := map[string]*node.Node{}
	for _, p := range n.Providers {
		byID[p.PeerID().String()] = p
	}
	var out []Statement
	for _, b := range n.Buyers {
		views, err := b.Settle(ctx, "")
		if err != nil {
			return nil, err
		}
		for _, bv := range views {
			p := byID[bv.Peer]
			if p == nil {
				continue
			}
			pvs, err := p.Settle(ctx, b.PeerID().String())
			if err != nil {
				return nil, err
			}
			st := Statement{Buyer: b.PeerID().String(), Provider: bv.Peer, BuyerView: bv}
			if len(pvs) == 1 {
				st.ProviderView = pvs[0]
			}
			out = append(out, st)
		}
	}
	return out, nil
}

// Pay closes the round trip: for each statement, the provider acknowledges
// exactly what its ledger says the buyer owes, in each currency, and Pay
// waits until both ledgers owe nothing. It returns the amounts
// acknowledged, per statement and currency, and the statements after.
func (n *Net) Pay(ctx context.Context, stmts []Statement) ([]Statement, error) {
	byID := map[string]*node.Node{}
	for _, nd := range n.Nodes() {
		byID[nd.PeerID().String()] = nd
	}
	out := make([]Statement, len(stmts))
	for i, st := range stmts {
		p, b := byID[st.Provider], byID[st.Buyer]
		if p == nil || b == nil {
			return nil, fmt.Errorf("devnet: statement of unknown nodes %s, %s", st.Provider, st.Buyer)
		}
		for _, t := range st.ProviderView.Totals {
			if t.OwedMicros <= 0 {
				continue
			}
			if _, err := p.AckPayment(ctx, api.PaymentRequest{Peer: st.Buyer, Amount: t.Owed, Currency: t.Currency, Reference: "devnet"}); err != nil {
				return nil, fmt.Errorf("devnet: acknowledging %s %s: %w", t.Owed, t.Currency, err)
			}
		}
		for {
			pv, err1 := p.Settle(ctx, st.Buyer)
			bv, err2 := b.Settle(ctx, st.Provider)
			if err := errors.Join(err1, err2); err != nil {
				return nil, err
			}
			if len(pv) == 1 && len(bv) == 1 && owesNothing(pv[0]) && owesNothing(bv[0]) {
				out[i] = Statement{Buyer: st.Buyer, Provider: st.Provider, BuyerView: bv[0], ProviderView: pv[0]}
				break
			}
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("devnet: %s and %s still owe after the payment: %w", st.Buyer, st.Provider, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return out, nil
}

func owesNothing(v api.SettlementView) bool {
	for _, t := range v.Totals {
		if t.OwedMicros != 0 {
			return false
		}
	}
	return true
}
