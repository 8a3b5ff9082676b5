package market

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/suanli/suanli/proto"
	gproto "google.golang.org/protobuf/proto"
)

var testLeaseStart = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// testTerms is a one-hour spot lease of two GPUs at 2.00 USD per GPU-hour,
// billed every ten minutes: six windows.
func testTerms() *proto.Lease {
	return &proto.Lease{
		Id: "lease-1", Provider: []byte("provider-p"), Buyer: []byte("buyer-b"),
		Gpus: []string{"GPU-aaaa", "GPU-bbbb"}, PriceMicros: 2_000_000, Currency: "USD",
		LeaseType: proto.LeaseType_LEASE_TYPE_SPOT, DurationS: 3600, BillingIntervalS: 600,
		StartUnixMs: testLeaseStart.UnixMilli(), Market: "nvidia-h100-sxm5-80gb",
	}
}

func withTerms(t *proto.Lease, f func(*proto.Lease)) *proto.Lease { f(t); return t }

// hashOf stands in for proto.ReceiptHash of a sealed envelope.
func hashOf(r *proto.Receipt) []byte {
	b, err := gproto.MarshalOptions{Deterministic: true}.Marshal(r)
	if err != nil {
		panic(err)
	}
	sum := sha256.Sum256(b)
	return sum[:]
}

// rebill recomputes r's GPU time and money from its usage, as an honest
// provider would after prev.
func rebill(terms *proto.Lease, prev *ReceiptState, r *proto.Receipt) *proto.Receipt {
	var p ReceiptState
	if prev != nil {
		p = *prev
	}
	r.GpuMs = 0
	for _, u := range r.Usage {
		r.GpuMs += u.GpuMs
	}
	r.CumulativeGpuMs = p.GPUMillis + r.GpuMs
	total, err := ReceiptTotal(terms, p.Cumulative, p.GPUMillis, r.GpuMs, r.WindowStartUnixMs)
	if err != nil {
		panic(err)
	}
	r.AmountMicros = total - p.Cumulative
	r.CumulativeMicros = total
	return r
}

// nextReceipt is the honest receipt after prev (nil: the first) for the
// window ending at end, every GPU held throughout.
func nextReceipt(terms *proto.Lease, prev *ReceiptState, end int64) *proto.Receipt {
	r := &proto.Receipt{
		LeaseId: terms.Id, Seq: 1, WindowStartUnixMs: terms.StartUnixMs, WindowEndUnixMs: end,
		Provider: terms.Provider, CreatedUnixMs: end + 1500,
	}
	if prev != nil && prev.Seq > 0 {
		r.Seq, r.WindowStartUnixMs, r.PrevHash = prev.Seq+1, prev.WindowEndUnixMs, prev.Hash
	}
	for i, g := range terms.Gpus {
		r.Usage = append(r.Usage, &proto.GPUUsage{
			Uuid: g, GpuMs: uint64(end - r.WindowStartUnixMs), MeanUtilizationPermille: uint32(900 + i%100),
			MaxMemoryUsedBytes: 70 << 30, EnergyMj: 420_000_000,
		})
	}
	return rebill(terms, prev, r)
}

// testChain is n honest receipts on the billing grid, each countersigned.
func testChain(terms *proto.Lease, n int) ([]SignedReceiptDecoded, []ReceiptState) {
	var chain []SignedReceiptDecoded
	states := []ReceiptState{{}}
	for i := range n {
		prev := &states[i]
		_, end, _ := nextWindowMs(terms, prevEndMs(terms, prev))
		r := nextReceipt(terms, prev, end)
		h := hashOf(r)
		chain = append(chain, SignedReceiptDecoded{Receipt: r, Hash: h, Countersign: &proto.Countersign{
			LeaseId: terms.Id, Seq: r.Seq, ReceiptHash: h, Buyer: terms.Buyer, CreatedUnixMs: r.CreatedUnixMs + 500,
		}})
		states = append(states, StateOf(r, h))
	}
	return chain, states
}

func cloneReceipt(r *proto.Receipt) *proto.Receipt { return gproto.Clone(r).(*proto.Receipt) }

func TestCharge(t *testing.T) {
	tests := []struct {
		price int64
		gpuMs uint64
		want  int64
		err   error
	}{
		{2_000_000, 3_600_000, 2_000_000, nil}, // one GPU-hour
		{2_000_000, 60_000, 33_334, nil},       // a GPU-minute: 33,333.3 rounds up
		{2_000_000, 0, 0, nil},                 // nothing held, nothing owed
		{1, 1, 1, nil},                         // the least charge is one micro-unit
		{3, 1_200_000, 1, nil},                 // exactly 1
		{3, 1_200_001, 2, nil},                 // a hair over rounds up
		{1_800_000, 2_000, 1_000, nil},         // exact
		{1_800_000, 2_001, 1_001, nil},         // 1,000.5 rounds up
		{0, 3_600_000, 0, nil},                 // free
		{math.MaxInt64, math.MaxUint64, 0, ErrReceiptAmount},
		{-1, 1, 0, ErrReceiptAmount},
	}
	for _, tt := range tests {
		got, err := Charge(tt.price, tt.gpuMs)
		if !errors.Is(err, tt.err) || got != tt.want {
			t.Errorf("Charge(%d, %d) = %d, %v, want %d, %v", tt.price, tt.gpuMs, got, err, tt.want, tt.err)
		}
	}
}

// TestChargeExact checks Charge against big-integer ceiling division, over
// random and extreme prices and GPU times.
func TestChargeExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	check := func(price int64, gpuMs uint64) {
		num := new(big.Int).Mul(big.NewInt(price), new(big.Int).SetUint64(gpuMs))
		num.Add(num, big.NewInt(MillisPerHour-1))
		want := num.Div(num, big.NewInt(MillisPerHour))
		got, err := Charge(price, gpuMs)
		if !want.IsInt64() {
			if !errors.Is(err, ErrReceiptAmount) {
				t.Errorf("Charge(%d, %d) = %d, %v, want overflow", price, gpuMs, got, err)
			}
			return
		}
		if err != nil || got != want.Int64() {
			t.Errorf("Charge(%d, %d) = %d, %v, want %s", price, gpuMs, got, err, want)
		}
	}
	maxLeaseMs := uint64(MaxOrderQuantity) * uint64(MaxLeaseDuration/time.Millisecond)
	check(MaxPriceMicros, maxLeaseMs) // the largest lease fits in int64
	check(math.MaxInt64, math.MaxUint64)
	check(math.MaxInt64, 3_600_000)
	check(math.MaxInt64, 3_600_001)
	for range 10_000 {
		check(rng.Int64N(MaxPriceMicros+1), rng.Uint64N(maxLeaseMs+1))
		check(rng.Int64(), rng.Uint64())
	}
}

// TestBillingRoundsTotal shows the rule rounds the running total, not each
// window: an hour of one GPU billed minute by minute costs exactly the
// hourly price, where rounding each window up would cost 40 micro-units more.
func TestBillingRoundsTotal(t *testing.T) {
	terms := withTerms(testTerms(), func(l *proto.Lease) { l.Gpus = l.Gpus[:1]; l.BillingIntervalS = 60 })
	var prev *ReceiptState
	var sum, naive int64
	for i := range 60 {
		r := nextReceipt(terms, prev, terms.StartUnixMs+int64(i+1)*60_000)
		h := hashOf(r)
		if err := VerifyNext(terms, prev, r, h, testLeaseStart.Add(2*time.Hour)); err != nil {
			t.Fatalf("window %d: %v", i+1, err)
		}
		perWindow, _ := Charge(terms.PriceMicros, r.GpuMs)
		if r.AmountMicros != perWindow && r.AmountMicros != perWindow-1 {
			t.Errorf("window %d amount = %d, want %d or one less", i+1, r.AmountMicros, perWindow)
		}
		sum += r.AmountMicros
		naive += perWindow
		st := StateOf(r, h)
		prev = &st
	}
	if sum != 2_000_000 || prev.Cumulative != 2_000_000 {
		t.Errorf("an hour billed by the minute = %d (cumulative %d), want 2000000", sum, prev.Cumulative)
	}
	if naive != 2_000_040 {
		t.Errorf("rounding each window would bill %d, want 2000040", naive)
	}
}

func TestVerifyNext(t *testing.T) {
	terms := testTerms()
	chain, states := testChain(terms, 6)
	s, e := terms.StartUnixMs, leaseEndMs(terms)
	later := testLeaseStart.Add(3 * time.Hour)
	// The next receipt after k honest ones, changed by mut.
	next := func(k int, mut func(r *proto.Receipt)) *proto.Receipt {
		r := cloneReceipt(chain[k].Receipt)
		if mut != nil {
			mut(r)
		}
		return r
	}
	// An early close: the third window ends off the grid, at 25 minutes.
	early := nextReceipt(terms, &states[2], s+25*60_000)
	earlyState := StateOf(early, hashOf(early))

	tests := []struct {
		name string
		k    int           // honest receipts before (prev = states[k])
		prev *ReceiptState // instead of states[k], when set
		r    *proto.Receipt
		hash []byte // hashOf(r) when nil
		now  time.Time
		err  error
	}{
		{name: "first", k: 0, r: next(0, nil)},
		{name: "third", k: 2, r: next(2, nil)},
		{name: "last", k: 5, r: next(5, nil)},
		{name: "GPU down part of the window bills less", k: 2, r: next(2, func(r *proto.Receipt) {
			r.Usage[0].GpuMs = 123_456
			rebill(terms, &states[2], r)
		})},
		{name: "early close: final window off the grid", k: 2, r: early},

		// Sequence.
		{name: "replayed", k: 3, r: chain[2].Receipt, err: ErrReceiptSeq},
		{name: "stale (out of order)", k: 3, r: chain[1].Receipt, err: ErrReceiptSeq},
		{name: "gap-leaving", k: 3, r: chain[4].Receipt, err: ErrReceiptSeq},
		{name: "seq zero", k: 0, r: next(0, func(r *proto.Receipt) { r.Seq = 0 }), err: ErrReceiptSeq},
		{name: "equivocation", k: 3, r: next(2, func(r *proto.Receipt) { r.Usage[1].EnergyMj++ }), err: ErrEquivocation},

		// Chain.
		{name: "broken link", k: 3, r: next(3, func(r *proto.Receipt) { r.PrevHash = bytes.Clone(r.PrevHash); r.PrevHash[0] ^= 1 }), err: ErrReceiptChain},
		{name: "link missing", k: 3, r: next(3, func(r *proto.Receipt) { r.PrevHash = nil }), err: ErrReceiptChain},
		{name: "first with a link", k: 0, r: next(0, func(r *proto.Receipt) { r.PrevHash = chain[0].Hash }), err: ErrReceiptChain},

		// Window.
		{name: "window gap", k: 3, r: next(3, func(r *proto.Receipt) { r.WindowStartUnixMs += 1000 }), err: ErrReceiptWindow},
		{name: "window overlap", k: 3, r: next(3, func(r *proto.Receipt) { r.WindowStartUnixMs -= 1000 }), err: ErrReceiptWindow},
		{name: "first window after the lease start", k: 0, r: next(0, func(r *proto.Receipt) { r.WindowStartUnixMs = s + 1 }), err: ErrReceiptWindow},
		{name: "first window before the lease start", k: 0, r: next(0, func(r *proto.Receipt) { r.WindowStartUnixMs = s - 600_000 }), err: ErrReceiptWindow},
		{name: "empty window", k: 3, r: next(3, func(r *proto.Receipt) { r.WindowEndUnixMs = r.WindowStartUnixMs }), err: ErrReceiptWindow},
		{name: "inverted window", k: 3, r: next(3, func(r *proto.Receipt) { r.WindowEndUnixMs = r.WindowStartUnixMs - 1 }), err: ErrReceiptWindow},
		{name: "window past the billing grid", k: 3, r: next(3, func(r *proto.Receipt) { r.WindowEndUnixMs += 1 }), err: ErrReceiptWindow},
		{name: "window past the lease end", k: 5, r: next(5, func(r *proto.Receipt) { r.WindowEndUnixMs = e + 60_000 }), err: ErrReceiptWindow},
		{name: "window after the lease", k: 6, r: nextReceipt(terms, &states[6], e+600_000), err: ErrReceiptWindow},
		{name: "window after an early close", k: 3, prev: &earlyState, r: nextReceipt(terms, &earlyState, s+30*60_000), err: ErrReceiptWindow},
		{name: "window in the future", k: 3, now: time.UnixMilli(chain[3].Receipt.WindowEndUnixMs).Add(-MaxClockSkew - time.Millisecond), r: next(3, nil), err: ErrReceiptWindow},
		{name: "signed in the future", k: 3, now: time.UnixMilli(chain[3].Receipt.WindowEndUnixMs), r: next(3, func(r *proto.Receipt) { r.CreatedUnixMs += int64(MaxClockSkew / time.Millisecond) }), err: ErrReceiptWindow},
		{name: "signed before the window ended", k: 3, r: next(3, func(r *proto.Receipt) { r.CreatedUnixMs = r.WindowEndUnixMs - 1 }), err: ErrReceiptWindow},

		// GPUs and usage.
		{name: "wrong GPU", k: 3, r: next(3, func(r *proto.Receipt) { r.Usage[1].Uuid = "GPU-cccc" }), err: ErrReceiptGPUs},
		{name: "missing GPU", k: 3, r: next(3, func(r *proto.Receipt) { r.Usage = r.Usage[:1]; rebill(terms, &states[3], r) }), err: ErrReceiptGPUs},
		{name: "extra GPU", k: 3, r: next(3, func(r *proto.Receipt) {
			r.Usage = append(r.Usage, &proto.GPUUsage{Uuid: "GPU-cccc", GpuMs: 600_000})
			rebill(terms, &states[3], r)
		}), err: ErrReceiptGPUs},
		{name: "GPU listed twice", k: 3, r: next(3, func(r *proto.Receipt) { r.Usage[1].Uuid = r.Usage[0].Uuid }), err: ErrReceiptGPUs},
		{name: "GPUs out of order", k: 3, r: next(3, func(r *proto.Receipt) { r.Usage[0], r.Usage[1] = r.Usage[1], r.Usage[0] }), err: ErrReceiptGPUs},
		{name: "utilization over 1000‰", k: 3, r: next(3, func(r *proto.Receipt) { r.Usage[0].MeanUtilizationPermille = 1001 }), err: ErrReceiptUsage},
		{name: "GPU held longer than the window", k: 3, r: next(3, func(r *proto.Receipt) { r.Usage[0].GpuMs++; rebill(terms, &states[3], r) }), err: ErrReceiptUsage},
		{name: "usage does not sum to gpu_ms", k: 3, r: next(3, func(r *proto.Receipt) { r.GpuMs-- }), err: ErrReceiptUsage},
		{name: "nil usage", k: 3, r: next(3, func(r *proto.Receipt) { r.Usage[0] = nil }), err: ErrReceiptSchema},

		// Money.
		{name: "over-charging", k: 3, r: next(3, func(r *proto.Receipt) { r.AmountMicros++; r.CumulativeMicros++ }), err: ErrReceiptAmount},
		{name: "under-charging", k: 3, r: next(3, func(r *proto.Receipt) { r.AmountMicros--; r.CumulativeMicros-- }), err: ErrReceiptAmount},
		{name: "billing a down GPU in full", k: 3, r: next(3, func(r *proto.Receipt) {
			r.Usage[0].GpuMs -= 60_000
			r.GpuMs -= 60_000
			r.CumulativeGpuMs -= 60_000
		}), err: ErrReceiptAmount},
		{name: "negative amount", k: 3, r: next(3, func(r *proto.Receipt) { r.CumulativeMicros -= 2 * r.AmountMicros; r.AmountMicros = -r.AmountMicros }), err: ErrReceiptAmount},
		{name: "cumulative amount wrong", k: 3, r: next(3, func(r *proto.Receipt) { r.CumulativeMicros++ }), err: ErrReceiptCumulative},
		{name: "cumulative GPU time wrong", k: 3, r: next(3, func(r *proto.Receipt) { r.CumulativeGpuMs += 1000 }), err: ErrReceiptCumulative},

		// Identity and inputs.
		{name: "other lease", k: 3, r: next(3, func(r *proto.Receipt) { r.LeaseId = "lease-2" }), err: ErrReceiptLease},
		{name: "other provider", k: 3, r: next(3, func(r *proto.Receipt) { r.Provider = []byte("provider-q") }), err: ErrReceiptLease},
		{name: "nil receipt", k: 3, r: nil, hash: chain[3].Hash, err: ErrReceiptSchema},
		{name: "hash not SHA-256", k: 3, r: next(3, nil), hash: []byte("short"), err: ErrReceiptSchema},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prev := &states[tt.k]
			if tt.prev != nil {
				prev = tt.prev
			}
			if tt.k == 0 && tt.prev == nil {
				prev = nil
			}
			h := tt.hash
			if h == nil {
				h = hashOf(tt.r)
			}
			now := tt.now
			if now.IsZero() {
				now = later
			}
			err := VerifyNext(terms, prev, tt.r, h, now)
			t.Logf("VerifyNext = %v", err)
			if !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
				t.Fatalf("VerifyNext = %v, want %v", err, tt.err)
			}
			if tt.err != nil && Reason(err) == "other" {
				t.Errorf("Reason(%v) = other", err)
			}
		})
	}

	t.Run("bad terms", func(t *testing.T) {
		for _, mut := range []func(*proto.Lease){
			func(l *proto.Lease) { l.BillingIntervalS = 0 },
			func(l *proto.Lease) { l.DurationS = 0 },
			func(l *proto.Lease) { l.PriceMicros = 0 },
			func(l *proto.Lease) { l.Gpus = nil },
			func(l *proto.Lease) { l.StartUnixMs = 0 },
		} {
			bad := withTerms(testTerms(), mut)
			if err := VerifyNext(bad, nil, chain[0].Receipt, chain[0].Hash, later); !errors.Is(err, ErrLeaseTerms) {
				t.Errorf("VerifyNext(%v) = %v, want ErrLeaseTerms", bad, err)
			}
		}
		if err := VerifyNext(nil, nil, chain[0].Receipt, chain[0].Hash, later); !errors.Is(err, ErrLeaseTerms) {
			t.Errorf("VerifyNext(nil terms) = %v, want ErrLeaseTerms", err)
		}
	})

	t.Run("equivocation evidence", func(t *testing.T) {
		other := next(2, func(r *proto.Receipt) { r.CreatedUnixMs++ })
		err := VerifyNext(terms, &states[3], other, hashOf(other), later)
		var ev *Evidence
		if !errors.As(err, &ev) {
			t.Fatalf("VerifyNext = %v, want *Evidence", err)
		}
		if ev.LeaseID != terms.Id || ev.Seq != 3 || !bytes.Equal(ev.Provider, terms.Provider) ||
			bytes.Compare(ev.Hashes[0], ev.Hashes[1]) >= 0 ||
			!(bytes.Equal(ev.Hashes[0], chain[2].Hash) || bytes.Equal(ev.Hashes[1], chain[2].Hash)) {
			t.Errorf("evidence = %+v", ev)
		}
	})

	t.Run("duration not a multiple of the interval", func(t *testing.T) {
		odd := withTerms(testTerms(), func(l *proto.Lease) { l.DurationS = 1500 }) // 10 + 10 + 5 minutes
		_, st := testChain(odd, 2)
		last := nextReceipt(odd, &st[2], leaseEndMs(odd))
		if err := VerifyNext(odd, &st[2], last, hashOf(last), later); err != nil {
			t.Errorf("VerifyNext(short last window) = %v", err)
		}
		if w, ok := NextWindow(odd, &st[2]); !ok || w.End.UnixMilli() != leaseEndMs(odd) || w.Start.UnixMilli() != st[2].WindowEndUnixMs {
			t.Errorf("NextWindow = %v, %v, want the last 5 minutes", w, ok)
		}
		final := StateOf(last, hashOf(last))
		if w, ok := NextWindow(odd, &final); ok {
			t.Errorf("NextWindow(after the end) = %v, true", w)
		}
	})
}

func TestVerifyNextAllocs(t *testing.T) {
	terms := testTerms()
	chain, states := testChain(terms, 3)
	now := testLeaseStart.Add(time.Hour)
	allocs := testing.AllocsPerRun(100, func() {
		if err := VerifyNext(terms, &states[2], chain[2].Receipt, chain[2].Hash, now); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("VerifyNext allocates %v times, want 0", allocs)
	}
}

func TestVerifyCountersign(t *testing.T) {
	terms := testTerms()
	chain, _ := testChain(terms, 2)
	r, h := chain[1].Receipt, chain[1].Hash
	good := chain[1].Countersign
	mut := func(f func(c *proto.Countersign)) *proto.Countersign {
		c := gproto.Clone(good).(*proto.Countersign)
		f(c)
		return c
	}
	tests := []struct {
		name string
		c    *proto.Countersign
		err  error
	}{
		{"good", good, nil},
		{"missing", nil, ErrCountersign},
		{"other lease", mut(func(c *proto.Countersign) { c.LeaseId = "lease-2" }), ErrCountersign},
		{"other seq", mut(func(c *proto.Countersign) { c.Seq = 1 }), ErrCountersign},
		{"other receipt", mut(func(c *proto.Countersign) { c.ReceiptHash = chain[0].Hash }), ErrCountersign},
		{"not the buyer", mut(func(c *proto.Countersign) { c.Buyer = terms.Provider }), ErrCountersign},
	}
	for _, tt := range tests {
		if err := VerifyCountersign(terms, r, h, tt.c); !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
			t.Errorf("VerifyCountersign(%s) = %v, want %v", tt.name, err, tt.err)
		}
	}
}

func TestDetectEquivocation(t *testing.T) {
	terms := testTerms()
	chain, _ := testChain(terms, 2)
	a := chain[1]
	twin := cloneReceipt(a.Receipt)
	twin.Usage[0].MeanUtilizationPermille = 10
	b := SignedReceiptDecoded{Receipt: twin, Hash: hashOf(twin)}
	otherLease := cloneReceipt(twin)
	otherLease.LeaseId = "lease-2"
	otherProvider := cloneReceipt(twin)
	otherProvider.Provider = []byte("provider-q")
	tests := []struct {
		name string
		a, b SignedReceiptDecoded
		want bool
	}{
		{"same receipt", a, a, false},
		{"same receipt without its countersignature", a, SignedReceiptDecoded{Receipt: a.Receipt, Hash: a.Hash}, false},
		{"another seq", a, chain[0], false},
		{"two receipts for one seq", a, b, true},
		{"two receipts for one seq, reversed", b, a, true},
		{"another lease", a, SignedReceiptDecoded{Receipt: otherLease, Hash: hashOf(otherLease)}, false},
		{"another provider", a, SignedReceiptDecoded{Receipt: otherProvider, Hash: hashOf(otherProvider)}, false},
		{"missing", a, SignedReceiptDecoded{}, false},
	}
	for _, tt := range tests {
		err := DetectEquivocation(tt.a, tt.b)
		if got := errors.Is(err, ErrEquivocation); got != tt.want || (err != nil) != tt.want {
			t.Errorf("DetectEquivocation(%s) = %v, want equivocation %v", tt.name, err, tt.want)
		}
		var ev *Evidence
		if tt.want && (!errors.As(err, &ev) || ev.Seq != 2 || bytes.Compare(ev.Hashes[0], ev.Hashes[1]) >= 0) {
			t.Errorf("DetectEquivocation(%s) evidence = %+v", tt.name, ev)
		}
	}
	e1, e2 := DetectEquivocation(a, b), DetectEquivocation(b, a)
	if e1.Error() != e2.Error() {
		t.Errorf("evidence depends on argument order: %v vs %v", e1, e2)
	}
}

func TestVerifyChain(t *testing.T) {
	terms := testTerms()
	chain, states := testChain(terms, 6)
	sum, err := VerifyChain(terms, chain)
	if err != nil || sum.Last.Seq != 6 || sum.Countersigned.Seq != 6 || sum.Last.Cumulative != 4_000_000 {
		t.Fatalf("VerifyChain = %+v, %v, want 6 receipts countersigned, 4000000 owed", sum, err)
	}
	if !bytes.Equal(sum.Last.Hash, states[6].Hash) || sum.Last.GPUMillis != 2*3_600_000 {
		t.Errorf("VerifyChain last = %+v, want %+v", sum.Last, states[6])
	}

	// The buyer countersigned up to 4 (3 skipped); 5 and 6 wait.
	partial := append([]SignedReceiptDecoded(nil), chain...)
	partial[2].Countersign, partial[4].Countersign, partial[5].Countersign = nil, nil, nil
	if sum, err := VerifyChain(terms, partial); err != nil || sum.Countersigned.Seq != 4 || sum.Countersigned.Cumulative != states[4].Cumulative {
		t.Errorf("VerifyChain(partly countersigned) = %+v, %v, want countersigned to 4", sum, err)
	}
	if sum, err := VerifyChain(terms, nil); err != nil || sum.Last.Seq != 0 {
		t.Errorf("VerifyChain(empty) = %+v, %v", sum, err)
	}

	bad := append([]SignedReceiptDecoded(nil), chain...)
	bad[2] = SignedReceiptDecoded{Receipt: cloneReceipt(chain[2].Receipt)}
	bad[2].Receipt.AmountMicros++
	bad[2].Receipt.CumulativeMicros++
	bad[2].Hash = hashOf(bad[2].Receipt)
	if _, err := VerifyChain(terms, bad); !errors.Is(err, ErrReceiptAmount) || !strings.Contains(err.Error(), "receipt 3 of 6") {
		t.Errorf("VerifyChain(over-charged 3rd) = %v, want ErrReceiptAmount naming receipt 3", err)
	}
	swapped := append([]SignedReceiptDecoded(nil), chain...)
	swapped[1], swapped[2] = swapped[2], swapped[1]
	if _, err := VerifyChain(terms, swapped); !errors.Is(err, ErrReceiptSeq) {
		t.Errorf("VerifyChain(out of order) = %v, want ErrReceiptSeq", err)
	}
	forgedCS := append([]SignedReceiptDecoded(nil), chain...)
	forgedCS[3].Countersign = chain[2].Countersign
	if _, err := VerifyChain(terms, forgedCS); !errors.Is(err, ErrCountersign) {
		t.Errorf("VerifyChain(countersignature of another receipt) = %v, want ErrCountersign", err)
	}
	if _, err := VerifyChain(withTerms(testTerms(), func(l *proto.Lease) { l.Buyer = l.Provider }), chain); !errors.Is(err, ErrLeaseTerms) {
		t.Errorf("VerifyChain(self-lease) = %v, want ErrLeaseTerms", err)
	}
}

func TestValidateTerms(t *testing.T) {
	tests := []struct {
		name string
		mut  func(*proto.Lease)
		err  error
	}{
		{"good", func(*proto.Lease) {}, nil},
		{"no ID", func(l *proto.Lease) { l.Id = "" }, ErrLeaseTerms},
		{"no buyer", func(l *proto.Lease) { l.Buyer = nil }, ErrLeaseTerms},
		{"self-lease", func(l *proto.Lease) { l.Buyer = l.Provider }, ErrLeaseTerms},
		{"duplicate GPU", func(l *proto.Lease) { l.Gpus = []string{"GPU-a", "GPU-a"} }, ErrLeaseTerms},
		{"empty GPU", func(l *proto.Lease) { l.Gpus = []string{""} }, ErrLeaseTerms},
		{"too many GPUs", func(l *proto.Lease) { l.Gpus = make([]string, MaxOrderQuantity+1) }, ErrLeaseTerms},
		{"price too high", func(l *proto.Lease) { l.PriceMicros = MaxPriceMicros + 1 }, ErrLeaseTerms},
		{"unknown currency", func(l *proto.Lease) { l.Currency = "XXX" }, ErrUnknownCurrency},
		{"unknown lease type", func(l *proto.Lease) { l.LeaseType = 9 }, ErrLeaseTerms},
		{"too long", func(l *proto.Lease) { l.DurationS = int64(MaxLeaseDuration/time.Second) + 1 }, ErrLeaseTerms},
		{"no interval", func(l *proto.Lease) { l.BillingIntervalS = -1 }, ErrLeaseTerms},
	}
	for _, tt := range tests {
		if err := ValidateTerms(withTerms(testTerms(), tt.mut)); !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
			t.Errorf("ValidateTerms(%s) = %v, want %v", tt.name, err, tt.err)
		}
	}
}

func TestReceiptReasons(t *testing.T) {
	for err, want := range map[error]string{
		ErrReceiptSeq:                      "receipt-seq",
		ErrReceiptAmount:                   "receipt-amount",
		&Evidence{}:                        "equivocation",
		ErrBadTransition:                   "bad-transition",
		ErrLedgerConflict:                  "ledger-conflict",
		ErrOrderPrice:                      "bad-price", // the order reasons still come first
		errors.Join(ErrReceiptWindow, nil): "receipt-window",
	} {
		if got := Reason(err); got != want {
			t.Errorf("Reason(%v) = %q, want %q", err, got, want)
		}
	}
}

// FuzzVerifyNext decodes a receipt from the input — on its own, or merged
// over the honest next receipt so that most inputs come close to valid —
// and checks it against fixed terms, first or after two honest receipts: it
// must not panic, every refusal must have a reason, and whatever it accepts
// must follow the billing rule.
func FuzzVerifyNext(f *testing.F) {
	terms := testTerms()
	chain, states := testChain(terms, 3)
	for _, e := range chain {
		b, _ := gproto.Marshal(e.Receipt)
		f.Add(b, false, false)
		f.Add(b, true, false)
	}
	odd := cloneReceipt(chain[2].Receipt)
	odd.Usage[0].GpuMs, odd.WindowEndUnixMs = math.MaxUint64, math.MinInt64
	b, _ := gproto.Marshal(odd)
	f.Add(b, true, false)
	f.Add([]byte{}, true, true)                       // the honest receipt
	f.Add([]byte{0x28, 0x80, 0xb5, 0x18}, true, true) // gpu_ms = 400000
	f.Add([]byte{0x10, 0x01}, false, false)
	now := testLeaseStart.Add(2 * time.Hour)
	f.Fuzz(func(t *testing.T, data []byte, second, merge bool) {
		var prev *ReceiptState
		r := &proto.Receipt{}
		if second {
			prev = &states[2]
		}
		if merge {
			r = cloneReceipt(chain[0].Receipt)
			if second {
				r = cloneReceipt(chain[2].Receipt)
			}
		}
		if (gproto.UnmarshalOptions{Merge: true}).Unmarshal(data, r) != nil {
			return
		}
		err := VerifyNext(terms, prev, r, hashOf(r), now)
		if err != nil {
			if Reason(err) == "other" {
				t.Fatalf("VerifyNext = %v, an error without a reason", err)
			}
			return
		}
		var p ReceiptState
		if prev != nil {
			p = *prev
		}
		total, _ := Charge(terms.PriceMicros, r.CumulativeGpuMs)
		switch {
		case r.Seq != p.Seq+1:
			t.Fatalf("accepted seq %d after %d", r.Seq, p.Seq)
		case r.CumulativeMicros != total || r.AmountMicros < 0 || r.AmountMicros != total-p.Cumulative:
			t.Fatalf("accepted amount %d, cumulative %d for %d GPU-ms", r.AmountMicros, r.CumulativeMicros, r.CumulativeGpuMs)
		case r.WindowStartUnixMs != prevEndMs(terms, prev) || r.WindowEndUnixMs > leaseEndMs(terms) || r.WindowEndUnixMs <= r.WindowStartUnixMs:
			t.Fatalf("accepted window [%d, %d)", r.WindowStartUnixMs, r.WindowEndUnixMs)
		case r.GpuMs > uint64(len(terms.Gpus))*uint64(r.WindowEndUnixMs-r.WindowStartUnixMs):
			t.Fatalf("accepted %d GPU-ms in a %d ms window", r.GpuMs, r.WindowEndUnixMs-r.WindowStartUnixMs)
		}
	})
}

func benchmarkVerifyNext(b *testing.B, gpus int) {
	terms := testTerms()
	terms.Gpus = nil
	for i := range gpus {
		terms.Gpus = append(terms.Gpus, "GPU-"+strings.Repeat("0", 30)+string(rune('a'+i%26))+string(rune('a'+i/26%26))+string(rune('a'+i/676)))
	}
	chain, states := testChain(terms, 3)
	now := testLeaseStart.Add(time.Hour)
	b.ReportAllocs()
	for b.Loop() {
		if err := VerifyNext(terms, &states[2], chain[2].Receipt, chain[2].Hash, now); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerifyNext(b *testing.B) {
	b.Run("gpus=8", func(b *testing.B) { benchmarkVerifyNext(b, 8) })
	b.Run("gpus=1024", func(b *testing.B) { benchmarkVerifyNext(b, 1024) })
}

// BenchmarkVerifyChain re-verifies a week-long lease billed every ten
// minutes (1008 receipts, 8 GPUs), as exporting it does.
func BenchmarkVerifyChain(b *testing.B) {
	terms := testTerms()
	terms.Gpus = []string{"GPU-0", "GPU-1", "GPU-2", "GPU-3", "GPU-4", "GPU-5", "GPU-6", "GPU-7"}
	terms.DurationS = 7 * 24 * 3600
	chain, _ := testChain(terms, 7*24*6)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := VerifyChain(terms, chain); err != nil {
			b.Fatal(err)
		}
	}
}
