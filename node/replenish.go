package node

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
)

// Standing asks. An ask placed with Replenish keeps selling its count of
// GPUs: whenever GPUs it sold are freed (their lease ends) or one of its
// orders expires, the provider places a new ask, with the same terms, for
// what the standing ask has neither resting on the book nor leased out, as
// far as GPUs are free and not on another of the provider's asks. Cancelling any of
// its orders ends the standing ask. Standing asks live as long as the node
// runs; a restarted daemon needs them placed again, as all its orders.

// replenishEvery is how often standing asks are looked at without a
// lease ending, to re-list expired orders and retry failed ones.
const replenishEvery = 5 * time.Second

// standingAsks are this node's standing asks, by the ID of the first order.
type standingAsks struct {
	mu   sync.Mutex
	asks map[string]*standingAsk
	wake chan struct{}
	once sync.Once
}

type standingAsk struct {
	id     string
	req    api.OrderRequest // as placed; Count is what it keeps on the book
	orders []string         // placed for it, oldest first
	err    string           // why the last re-listing failed
}

func (s *standingAsks) init() {
	s.once.Do(func() {
		s.asks = map[string]*standingAsk{}
		s.wake = make(chan struct{}, 1)
	})
}

// poke wakes the replenish loop; it never blocks.
func (s *standingAsks) poke() {
	s.init()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// checkReplenish refuses what cannot stand: only resting asks do.
func checkReplenish(req api.OrderRequest) error {
	if !req.Replenish {
		return nil
	}
	if req.Side != "ask" {
		return api.BadRequest("replenish is for asks only")
	}
	if req.IOC {
		return api.BadRequest("an IOC ask cannot replenish: it never rests")
	}
	return nil
}

// standAsk makes the ask id, placed from req, a standing ask.
func (n *Node) standAsk(id string, req api.OrderRequest) {
	s := &n.standing
	s.init()
	req.ClientKey, req.Replenish = "", false
	s.mu.Lock()
	s.asks[id] = &standingAsk{id: id, req: req, orders: []string{id}}
	s.mu.Unlock()
	n.markStanding(id, id)
	s.poke() // a take may already have freed nothing, or the ask filled at once
}

func (n *Node) markStanding(order, standing string) {
	n.ownMu.Lock()
	defer n.ownMu.Unlock()
	if oo := n.own[order]; oo != nil {
		oo.stand = standing
	}
}

// ownFailed records why one of this node's orders failed to take a match.
func (n *Node) ownFailed(id string, err error) {
	n.ownMu.Lock()
	defer n.ownMu.Unlock()
	if oo := n.own[id]; oo != nil {
		oo.err = err.Error()
	}
}

// replenishLoop re-lists freed GPUs for the standing asks until the node
// closes. The run loop starts it on providers.
func (n *Node) replenishLoop() {
	n.standing.init()
	t := time.NewTicker(replenishEvery)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-n.standing.wake:
		case <-t.C:
		}
		n.replenish(n.ctx)
	}
}

// replenish tops up every standing ask, one at a time.
func (n *Node) replenish(ctx context.Context) {
	s := &n.standing
	s.mu.Lock()
	asks := make([]*standingAsk, 0, len(s.asks))
	for _, sa := range s.asks {
		asks = append(asks, sa)
	}
	s.mu.Unlock()
	for _, sa := range asks {
		if ctx.Err() != nil {
			return
		}
		n.replenishOne(ctx, sa)
	}
}

// replenishOne places a new ask for what sa has neither resting nor in a
// lease not yet closed, as far as GPUs are free and not promised to
// another of this node's resting asks.
func (n *Node) replenishOne(ctx context.Context, sa *standingAsk) {
	s := &n.standing
	s.mu.Lock()
	orders := append([]string(nil), sa.orders...)
	req := sa.req
	s.mu.Unlock()
	now := n.now()
	live := uint32(0)
	over := map[string]bool{} // orders that no longer count: done, their leases closed
	for _, id := range orders {
		v, err := n.Order(ctx, id)
		if err != nil {
			continue
		}
		done := v.Status != "resting" && v.Status != "taking" || !v.Expires.After(now)
		if v.Status == "cancelled" {
			s.mu.Lock()
			delete(s.asks, sa.id)
			s.mu.Unlock()
			n.log.Info("standing ask ended: an order of it was cancelled", "standing", sa.id, "order", id)
			return
		}
		if v.Status == "resting" && v.Expires.After(now) {
			live += v.Remaining
		}
		for _, f := range v.Fills {
			// Sold and not yet back: a lease not closed (or not started).
			if l, err := n.Lease(ctx, f.Lease); err != nil || l.State != market.LeaseClosed.String() {
				live += f.Count
				done = false
			}
		}
		if done && id != sa.id {
			over[id] = true
		}
	}
	if len(over) > 0 {
		s.mu.Lock()
		sa.orders = slices.DeleteFunc(sa.orders, func(id string) bool { return over[id] })
		s.mu.Unlock()
	}
	if live >= req.Count {
		return
	}
	free, err := n.freeGPUs(req.Market)
	if err != nil {
		return
	}
	avail := int64(len(free)) - int64(n.restingAsks(req.Market, now))
	want := min(int64(req.Count-live), avail)
	if want <= 0 {
		return
	}
	req.Count = uint32(want)
	v, err := n.PlaceOrder(ctx, req)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		sa.err = err.Error()
		n.log.Warn("re-listing a standing ask failed", "standing", sa.id, "err", err)
		return
	}
	sa.err = ""
	sa.orders = append(sa.orders, v.ID)
	n.markStanding(v.ID, sa.id)
	n.log.Info("standing ask re-listed", "standing", sa.id, "order", v.ID, "count", want)
}

// restingAsks counts the GPUs on this node's resting, unexpired asks in a
// market: already on the book.
func (n *Node) restingAsks(mkt string, now time.Time) uint32 {
	type ref struct{ id, currency string }
	var refs []ref
	n.ownMu.Lock()
	for id, oo := range n.own {
		if oo.order.Side == market.Ask && oo.order.Market == mkt && (oo.status == "resting" || oo.status == "taking") && oo.order.Expires.After(now) {
			refs = append(refs, ref{id, oo.order.Currency})
		}
	}
	n.ownMu.Unlock()
	var sum uint32
	for _, r := range refs {
		if _, rem, ok := n.books.Lookup(mkt, r.currency, r.id); ok {
			sum += rem
		}
	}
	return sum
}

// StandingAsks lists the standing asks: ID, count kept, orders placed.
func (n *Node) StandingAsks() []api.StandingAskView {
	s := &n.standing
	s.init()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]api.StandingAskView, 0, len(s.asks))
	for _, sa := range s.asks {
		out = append(out, api.StandingAskView{ID: sa.id, Market: sa.req.Market, Count: sa.req.Count, Orders: append([]string(nil), sa.orders...), Error: sa.err})
	}
	return out
}
