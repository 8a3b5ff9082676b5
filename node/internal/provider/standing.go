package provider

import (
	"context"
	"log/slog"
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
// far as GPUs are free and not on another of the provider's asks.
// Cancelling any of its orders ends the standing ask. Standing asks live
// as long as the node runs; a restarted daemon needs them placed again, as
// all its orders.
//
// A standing ask is in one of two states: standing (in Standing's map,
// topped up by each pass) or ended (removed, once a pass finds one of its
// orders cancelled). Its err says why the last top-up failed, "" when it
// did not.

// ReplenishEvery is how often standing asks are looked at without a
// lease ending, to re-list expired orders and retry failed ones.
const ReplenishEvery = 5 * time.Second

// Orders is what standing asks need from the node's trading and lease
// sides. Standing calls them without its lock held.
type Orders interface {
	// PlaceOrder places an order as the API does.
	PlaceOrder(ctx context.Context, req api.OrderRequest) (api.OrderView, error)
	// Order is one of this node's orders as the API shows it.
	Order(ctx context.Context, id string) (api.OrderView, error)
	// Lease is one of this node's leases as the API shows it.
	Lease(ctx context.Context, id string) (api.LeaseView, error)
	// FreeGPUs lists this provider's GPUs in mkt not held by a lease.
	FreeGPUs(mkt string) ([]string, error)
	// RestingAsks counts the GPUs on this node's resting, unexpired asks
	// in mkt: already on the book.
	RestingAsks(mkt string, now time.Time) uint32
	// MarkStanding records that order was placed for the standing ask
	// standing (its view shows it).
	MarkStanding(order, standing string)
}

// Standing are this node's standing asks, by the ID of the first order.
// Its lock, mu, is a leaf: Orders is never called with it held.
type Standing struct {
	orders Orders
	clock  Clock
	log    *slog.Logger
	wake   chan struct{}

	mu   sync.Mutex
	asks map[string]*standingAsk
}

type standingAsk struct {
	id     string
	req    api.OrderRequest // as placed; Count is what it keeps on the book
	orders []string         // placed for it, oldest first
	err    string           // why the last re-listing failed
}

// NewStanding makes the standing asks of a node placing orders through
// orders, on clock (nil: SystemClock(nil)).
func NewStanding(orders Orders, clock Clock, log *slog.Logger) *Standing {
	if log == nil {
		log = slog.Default()
	}
	if clock == nil {
		clock = SystemClock(nil)
	}
	return &Standing{orders: orders, clock: clock, log: log, wake: make(chan struct{}, 1), asks: map[string]*standingAsk{}}
}

// Poke wakes Run: GPUs may have been freed. It never blocks.
func (s *Standing) Poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// CheckReplenish refuses what cannot stand: only resting asks do.
func CheckReplenish(req api.OrderRequest) error {
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

// Stand makes the ask id, placed from req, a standing ask.
func (s *Standing) Stand(id string, req api.OrderRequest) {
	req.ClientKey, req.Replenish = "", false
	s.mu.Lock()
	s.asks[id] = &standingAsk{id: id, req: req, orders: []string{id}}
	s.mu.Unlock()
	s.orders.MarkStanding(id, id)
	s.Poke() // a take may already have freed nothing, or the ask filled at once
}

// Run re-lists freed GPUs for the standing asks, on a Poke or every
// ReplenishEvery, until ctx ends.
func (s *Standing) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-s.clock.After(ReplenishEvery):
		}
		s.Replenish(ctx)
	}
}

// Replenish tops up every standing ask, one at a time.
func (s *Standing) Replenish(ctx context.Context) {
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
		s.replenishOne(ctx, sa)
	}
}

// replenishOne places a new ask for what sa has neither resting nor in a
// lease not yet closed, as far as GPUs are free and not promised to
// another of this node's resting asks.
func (s *Standing) replenishOne(ctx context.Context, sa *standingAsk) {
	s.mu.Lock()
	orders := append([]string(nil), sa.orders...)
	req := sa.req
	s.mu.Unlock()
	now := s.clock.Now()
	live := uint32(0)
	over := map[string]bool{} // orders that no longer count: done, their leases closed
	for _, id := range orders {
		v, err := s.orders.Order(ctx, id)
		if err != nil {
			continue
		}
		done := v.Status != "resting" && v.Status != "taking" || !v.Expires.After(now)
		if v.Status == "cancelled" {
			s.mu.Lock()
			delete(s.asks, sa.id)
			s.mu.Unlock()
			s.log.Info("standing ask ended: an order of it was cancelled", "standing", sa.id, "order", id)
			return
		}
		if v.Status == "resting" && v.Expires.After(now) {
			live += v.Remaining
		}
		for _, f := range v.Fills {
			// Sold and not yet back: a lease not closed (or not started).
			if l, err := s.orders.Lease(ctx, f.Lease); err != nil || l.State != market.LeaseClosed.String() {
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
	free, err := s.orders.FreeGPUs(req.Market)
	if err != nil {
		return
	}
	avail := int64(len(free)) - int64(s.orders.RestingAsks(req.Market, now))
	want := min(int64(req.Count-live), avail)
	if want <= 0 {
		return
	}
	req.Count = uint32(want)
	v, err := s.orders.PlaceOrder(ctx, req)
	s.mu.Lock()
	if err != nil {
		sa.err = err.Error()
		s.mu.Unlock()
		s.log.Warn("re-listing a standing ask failed", "standing", sa.id, "err", err)
		return
	}
	sa.err = ""
	sa.orders = append(sa.orders, v.ID)
	s.mu.Unlock()
	s.orders.MarkStanding(v.ID, sa.id)
	s.log.Info("standing ask re-listed", "standing", sa.id, "order", v.ID, "count", want)
}

// List lists the standing asks: ID, count kept, orders placed.
func (s *Standing) List() []api.StandingAskView {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]api.StandingAskView, 0, len(s.asks))
	for _, sa := range s.asks {
		out = append(out, api.StandingAskView{ID: sa.id, Market: sa.req.Market, Count: sa.req.Count, Orders: append([]string(nil), sa.orders...), Error: sa.err})
	}
	return out
}
