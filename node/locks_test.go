package node_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/suanli/suanli/gpu"
	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/devnet"
	"github.com/suanli/suanli/p2p"
)

// offsetClock is a node clock that a test moves forward.
type offsetClock struct{ off atomic.Int64 }

func (c *offsetClock) now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *offsetClock) advance(d time.Duration) { c.off.Add(int64(d)) }

// restingBid places a bid on n that rests (nothing crosses it) for ttl.
func restingBid(t *testing.T, ctx context.Context, n *node.Node, ttl string) api.OrderView {
	t.Helper()
	v, err := n.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: h100, Count: 1, Price: "0.01", Duration: "1h", Expires: ttl})
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

// TestLeaseViewWhileWorkloadStops: a workload that ignores SIGTERM takes
// the whole stop grace to go; the provider's lease view answers during
// it (showing the lease ending), and the lease closes once the workload
// is killed, its exit recorded.
func TestLeaseViewWhileWorkloadStops(t *testing.T) {
	provider, buyer := startLeaseNet(t, node.WithExecutors("reserve", "process"))
	ctx := marketCtx(t)
	id := trade(t, ctx, provider, buyer, "60s", "sh", "-c", `trap "" TERM; echo ready; while :; do sleep 0.1; done`)
	waitFor(t, ctx, "the workload to run", func() (bool, string) {
		logs, err := buyer.Logs(ctx, id, 0)
		return err == nil && len(logs.Chunks) > 0, sprint(logs, err)
	})
	if _, err := buyer.CloseLease(ctx, id); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the provider's view of the lease while its workload stops", func() (bool, string) {
		v, err := provider.Lease(ctx, id)
		return err == nil && v.State == "ending", sprint(v, err)
	})
	v := waitLeaseClosed(t, ctx, provider, id)
	if v.Reason != "buyer-closed" || v.Exit == nil || v.Exit.Signal == "" {
		t.Errorf("provider's lease = %+v (exit %+v), want closed by the buyer, the workload killed by a signal", v, v.Exit)
	}
}

// slowAttest is a simulated machine whose attestation blocks, once
// turned slow, until released: an NVML attestation that takes long.
type slowAttest struct {
	gpu.Backend
	slow    atomic.Bool
	once    sync.Once
	entered chan struct{} // closed when a slow attestation starts
	release chan struct{}
}

func (b *slowAttest) Attest(nonce []byte, uuids ...string) ([]gpu.Evidence, error) {
	if b.slow.Load() {
		b.once.Do(func() { close(b.entered) })
		<-b.release
	}
	return b.Backend.Attest(nonce, uuids...)
}

func (b *slowAttest) SetBusy(uuid string, busy bool) {
	if s, ok := b.Backend.(gpu.Simulator); ok {
		s.SetBusy(uuid, busy)
	}
}

// TestTakeWhileSelfAttestSlow: a provider answering a take of its ask
// checks its own GPUs first when its verdict is stale; while that check
// hangs, the provider still answers another take (of its resting bid) and
// its API still places orders: neither waits for the attestation.
func TestTakeWhileSelfAttestSlow(t *testing.T) {
	ctx := marketCtx(t)
	net, err := devnet.Start(ctx, devnet.Config{Providers: 1, Buyers: 1, Dir: t.TempDir(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { net.Close() })
	other, buyer := net.Providers[0], net.Buyers[0]

	sim, err := gpu.OpenSim("dgxh100", 7)
	if err != nil {
		t.Fatal(err)
	}
	backend := &slowAttest{Backend: sim, entered: make(chan struct{}), release: make(chan struct{})}
	var clk offsetClock
	p, err := node.New(node.WithRepo(t.TempDir()), node.WithAutoInit(), node.WithListen("/ip4/127.0.0.1/tcp/0"),
		node.WithAPI("127.0.0.1:0"), node.WithLogger(quiet), node.WithOfferTTL(10*time.Minute), node.WithBillingInterval(time.Second),
		node.WithGPUBackend(backend), node.WithRegion("CN-GZ"), node.WithPrice("2.49", "USD"), node.WithBootstrap(other.Addrs()...),
		node.WithClock(clk.now), node.WithAttestWindow(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	var released sync.Once
	unblock := func() { released.Do(func() { close(backend.release) }) }
	t.Cleanup(unblock) // before p closes: Close waits for the take in flight
	if err := net.WaitPublished(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*node.Node{buyer, other} {
		if _, err := devnet.WaitFound(ctx, n, api.OfferQuery{}, 2); err != nil {
			t.Fatal(err)
		}
		if err := n.JoinMarket(ctx, h100); err != nil {
			t.Fatal(err)
		}
	}

	ask, err := p.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: h100, Count: 2, Price: "2.40", MinDuration: "1s"})
	if err != nil {
		t.Fatal(err)
	}
	bid := restingBid(t, ctx, p, "10m")
	waitFor(t, ctx, "the buyer to hold p's ask and the other provider p's bid", func() (bool, string) {
		return buyer.HoldsOrder(h100, "USD", ask.ID) && other.HoldsOrder(h100, "USD", bid.ID), "not yet"
	})

	// p's verdict on itself goes stale; its next check hangs.
	backend.slow.Store(true)
	clk.advance(2 * time.Second)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buyer.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: h100, Count: 1, Price: "2.40", Duration: "1h", IOC: true})
	}()
	t.Cleanup(wg.Wait)
	select {
	case <-backend.entered:
	case <-ctx.Done():
		t.Fatal("the take of p's ask did not start p's self-attestation")
	}

	// Another take, of p's bid by the other provider, is answered.
	sold, err := other.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: h100, Count: 1, Price: "0.01", MinDuration: "1s", IOC: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(sold.Fills) != 1 || sold.Fills[0].Buyer != p.PeerID().String() {
		t.Errorf("the other provider's ask = %+v, want it to take p's bid while p's attestation hangs", sold)
	}
	// p's API places an order (taking tradeMu) meanwhile.
	done := make(chan error, 1)
	go func() {
		_, err := p.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: h100, Count: 1, Price: "0.02", Duration: "1h", IOC: true})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("p.PlaceOrder while its attestation hangs: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("p.PlaceOrder waited for the hanging self-attestation")
	}
	select {
	case <-backend.release:
		t.Fatal("the attestation was released before the checks")
	default:
	}
}
