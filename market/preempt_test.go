package market

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/suanli/suanli/proto"
)

func TestChoosePreempted(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	running := []Preemptible{
		{ID: "cheap-old", GPUs: []string{"g1", "g2"}, Price: 1_000_000, Type: Spot, Since: t0},
		{ID: "cheap-new", GPUs: []string{"g3", "g4"}, Price: 1_000_000, Type: Spot, Since: t0.Add(time.Hour)},
		{ID: "dear", GPUs: []string{"g5", "g6"}, Price: 2_000_000, Type: Spot, Since: t0},
		{ID: "od", GPUs: []string{"g7", "g8"}, Price: 500_000, Type: OnDemand, Since: t0},
	}
	tests := []struct {
		name    string
		free    []string
		need    int
		t       LeaseType
		price   int64
		victims []string
		ok      bool
	}{
		{"free enough", []string{"f1", "f2"}, 2, OnDemand, 1, nil, true},
		{"on-demand takes the newest of the cheapest", nil, 2, OnDemand, 1, []string{"cheap-new"}, true},
		{"reserved takes as many as it needs", []string{"f1"}, 5, Reserved, 1, []string{"cheap-new", "cheap-old"}, true},
		{"never an on-demand lease", nil, 8, OnDemand, 1, nil, false},
		{"spot below the margin preempts nothing", nil, 2, Spot, 1_100_000, nil, false},
		{"spot over the margin takes the cheap", nil, 2, Spot, 1_200_000, []string{"cheap-new"}, true},
		{"spot over the margin of the cheap only", nil, 6, Spot, 1_200_000, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vs, gpus, ok := ChoosePreempted(running, tt.free, tt.need, tt.t, tt.price, DefaultPreemptMarginBP)
			var ids []string
			for _, v := range vs {
				ids = append(ids, v.ID)
			}
			if ok != tt.ok || !slices.Equal(ids, tt.victims) {
				t.Fatalf("ChoosePreempted = %v, %v, want %v, %v", ids, ok, tt.victims, tt.ok)
			}
			if ok && len(gpus) != tt.need {
				t.Errorf("got %d GPUs, want %d", len(gpus), tt.need)
			}
			if ok && len(tt.free) > 0 && gpus[0] != tt.free[0] {
				t.Errorf("GPUs %v do not use the free ones first", gpus)
			}
		})
	}
}

// TestChoosePreemptedSmallestSet: a trade interrupts the leases that
// lose the least revenue, not the cheapest per GPU whatever their size
// (a 2-GPU trade once took a whole 8-GPU spot lease).
func TestChoosePreemptedSmallestSet(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	gpus := func(prefix string, n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("%s%d", prefix, i))
		}
		return out
	}
	big := Preemptible{ID: "big", GPUs: gpus("b", 8), Price: 1_000_000, Type: Spot, Since: t0}
	small := Preemptible{ID: "small", GPUs: gpus("s", 2), Price: 1_200_000, Type: Spot, Since: t0}
	one := Preemptible{ID: "one", GPUs: gpus("o", 1), Price: 1_100_000, Type: Spot, Since: t0}
	tests := []struct {
		name    string
		running []Preemptible
		need    int
		victims []string
	}{
		{"2 GPUs take the 2-GPU lease, not the cheaper 8", []Preemptible{big, small}, 2, []string{"small"}},
		{"1 GPU takes the 1-GPU lease", []Preemptible{big, small, one}, 1, []string{"one"}},
		{"3 GPUs take 1 + 2", []Preemptible{big, small, one}, 3, []string{"one", "small"}},
		{"9 GPUs take 8 + 1", []Preemptible{big, small, one}, 9, []string{"big", "one"}},
		{"only the big one fits", []Preemptible{big, one}, 4, []string{"big"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vs, got, ok := ChoosePreempted(tt.running, nil, tt.need, OnDemand, 1, DefaultPreemptMarginBP)
			var ids []string
			for _, v := range vs {
				ids = append(ids, v.ID)
			}
			if !ok || !slices.Equal(ids, tt.victims) || len(got) != tt.need {
				t.Fatalf("ChoosePreempted = %v (%d GPUs), %v; want %v", ids, len(got), ok, tt.victims)
			}
		})
	}
}

// TestChoosePreemptedOptimal checks the choice against every subset of up
// to 10 random leases: it frees enough GPUs, no subset loses less revenue
// (or as little with fewer GPUs), and it fails only when none frees
// enough.
func TestChoosePreemptedOptimal(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 20))
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for round := range 2000 {
		n := rng.IntN(10)
		var running []Preemptible
		for i := range n {
			g := 1 + rng.IntN(8)
			var ids []string
			for j := range g {
				ids = append(ids, fmt.Sprintf("r%d-%d", i, j))
			}
			typ := Spot
			if rng.IntN(5) == 0 {
				typ = OnDemand
			}
			running = append(running, Preemptible{ID: fmt.Sprintf("l%d", i), GPUs: ids, Price: int64(1+rng.IntN(5)) * 500_000, Type: typ, Since: t0.Add(time.Duration(rng.IntN(100)) * time.Minute)})
		}
		free := rng.IntN(3)
		var freeIDs []string
		for i := range free {
			freeIDs = append(freeIDs, fmt.Sprintf("f%d", i))
		}
		need := 1 + rng.IntN(20)
		vs, got, ok := ChoosePreempted(running, freeIDs, need, OnDemand, 1, DefaultPreemptMarginBP)
		cost := func(set []Preemptible) coverCost {
			var c coverCost
			for _, l := range set {
				c.lost += l.Price * int64(len(l.GPUs))
				c.gpus += len(l.GPUs)
			}
			return c
		}
		var best *coverCost
		for mask := 0; mask < 1<<n; mask++ {
			var set []Preemptible
			for i := range n {
				if mask&(1<<i) != 0 {
					if running[i].Type != Spot {
						set = nil
						break
					}
					set = append(set, running[i])
				}
			}
			if set == nil && mask != 0 {
				continue
			}
			c := cost(set)
			if free+c.gpus >= need && (best == nil || c.less(*best)) {
				best = &c
			}
		}
		if ok != (best != nil) {
			t.Fatalf("round %d: ok = %v, brute force found %v (need %d, free %d, running %+v)", round, ok, best, need, free, running)
		}
		if !ok {
			continue
		}
		if len(got) != need || (free > 0 && got[0] != "f0") {
			t.Fatalf("round %d: got GPUs %v for need %d", round, got, need)
		}
		if c := cost(vs); c != *best {
			t.Fatalf("round %d: chose %+v costing %+v, the best costs %+v", round, vs, c, *best)
		}
		seen := map[string]bool{}
		for _, g := range got {
			if seen[g] {
				t.Fatalf("round %d: GPU %s given twice", round, g)
			}
			seen[g] = true
		}
	}
}

func TestCheckPreemption(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	terms := &proto.Lease{Id: "L", Provider: []byte("prov"), Buyer: []byte("buyer"), LeaseType: proto.LeaseType_LEASE_TYPE_SPOT, PreemptionNoticeS: 5}
	good := func() *proto.Preemption {
		return &proto.Preemption{LeaseId: "L", Provider: []byte("prov"), CreatedUnixMs: now.UnixMilli(), EndsUnixMs: now.Add(5 * time.Second).UnixMilli()}
	}
	if err := CheckPreemption(terms, good(), []byte("prov"), now); err != nil {
		t.Fatalf("CheckPreemption(good) = %v", err)
	}
	onDemand := &proto.Lease{Id: "L", Provider: []byte("prov"), LeaseType: proto.LeaseType_LEASE_TYPE_ON_DEMAND}
	for name, c := range map[string]struct {
		terms  *proto.Lease
		p      func(*proto.Preemption)
		signer string
	}{
		"signed by the buyer": {terms, func(*proto.Preemption) {}, "buyer"},
		"naming another":      {terms, func(p *proto.Preemption) { p.Provider = []byte("other") }, "prov"},
		"another lease":       {terms, func(p *proto.Preemption) { p.LeaseId = "M" }, "prov"},
		"on-demand lease":     {onDemand, func(*proto.Preemption) {}, "prov"},
		"short notice":        {terms, func(p *proto.Preemption) { p.EndsUnixMs = now.Add(time.Second).UnixMilli() }, "prov"},
		"from the future":     {terms, func(p *proto.Preemption) { p.CreatedUnixMs = now.Add(time.Hour).UnixMilli() }, "prov"},
		"stale":               {terms, func(p *proto.Preemption) { p.CreatedUnixMs = now.Add(-time.Hour).UnixMilli() }, "prov"},
	} {
		p := good()
		c.p(p)
		if err := CheckPreemption(c.terms, p, []byte(c.signer), now); !errors.Is(err, ErrPreemption) {
			t.Errorf("%s: CheckPreemption = %v, want ErrPreemption", name, err)
		}
	}
	if LeaseNotice(&proto.Lease{}) != PreemptionNotice || LeaseNotice(terms) != 5*time.Second {
		t.Error("LeaseNotice does not follow the terms")
	}
}

// FuzzCheckPreemption: a notice is refused with ErrPreemption or holds:
// signed by the provider, for a spot lease, with at least its notice.
func FuzzCheckPreemption(f *testing.F) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC).UnixMilli()
	f.Add("L", []byte("prov"), []byte("prov"), now, now+30_000, "x", int32(1))
	f.Add("L", []byte("buyer"), []byte("prov"), now, now+1_000, "", int32(2))
	f.Add("M", []byte("prov"), []byte("prov"), now-3_600_000, now, "", int32(1))
	f.Fuzz(func(t *testing.T, id string, signer, provider []byte, created, ends int64, reason string, lt int32) {
		terms := &proto.Lease{Id: "L", Provider: []byte("prov"), LeaseType: proto.LeaseType(lt)}
		p := &proto.Preemption{LeaseId: id, Provider: provider, CreatedUnixMs: created, EndsUnixMs: ends, Reason: reason}
		err := CheckPreemption(terms, p, signer, time.UnixMilli(now))
		if err != nil {
			if !errors.Is(err, ErrPreemption) {
				t.Fatalf("CheckPreemption = %v, not ErrPreemption", err)
			}
			return
		}
		if string(signer) != "prov" || id != "L" || !LeaseType(lt).Interruptible() || ends-created < LeaseNotice(terms).Milliseconds() {
			t.Fatalf("CheckPreemption let through %+v signed by %q", p, signer)
		}
	})
}
