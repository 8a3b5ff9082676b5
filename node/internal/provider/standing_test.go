package provider

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
)

// book is a node's orders and leases as standing asks see them.
type book struct {
	mu      sync.Mutex
	orders  map[string]api.OrderView
	leases  map[string]string // lease ID → state
	free    int
	resting uint32
	placed  []api.OrderRequest
	fail    error
	marks   map[string]string // order → standing ask
}

func newBook(free int) *book {
	return &book{orders: map[string]api.OrderView{}, leases: map[string]string{}, free: free, marks: map[string]string{}}
}

func (b *book) PlaceOrder(_ context.Context, req api.OrderRequest) (api.OrderView, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fail != nil {
		return api.OrderView{}, b.fail
	}
	b.placed = append(b.placed, req)
	v := api.OrderView{ID: fmt.Sprint("ask-", len(b.placed)+1), Status: "resting", Remaining: req.Count, Expires: t0.Add(time.Hour)}
	b.orders[v.ID] = v
	return v, nil
}

func (b *book) Order(_ context.Context, id string) (api.OrderView, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.orders[id]
	if !ok {
		return v, api.ErrUnknownOrder
	}
	return v, nil
}

func (b *book) Lease(_ context.Context, id string) (api.LeaseView, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.leases[id]
	if !ok {
		return api.LeaseView{}, api.ErrUnknownLease
	}
	return api.LeaseView{ID: id, State: s}, nil
}

func (b *book) FreeGPUs(string) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return make([]string, b.free), nil
}

func (b *book) RestingAsks(string, time.Time) uint32 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.resting
}

func (b *book) MarkStanding(order, standing string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.marks[order] = standing
}

// TestStandingAskRefills: a standing ask re-lists what it sold once the
// leases close, as far as GPUs are free and not on another resting ask;
// an expired order is re-listed; a failure is shown; a cancelled order
// ends the standing ask.
func TestStandingAskRefills(t *testing.T) {
	b := newBook(8)
	s := NewStanding(b, &fakeClock{now: t0}, quiet())
	ctx := t.Context()
	req := api.OrderRequest{Side: "ask", Market: "nvidia-h100-sxm5-80gb", Count: 4, Replenish: true, ClientKey: "k"}
	b.orders["ask-1"] = api.OrderView{ID: "ask-1", Status: "resting", Remaining: 4, Expires: t0.Add(time.Hour)}
	s.Stand("ask-1", req)
	s.Replenish(ctx)
	if len(b.placed) != 0 || b.marks["ask-1"] != "ask-1" {
		t.Fatalf("all 4 resting: placed %v, marks %v; want nothing placed, ask-1 marked", b.placed, b.marks)
	}
	// 3 sold, their lease running: nothing to re-list.
	b.orders["ask-1"] = api.OrderView{ID: "ask-1", Status: "resting", Remaining: 1, Expires: t0.Add(time.Hour),
		Fills: []api.TradeView{{Count: 3, Lease: "lease-1"}}}
	b.leases["lease-1"] = market.LeaseRunning.String()
	s.Replenish(ctx)
	if len(b.placed) != 0 {
		t.Fatalf("3 leased, 1 resting: placed %v", b.placed)
	}
	// The lease closes: 3 GPUs back, but 1 of the free is on another ask.
	b.leases["lease-1"] = market.LeaseClosed.String()
	b.free, b.resting = 5, 3
	s.Replenish(ctx)
	if len(b.placed) != 1 || b.placed[0].Count != 2 || b.placed[0].ClientKey != "" || b.placed[0].Replenish || b.marks["ask-2"] != "ask-1" {
		t.Fatalf("placed %+v, marks %v; want one ask of 2 (5 free, 3 resting), no client key, marked", b.placed, b.marks)
	}
	// ask-2 expires unfilled: it is re-listed.
	v := b.orders["ask-2"]
	v.Expires = t0
	b.orders["ask-2"] = v
	b.resting = 0
	s.Replenish(ctx)
	if len(b.placed) != 2 || b.placed[1].Count != 3 {
		t.Fatalf("after ask-2 expired: placed %+v; want a second ask of 3", b.placed)
	}
	if l := s.List(); len(l) != 1 || l[0].ID != "ask-1" || len(l[0].Orders) != 2 || l[0].Orders[1] != "ask-3" || l[0].Error != "" {
		t.Errorf("List = %+v; want ask-1 with orders ask-1, ask-3 (the expired ask-2 dropped)", l)
	}
	// A failure to place is shown until the next success.
	b.orders["ask-3"] = api.OrderView{ID: "ask-3", Status: "expired", Expires: t0}
	b.fail = errors.New("book full")
	s.Replenish(ctx)
	if l := s.List(); len(l) != 1 || l[0].Error != "book full" {
		t.Errorf("List after a failure = %+v", l)
	}
	// Cancelling an order of it ends it.
	b.orders["ask-1"] = api.OrderView{ID: "ask-1", Status: "cancelled"}
	s.Replenish(ctx)
	if l := s.List(); len(l) != 0 {
		t.Errorf("List after a cancel = %+v; want none", l)
	}
}

// TestStandingRunWakes: Run tops up on a Poke and on its timer.
func TestStandingRunWakes(t *testing.T) {
	b := newBook(2)
	clock := &fakeClock{now: t0}
	s := NewStanding(b, clock, quiet())
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	req := api.OrderRequest{Side: "ask", Market: "nvidia-h100-sxm5-80gb", Count: 2}
	b.mu.Lock()
	b.orders["ask-1"] = api.OrderView{ID: "ask-1", Status: "filled", Expires: t0.Add(time.Hour), Fills: []api.TradeView{{Count: 2, Lease: "l"}}}
	b.leases["l"] = market.LeaseClosed.String()
	b.mu.Unlock()
	s.Stand("ask-1", req) // pokes
	placed := func() int { b.mu.Lock(); defer b.mu.Unlock(); return len(b.placed) }
	waitFor(t, "a re-listing after the poke", func() bool { return placed() == 1 })
	b.mu.Lock()
	b.orders["ask-2"] = api.OrderView{ID: "ask-2", Status: "expired", Expires: t0}
	b.mu.Unlock()
	waitFor(t, "the timer's wait", func() bool { clock.mu.Lock(); defer clock.mu.Unlock(); return len(clock.waits) >= 2 })
	if d := clock.fireLast(); d != ReplenishEvery {
		t.Errorf("waits %s, want ReplenishEvery", d)
	}
	waitFor(t, "a re-listing on the timer", func() bool { return placed() == 2 })
	cancel()
	<-done
}

func TestCheckReplenish(t *testing.T) {
	for _, c := range []struct {
		req api.OrderRequest
		ok  bool
	}{
		{api.OrderRequest{Side: "bid"}, true},
		{api.OrderRequest{Side: "ask", Replenish: true}, true},
		{api.OrderRequest{Side: "bid", Replenish: true}, false},
		{api.OrderRequest{Side: "ask", Replenish: true, IOC: true}, false},
	} {
		if err := CheckReplenish(c.req); (err == nil) != c.ok || err != nil && !errors.Is(err, api.ErrBadRequest) {
			t.Errorf("CheckReplenish(%+v) = %v, want ok %v", c.req, err, c.ok)
		}
	}
}
