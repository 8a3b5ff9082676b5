package node_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/p2p"
)

// offsetClock is a node clock that a test moves forward.
type offsetClock struct{ off atomic.Int64 }

func (c *offsetClock) now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *offsetClock) advance(d time.Duration) { c.off.Add(int64(d)) }

// restingBid places a bid on n that rests (nothing crosses it) for ttl.
func restingBid(t *testing.T, ctx context.Context, n *node.Node, ttl string) node.OrderView {
	t.Helper()
	v, err := n.PlaceOrder(ctx, node.OrderRequest{Side: "bid", Market: h100, Count: 1, Price: "0.01", Duration: "1h", Expires: ttl})
	if err != nil || v.Status != "resting" {
		t.Fatalf("PlaceOrder(bid) = %+v, %v; want resting", v, err)
	}
	return v
}

// TestBookSweepUnderSteadyKicks: the sweep of expired orders runs on its
// interval even while the market is kicked far more often than that (a
// timer re-armed by every kick would never fire).
func TestBookSweepUnderSteadyKicks(t *testing.T) {
	var clk offsetClock
	_, buyer := startLeaseNet(t, node.WithClock(clk.now), node.WithSweepInterval(50*time.Millisecond))
	ctx := marketCtx(t)
	bid := restingBid(t, ctx, buyer, "10m")
	if !buyer.HoldsOrder(h100, "USD", bid.ID) {
		t.Fatalf("the replica does not hold the resting bid %s", bid.ID)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
				buyer.KickMarket(h100)
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	clk.advance(11 * time.Minute)
	waitFor(t, ctx, "the expired bid to be swept while the market is kicked", func() (bool, string) {
		return !buyer.HoldsOrder(h100, "USD", bid.ID), "still held"
	})
}

// TestSyncAnswerLeavesOutExpired: a late joiner's sync gets the open
// orders but not one that expired, even before the sweep removes it.
func TestSyncAnswerLeavesOutExpired(t *testing.T) {
	var clk offsetClock
	provider, buyer := startLeaseNet(t, node.WithClock(clk.now), node.WithSweepInterval(time.Hour))
	ctx := marketCtx(t)
	bid := restingBid(t, ctx, buyer, "10m")
	synced := func() []string {
		t.Helper()
		msgs, err := p2p.RequestSync(ctx, provider.Host(), buyer.PeerID(), h100)
		if err != nil {
			t.Fatalf("RequestSync: %v", err)
		}
		var ids []string
		for _, m := range msgs {
			if ev, err := p2p.DecodeBook(m, h100, time.Now()); err == nil && ev.Kind == p2p.KindOrder {
				ids = append(ids, ev.Order.ID)
			}
		}
		return ids
	}
	if ids := synced(); !slices.Contains(ids, bid.ID) {
		t.Fatalf("sync answer orders = %v, want the open bid %s", ids, bid.ID)
	}
	clk.advance(11 * time.Minute)
	if !buyer.HoldsOrder(h100, "USD", bid.ID) {
		t.Fatal("the bid was swept already; the test needs it unswept")
	}
	if ids := synced(); slices.Contains(ids, bid.ID) {
		t.Errorf("sync answer orders = %v, want no expired bid %s", ids, bid.ID)
	}
}
