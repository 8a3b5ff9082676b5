package market

import (
	"errors"
	"testing"
	"time"

	"github.com/suanli/suanli/proto"
)

const (
	h100Key = "nvidia-h100-sxm5-80gb"
	a100Key = "nvidia-a100-sxm4-40gb"
)

// capacityOffer is a valid offer of three H100s and one A100, created at t.
func capacityOffer(t time.Time) *proto.Offer {
	o := &proto.Offer{
		Provider: []byte("provider-p"), Seq: 1, CreatedUnixMs: t.UnixMilli(), ExpiresUnixMs: t.Add(time.Hour).UnixMilli(),
		Region:      "CN-GZ",
		Pricing:     &proto.Pricing{Currency: "USD", OnDemandMicros: 2_500_000},
		Terms:       &proto.LeaseTerms{MinDurationS: 60, MaxDurationS: 3600, BillingIncrementS: 60},
		Attestation: proto.AttestationLevel_ATTESTATION_LEVEL_SELF_REPORTED,
	}
	for i, m := range []string{h100Key, h100Key, h100Key, a100Key} {
		o.Gpus = append(o.Gpus, &proto.GPU{Uuid: "GPU-" + string(rune('a'+i)), Name: "NVIDIA", Market: m, MemoryBytes: 40 << 30})
	}
	return o
}

func TestOfferCapacity(t *testing.T) {
	t0 := testLeaseStart
	o := capacityOffer(t0)
	end1, end2 := t0.Add(10*time.Minute), t0.Add(20*time.Minute)
	MarkLeased(o.Gpus, map[string]time.Time{
		"GPU-a": end1, "GPU-b": end2, "GPU-d": end1,
		"GPU-c": t0.Add(-time.Second), // a hold that already lapsed
		"GPU-x": end2,                 // not in the offer
	}, t0)
	if err := ValidateOffer(o, t0); err != nil {
		t.Fatalf("ValidateOffer(marked offer) = %v", err)
	}
	want := map[string][]Capacity{
		"now": {
			{Market: a100Key, Total: 1, Free: 0, Releases: []Release{{end1, 1}}},
			{Market: h100Key, Total: 3, Free: 1, Releases: []Release{{end1, 1}, {end2, 1}}},
		},
		"after the first lease": {
			{Market: a100Key, Total: 1, Free: 1},
			{Market: h100Key, Total: 3, Free: 2, Releases: []Release{{end2, 1}}},
		},
		"after both": {
			{Market: a100Key, Total: 1, Free: 1},
			{Market: h100Key, Total: 3, Free: 3},
		},
	}
	for name, at := range map[string]time.Time{"now": t0, "after the first lease": end1, "after both": end2.Add(time.Millisecond)} {
		got := OfferCapacity(o, at)
		if !capacityEqual(got, want[name]) {
			t.Errorf("OfferCapacity(%s) = %+v, want %+v", name, got, want[name])
		}
	}
	f := OfferFilter{GPU: "h100"}
	if got := f.FreeGPUs(o, t0); got != 1 {
		t.Errorf("FreeGPUs(h100, now) = %d, want 1", got)
	}
	if got := f.MatchingCapacity(o, t0); len(got) != 1 || got[0].Market != h100Key || got[0].Free != 1 {
		t.Errorf("MatchingCapacity(h100, now) = %+v, want the H100s only", got)
	}
	for _, c := range []struct {
		min  int
		at   time.Time
		want bool
	}{{1, t0, true}, {2, t0, false}, {2, end1, true}, {3, end2, true}, {4, end2, false}} {
		f := OfferFilter{GPU: "h100", MinFreeGPUs: c.min, Now: c.at}
		if got := f.Match(o); got != c.want {
			t.Errorf("Match(min free %d at %s) = %v, want %v", c.min, c.at.Sub(t0), got, c.want)
		}
	}
	// Marking again from no holds frees everything.
	MarkLeased(o.Gpus, nil, t0)
	if got := OfferCapacity(o, t0); got[1].Free != 3 || got[0].Free != 1 {
		t.Errorf("OfferCapacity after clearing = %+v, want all free", got)
	}
	// A hold past the longest lease is clamped so the offer stays valid.
	MarkLeased(o.Gpus, map[string]time.Time{"GPU-a": t0.Add(2 * MaxLeaseDuration)}, t0)
	if err := ValidateOffer(o, t0); err != nil || o.Gpus[0].LeasedUntilUnixMs != t0.Add(MaxLeaseDuration).UnixMilli() {
		t.Errorf("far hold: leased until %d, ValidateOffer = %v; want clamped and valid", o.Gpus[0].LeasedUntilUnixMs, err)
	}
}

func capacityEqual(a, b []Capacity) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Market != b[i].Market || a[i].Total != b[i].Total || a[i].Free != b[i].Free || len(a[i].Releases) != len(b[i].Releases) {
			return false
		}
		for j := range a[i].Releases {
			if !a[i].Releases[j].At.Equal(b[i].Releases[j].At) || a[i].Releases[j].Count != b[i].Releases[j].Count {
				return false
			}
		}
	}
	return true
}

func TestValidateOfferLeasedUntil(t *testing.T) {
	t0 := testLeaseStart
	for _, c := range []struct {
		name  string
		until int64
		ok    bool
	}{
		{"free", 0, true},
		{"leased a minute", t0.Add(time.Minute).UnixMilli(), true},
		{"leased the longest lease", t0.Add(MaxLeaseDuration).UnixMilli(), true},
		{"negative", -1, false},
		{"at creation", t0.UnixMilli(), false},
		{"before creation", t0.Add(-time.Minute).UnixMilli(), false},
		{"past the longest lease", t0.Add(MaxLeaseDuration).UnixMilli() + 1, false},
	} {
		o := capacityOffer(t0)
		o.Gpus[2].LeasedUntilUnixMs = c.until
		err := ValidateOffer(o, t0)
		if c.ok != (err == nil) || !c.ok && !errors.Is(err, ErrOfferSchema) {
			t.Errorf("%s: ValidateOffer = %v, want ok %v (else ErrOfferSchema)", c.name, err, c.ok)
		}
	}
}

// TestValidateOfferScheduler: an offer a scheduler places names the
// scheduler, each GPU's node and how many nodes one lease may span; an
// offer without one states none of it.
func TestValidateOfferScheduler(t *testing.T) {
	t0 := testLeaseStart
	slurm := func(nodes []string, maxNodes uint32) func(*proto.Offer) {
		return func(o *proto.Offer) {
			o.Scheduler, o.MaxNodes = "slurm", maxNodes
			o.Host = &proto.Host{SchedulerVersion: "22.05.8"}
			for i, g := range o.Gpus {
				g.Node = nodes[i%len(nodes)]
			}
		}
	}
	for _, c := range []struct {
		name string
		edit func(*proto.Offer)
		ok   bool
	}{
		{"no scheduler", func(*proto.Offer) {}, true},
		{"slurm, two nodes, leases span two", slurm([]string{"gpu-1", "gpu-2"}, 2), true},
		{"slurm, one node", slurm([]string{"n1.cluster"}, 1), true},
		{"slurm, span more nodes than listed", slurm([]string{"gpu-1", "gpu-2"}, 3), false},
		{"slurm, no span", slurm([]string{"gpu-1"}, 0), false},
		{"slurm, a GPU without a node", func(o *proto.Offer) { slurm([]string{"gpu-1"}, 1)(o); o.Gpus[3].Node = "" }, false},
		{"slurm, a node name with a slash", slurm([]string{"gpu/1"}, 1), false},
		{"slurm, a node name with a newline", slurm([]string{"gpu\n1"}, 1), false},
		{"an unknown scheduler", func(o *proto.Offer) { slurm([]string{"gpu-1"}, 1)(o); o.Scheduler = "kubernetes" }, false},
		{"nodes without a scheduler", func(o *proto.Offer) { o.Gpus[0].Node = "gpu-1" }, false},
		{"a span without a scheduler", func(o *proto.Offer) { o.MaxNodes = 2 }, false},
		{"a version without a scheduler", func(o *proto.Offer) { o.Host = &proto.Host{SchedulerVersion: "1"} }, false},
	} {
		o := capacityOffer(t0)
		c.edit(o)
		err := ValidateOffer(o, t0)
		if c.ok != (err == nil) || !c.ok && !errors.Is(err, ErrOfferSchema) {
			t.Errorf("%s: ValidateOffer = %v, want ok %v (else ErrOfferSchema)", c.name, err, c.ok)
		}
	}
}
