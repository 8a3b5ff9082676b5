package provider

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/gpu"
	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/internal/store"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

var errDown = errors.New("no peers")

// dht records what is published; fail makes it refuse.
type dht struct {
	mu      sync.Mutex
	envs    [][]byte
	markets [][]string
	fail    bool
	tries   int
}

func (d *dht) PublishOffer(_ context.Context, env []byte, markets []string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.tries++
	if d.fail {
		return errDown
	}
	d.envs, d.markets = append(d.envs, env), append(d.markets, markets)
	return nil
}

func (d *dht) count() (published, tries int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.envs), d.tries
}

// fakeClock stands at now; each wait on it is a channel the test fires.
type fakeClock struct {
	now   time.Time
	mu    sync.Mutex
	waits []chan time.Time
	durs  []time.Duration
}

func (c *fakeClock) Now() time.Time { return c.now }

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	c.waits, c.durs = append(c.waits, ch), append(c.durs, d)
	return ch
}

// fireLast ends the latest wait and says how long it was.
func (c *fakeClock) fireLast() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waits[len(c.waits)-1] <- c.now
	return c.durs[len(c.durs)-1]
}

type rig struct {
	p      *Provider
	dht    *dht
	store  *store.Store
	self   peer.ID
	clock  *fakeClock
	joined []string
	// refreshed is the markets of each Hooks.Republished call.
	refreshed [][]string
}

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func newRig(t *testing.T, model string) *rig {
	t.Helper()
	st, err := store.Open(t.TempDir(), store.Options{Logger: quiet(), Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	self, _ := peer.IDFromPrivateKey(k)
	r := &rig{dht: &dht{}, store: st, self: self, clock: &fakeClock{now: t0}}
	var gpus gpu.Backend
	if model != "" {
		if gpus, err = gpu.OpenSim(model, 1); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { gpus.Close() })
	}
	r.p = New(Config{Self: self, Key: k, GPUs: gpus, NoGPU: errors.New("buyer only"), Store: st, DHT: r.dht, Clock: r.clock, Log: quiet(),
		OfferTTL: time.Hour, Region: "CN-GZ", Price: market.Money{Micros: 2_500_000, Currency: "USD"}, BillingInterval: time.Minute,
		Hooks: Hooks{
			Addrs:       func() []string { return []string{"/ip4/127.0.0.1/tcp/4001/p2p/" + self.String()} },
			Isolation:   func() proto.IsolationLevel { return proto.IsolationLevel(3) },
			Resources:   func() Resources { return Resources{MilliCPUsPerGPU: 4000, MemoryPerGPU: 1 << 30, HostMemory: 8 << 30} },
			JoinMarket:  func(_ context.Context, mkt string) error { r.joined = append(r.joined, mkt); return nil },
			Republished: func(_ context.Context, mkts []string) { r.refreshed = append(r.refreshed, mkts) },
		}})
	return r
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// offer opens the i-th offer published, as any peer would.
func (r *rig) offer(t *testing.T, i int) *proto.Offer {
	t.Helper()
	o, from, err := p2p.OpenOffer(r.dht.envs[i], t0)
	if err != nil || from != r.self {
		t.Fatalf("offer %d: from %s, %v", i, from, err)
	}
	return o
}

// TestPublishOffer: the offer published is sealed by the provider, lists
// every GPU with what each is sold with, marks the GPUs a lease holds
// with the lease's end, and its seq grows; the first offer joins its
// markets, later ones do not.
func TestPublishOffer(t *testing.T) {
	r := newRig(t, "dgxa100")
	ctx := t.Context()
	if err := r.p.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	o := r.offer(t, 0)
	if len(o.Gpus) != 8 || o.Region != "CN-GZ" || o.Pricing.OnDemandMicros != 2_500_000 || o.Host.MilliCpusPerGpu != 4000 ||
		o.Isolation != 3 || len(o.Addrs) != 1 || o.Terms.BillingIncrementS != 60 || o.ExpiresUnixMs != t0.Add(time.Hour).UnixMilli() {
		t.Fatalf("offer = %v", o)
	}
	if r.p.Published().GetSeq() != o.Seq || !slices.Equal(r.joined, r.dht.markets[0]) || len(r.joined) != 1 {
		t.Errorf("published seq %d (offer %d), joined %v, markets %v", r.p.Published().GetSeq(), o.Seq, r.joined, r.dht.markets[0])
	}
	held := o.Gpus[2].Uuid
	terms := &proto.Lease{Id: "lease-1", StartUnixMs: t0.UnixMilli(), DurationS: 7200}
	if err := r.store.PutLease(terms); err != nil {
		t.Fatal(err)
	}
	if err := r.store.ReserveGPUs([]string{held}, "lease-1", t0.Add(3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := r.p.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	o2 := r.offer(t, 1)
	if o2.Seq <= o.Seq || len(r.joined) != 1 {
		t.Errorf("second offer: seq %d after %d, joined %v; want a higher seq, no new join", o2.Seq, o.Seq, r.joined)
	}
	for _, g := range o2.Gpus {
		want := int64(0)
		if g.Uuid == held {
			want = t0.Add(2 * time.Hour).UnixMilli() // the lease's end, not the hold's
		}
		if g.LeasedUntilUnixMs != want {
			t.Errorf("GPU %s leased until %d, want %d", g.Uuid, g.LeasedUntilUnixMs, want)
		}
	}
}

// TestRepublishRefreshesBooks: the books' copies of the offer are
// refreshed (Hooks.Republished, with the offer's markets) by a republish
// once half a TTL has passed since the first offer or the last refresh,
// and not by the first offer or the republishes in between.
func TestRepublishRefreshesBooks(t *testing.T) {
	r := newRig(t, "dgxa100")
	ctx := t.Context()
	for i, c := range []struct {
		at      time.Duration // after t0; the rig's TTL is an hour
		refresh bool
	}{{0, false}, {20 * time.Minute, false}, {40 * time.Minute, true}, {41 * time.Minute, false}, {60 * time.Minute, false}, {70 * time.Minute, true}} {
		r.clock.now = t0.Add(c.at)
		before := len(r.refreshed)
		if err := r.p.Publish(ctx); err != nil {
			t.Fatal(err)
		}
		if got := len(r.refreshed) > before; got != c.refresh {
			t.Errorf("publish %d at t0+%s refreshed the books: %v, want %v", i, c.at, got, c.refresh)
		}
		if c.refresh && !slices.Equal(r.refreshed[len(r.refreshed)-1], r.dht.markets[i]) {
			t.Errorf("refreshed %v, want the offer's markets %v", r.refreshed[len(r.refreshed)-1], r.dht.markets[i])
		}
	}
}

// TestPublishCarriesEvidence: a confidential-computing machine's offer
// carries its GPUs' evidence.
func TestPublishCarriesEvidence(t *testing.T) {
	r := newRig(t, "dgxh100")
	if err := r.p.Publish(t.Context()); err != nil {
		t.Fatal(err)
	}
	o := r.offer(t, 0)
	if o.Attestation != proto.AttestationLevel_ATTESTATION_LEVEL_CC_EVIDENCE || len(o.Certs) == 0 || o.Gpus[0].Evidence == nil {
		t.Errorf("attestation %v, %d certs, first GPU evidence %v; want CC evidence", o.Attestation, len(o.Certs), o.Gpus[0].Evidence)
	}
}

// TestPublishFailures: a buyer has nothing to publish; a DHT that refuses
// leaves no offer published and joins nothing.
func TestPublishFailures(t *testing.T) {
	if err := newRig(t, "").p.Publish(t.Context()); !errors.Is(err, api.ErrNoGPUs) {
		t.Errorf("buyer Publish = %v, want ErrNoGPUs", err)
	}
	r := newRig(t, "dgxa100")
	r.dht.fail = true
	if err := r.p.Publish(t.Context()); !errors.Is(err, errDown) || r.p.Published() != nil || len(r.joined) != 0 {
		t.Errorf("Publish = %v, published %v, joined %v; want the DHT's error, nothing", err, r.p.Published(), r.joined)
	}
}

// waitFor polls cond to a deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRunRepublishes: Run publishes at once, again when capacity changes,
// retries a failure after a backoff that doubles, and republishes at a
// third of the TTL once it succeeds.
func TestRunRepublishes(t *testing.T) {
	r := newRig(t, "dgxa100")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { r.p.Run(ctx, nil); close(done) }()
	waitFor(t, "the first offer", func() bool { n, _ := r.dht.count(); return n == 1 })
	r.p.CapacityChanged()
	waitFor(t, "the offer after a capacity change", func() bool { n, _ := r.dht.count(); return n == 2 })
	r.dht.mu.Lock()
	r.dht.fail = true
	r.dht.mu.Unlock()
	r.p.CapacityChanged()
	waitFor(t, "a failed try", func() bool { _, tries := r.dht.count(); return tries == 3 })
	waitFor(t, "the backoff", func() bool { r.clock.mu.Lock(); defer r.clock.mu.Unlock(); return len(r.clock.waits) == 3 })
	if d := r.clock.fireLast(); d != time.Second {
		t.Errorf("first backoff %s, want 1s", d)
	}
	waitFor(t, "a second failed try", func() bool { _, tries := r.dht.count(); return tries == 4 })
	waitFor(t, "the next backoff", func() bool { r.clock.mu.Lock(); defer r.clock.mu.Unlock(); return len(r.clock.waits) == 4 })
	r.dht.mu.Lock()
	r.dht.fail = false
	r.dht.mu.Unlock()
	if d := r.clock.fireLast(); d != 2*time.Second {
		t.Errorf("second backoff %s, want 2s", d)
	}
	waitFor(t, "the offer after the failures", func() bool { n, _ := r.dht.count(); return n == 3 })
	waitFor(t, "the republish wait", func() bool { r.clock.mu.Lock(); defer r.clock.mu.Unlock(); return len(r.clock.waits) == 5 })
	if d := r.clock.fireLast(); d != 20*time.Minute {
		t.Errorf("wait after success %s, want a third of the TTL", d)
	}
	waitFor(t, "the timed republish", func() bool { n, _ := r.dht.count(); return n == 4 })
	cancel()
	<-done
}

// TestCalendar: a forward block makes its GPU busy over its span only
// (half-open), and a reserved ask is priced with the discount its
// minimum duration earns.
func TestCalendar(t *testing.T) {
	r := newRig(t, "dgxa100")
	if _, err := r.p.FreeGPUsFor("nvidia-a100-sxm4-80gb", t0, t0.Add(time.Hour)); !errors.Is(err, api.ErrNoGPUs) {
		t.Errorf("before any offer: %v, want ErrNoGPUs", err)
	}
	if err := r.p.Publish(t.Context()); err != nil {
		t.Fatal(err)
	}
	o := r.p.Published()
	mkt, blocked := o.Gpus[0].Market, o.Gpus[0].Uuid
	from, end := t0.Add(24*time.Hour), t0.Add(48*time.Hour)
	if err := r.store.ReserveBlock([]string{blocked}, "block-1", from, end); err != nil {
		t.Fatal(err)
	}
	if err := r.store.ReserveBlock([]string{blocked}, "block-2", from.Add(time.Hour), end.Add(time.Hour)); err == nil {
		t.Error("an overlapping block of the same GPU was reserved")
	}
	for _, c := range []struct {
		from, end time.Time
		free      int
	}{
		{t0, from, 8}, // ends as the block starts
		{from.Add(-time.Hour), from.Add(time.Hour), 7}, // overlaps its start
		{from.Add(time.Hour), from.Add(2 * time.Hour), 7},
		{end, end.Add(time.Hour), 8}, // starts as it ends
	} {
		free, err := r.p.FreeGPUsFor(mkt, c.from, c.end)
		if err != nil || len(free) != c.free || c.free == 7 && slices.Contains(free, blocked) {
			t.Errorf("free over [%s, %s) = %d GPUs, %v; want %d", c.from.Sub(t0), c.end.Sub(t0), len(free), err, c.free)
		}
	}
	// Now, the block is ahead: every GPU is free but one a lease holds now.
	held := o.Gpus[1].Uuid
	if err := r.store.ReserveGPUs([]string{held}, "lease-now", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if free, err := r.p.FreeGPUs(mkt); err != nil || len(free) != 7 || slices.Contains(free, held) {
		t.Errorf("free now = %v, %v; want 7, not %s", free, err, held)
	}
	if free, err := r.p.FreeFor(mkt, t0, t0.Add(time.Hour), t0); err != nil || len(free) != 7 {
		t.Errorf("FreeFor a lease starting now = %d, %v; want 7", len(free), err)
	}
	if free, err := r.p.FreeFor(mkt, from, end, t0); err != nil || len(free) != 7 || slices.Contains(free, blocked) {
		t.Errorf("FreeFor the block's span = %v, %v; want 7, not %s", free, err, blocked)
	}
	if free, _ := r.p.FreeGPUsFor("nvidia-h100-sxm5-80gb", t0, from); len(free) != 0 {
		t.Errorf("another market: %d free", len(free))
	}
	for _, c := range []struct{ min, want string }{{"", "2.50"}, {"168h", "2.25"}, {"720h", "2.00"}} {
		if p, err := r.p.ReservedAskPrice(c.min); err != nil || p != c.want {
			t.Errorf("ReservedAskPrice(%q) = %s, %v; want %s", c.min, p, err, c.want)
		}
	}
	if _, err := r.p.ReservedAskPrice("soon"); !errors.Is(err, api.ErrBadRequest) {
		t.Errorf("ReservedAskPrice(soon) = %v, want bad request", err)
	}
}
