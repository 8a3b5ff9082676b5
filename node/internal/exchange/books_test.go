package exchange

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

const mkt = "nvidia-h100-sxm5-80gb"

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// clock is a settable clock, safe for concurrent use.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

func ask(id, maker string, qty uint32, price int64) *market.Order {
	return &market.Order{
		ID: id, Maker: maker, Side: market.Ask, Market: mkt, Currency: "USD",
		Quantity: qty, Price: price, LeaseType: market.Spot,
		MinDuration: time.Hour, MaxDuration: 24 * time.Hour,
		Created: t0, Expires: t0.Add(time.Hour),
		Facts: market.Facts{Region: "CN-GZ", Attestation: market.AttestCCEvidence, MemoryBytes: 80 << 30},
	}
}

func orderEvent(o *market.Order) *p2p.BookEvent {
	return &p2p.BookEvent{Kind: p2p.KindOrder, Order: o, OrderProto: &proto.Order{}, Envelope: []byte("env-" + o.ID)}
}

func TestRestSyncSweep(t *testing.T) {
	clk := &clock{t: t0}
	b := New(Config{Now: clk.now})
	b.Apply(mkt, orderEvent(ask("a1", "maker-a", 2, 2_000_000)))
	short := ask("a2", "maker-b", 1, 2_100_000)
	short.Expires = t0.Add(time.Minute)
	b.Apply(mkt, orderEvent(short))
	if _, orders, _ := b.Digest(mkt, "USD"); orders != 0 {
		t.Fatalf("digest counts %d orders of unstamped makers, want none", orders)
	}
	knowStamps(b, "maker-a", "maker-b")

	if !b.Holds(mkt, "USD", "a1") || !b.Holds(mkt, "USD", "a2") {
		t.Fatal("applied orders are not held")
	}
	if b.Holds(mkt, "EUR", "a1") {
		t.Fatal("an order is held in a currency it is not in")
	}
	if got := len(b.SyncAnswer(mkt)); got != 2 {
		t.Fatalf("sync answer has %d messages, want 2", got)
	}
	if got := len(b.SyncAnswer("amd-mi300x-192gb")); got != 0 {
		t.Fatalf("sync answer of another market has %d messages", got)
	}
	before, orders, _ := b.Digest(mkt, "USD")
	if orders != 2 {
		t.Fatalf("digest counts %d orders, want 2", orders)
	}

	// Past a2's expiry: late joiners no longer get it, even before a sweep.
	clk.set(t0.Add(2 * time.Minute))
	msgs := b.SyncAnswer(mkt)
	if len(msgs) != 1 || string(msgs[0].GetOrder()) != "env-a1" {
		t.Fatalf("sync answer after a2 expired: %v", msgs)
	}
	b.Sweep()
	if b.Holds(mkt, "USD", "a2") || !b.Holds(mkt, "USD", "a1") {
		t.Fatal("sweep dropped the wrong orders")
	}
	if after, _, _ := b.Digest(mkt, "USD"); after == before {
		t.Fatal("digest unchanged by the sweep")
	}

	// A cancel by someone else is refused; by the maker it withdraws.
	var cancelled []string
	b.cfg.Hooks.Cancelled = func(id string) { cancelled = append(cancelled, id) }
	if err := b.With(mkt, "USD", func(s *Replica) {
		if err := s.Cancel("a1", "maker-b"); err == nil {
			t.Error("a cancel by a non-maker was applied")
		}
		if err := s.Cancel("a1", "maker-a"); err != nil {
			t.Errorf("maker's cancel: %v", err)
		}
		if s.Envelope("a1") != nil {
			t.Error("a cancelled order's envelope is still served")
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.With("not a market", "USD", func(*Replica) { t.Error("fn called for an invalid market") }); err == nil {
		t.Fatal("With accepted an invalid market")
	}
}

func TestApplyFillOnce(t *testing.T) {
	clk := &clock{t: t0}
	var locked, filled, refused atomic.Int32
	b := New(Config{Now: clk.now, Hooks: Hooks{
		FillLocked:  func(*p2p.BookEvent, int64, bool) { locked.Add(1) },
		Filled:      func(*p2p.BookEvent, int64, bool) { filled.Add(1) },
		FillRefused: func(*p2p.BookEvent, error) { refused.Add(1) },
	}})
	b.Apply(mkt, orderEvent(ask("a1", "maker-a", 3, 2_000_000)))
	f := market.Fill{ID: "f1", Market: mkt, Currency: "USD", BidID: "b1", AskID: "a1", Buyer: "buyer", Provider: "maker-a",
		Quantity: 2, Price: 2_000_000, LeaseType: market.Spot, Time: t0}
	ev := &p2p.BookEvent{Kind: p2p.KindFill, Fill: &f, Lease: &proto.Lease{Id: "l1"}, Raw: &proto.Fill{}}
	b.Apply(mkt, ev)
	b.Apply(mkt, ev) // gossip and sync may both bring it
	if locked.Load() != 1 || filled.Load() != 1 || refused.Load() != 0 {
		t.Fatalf("hooks: locked %d, filled %d, refused %d; want 1, 1, 0", locked.Load(), filled.Load(), refused.Load())
	}
	if _, rem, ok := b.Lookup(mkt, "USD", "a1"); !ok || rem != 1 {
		t.Fatalf("ask after a fill of 2 of 3: open %v, remaining %d", ok, rem)
	}
	b.With(mkt, "USD", func(s *Replica) {
		if len(s.Fills()) != 1 || s.Fills()[0].Lease.Id != "l1" {
			t.Errorf("recent fills: %+v", s.Fills())
		}
	})
	if _, _, fills := b.Digest(mkt, "USD"); fills != 0 {
		t.Fatalf("digest counts %d fills of unstamped parties, want none", fills)
	}
	knowStamps(b, "maker-a")
	if _, orders, fills := b.Digest(mkt, "USD"); fills != 1 || orders != 1 {
		t.Fatalf("digest counts %d orders, %d fills of a stamped party; want 1, 1", orders, fills)
	}
}

func TestCheckOrder(t *testing.T) {
	var calls atomic.Int32
	verdict := error(nil)
	b := New(Config{Now: (&clock{t: t0}).now, Hooks: Hooks{CheckAsk: func(context.Context, *market.Order, *proto.Order) error {
		calls.Add(1)
		return verdict
	}}})
	ctx := context.Background()
	cases := []struct {
		name string
		err  error
		want pubsub.ValidationResult
	}{
		{"backed", nil, pubsub.ValidationAccept},
		{"offer not found yet", fmt.Errorf("lookup: %w", ErrOfferUnknown), pubsub.ValidationIgnore},
		{"offer does not cover it", errors.New("ask for 9 GPUs, offer has 8"), pubsub.ValidationReject},
	}
	for i, c := range cases {
		verdict = c.err
		if got := b.check(ctx, orderEvent(ask(fmt.Sprint("c", i), fmt.Sprint("maker-", i), 1, 1))); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	// An order already held is ignored without asking about its offer.
	verdict = nil
	b.Apply(mkt, orderEvent(ask("held", "maker-h", 1, 1)))
	n := calls.Load()
	if got := b.check(ctx, orderEvent(ask("held", "maker-h", 1, 1))); got != pubsub.ValidationIgnore {
		t.Errorf("held order: %v, want ignore", got)
	}
	if calls.Load() != n {
		t.Error("a held order's offer was checked again")
	}
	// One maker's flood is cut off at its burst.
	ignored := 0
	for i := range 3 * orderBurst {
		if b.check(ctx, orderEvent(ask(fmt.Sprint("flood", i), "maker-flood", 1, 1))) == pubsub.ValidationIgnore {
			ignored++
		}
	}
	if ignored < orderBurst {
		t.Fatalf("a flood of %d orders from one maker: only %d ignored", 3*orderBurst, ignored)
	}
}

// The loop sweeps on its own ticker however often it is kicked.
func TestLoopSweepsUnderKicks(t *testing.T) {
	clk := &clock{t: t0}
	var crossable atomic.Int32
	b := New(Config{Now: clk.now, SweepEvery: 20 * time.Millisecond, Hooks: Hooks{
		Crossable: func(string) { crossable.Add(1) },
	}})
	ctx, cancel := context.WithCancel(context.Background())
	b.Start(ctx)
	defer func() { cancel(); b.Wait() }()
	b.Apply(mkt, orderEvent(ask("a1", "maker-a", 1, 1))) // a foreign order kicks the loop
	clk.set(t0.Add(2 * time.Hour))
	deadline := time.Now().Add(10 * time.Second)
	for b.Holds(mkt, "USD", "a1") {
		if time.Now().After(deadline) {
			t.Fatal("the expired order was never swept under steady kicks")
		}
		b.Kick(mkt)
		time.Sleep(time.Millisecond)
	}
	if crossable.Load() == 0 {
		t.Fatal("kicks never reached the Crossable hook")
	}
}
