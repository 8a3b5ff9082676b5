package market

import (
	"slices"
	"testing"
	"time"

	"github.com/suanli/suanli/proto"
)

func TestParseStart(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		in   string
		want time.Time
		ok   bool
	}{
		{"+2h", now.Add(2 * time.Hour), true},
		{"+0s", now, true},
		{"2026-12-03T08:00:00Z", time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC), true},
		{"+-1h", time.Time{}, false},
		{"+soon", time.Time{}, false},
		{"tomorrow", time.Time{}, false},
	} {
		got, err := ParseStart(c.in, now)
		if (err == nil) != c.ok || !got.Equal(c.want) {
			t.Errorf("ParseStart(%q) = %v, %v; want %v (ok %v)", c.in, got, err, c.want, c.ok)
		}
	}
}

func TestLeaseStart(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ahead := now.Add(time.Hour + 1500*time.Microsecond)
	bid := &Order{Side: Bid, Start: ahead}
	if got := LeaseStartFor(bid, now); !got.Equal(ahead) {
		t.Errorf("LeaseStartFor(block ahead) = %v, want %v", got, ahead)
	}
	if got := LeaseStartFor(&Order{Side: Bid, Start: now.Add(-time.Hour)}, now); !got.Equal(now) {
		t.Errorf("LeaseStartFor(block past) = %v, want now", got)
	}
	if got := WantStart(bid, time.Time{}, now); got.UnixMilli() != ahead.UnixMilli() || got.Nanosecond()%int(time.Millisecond) != 0 {
		t.Errorf("WantStart(bid ahead) = %v, want %v to the millisecond", got, ahead)
	}
	if got := WantStart(&Order{Side: Ask}, ahead, now); got.UnixMilli() != ahead.UnixMilli() {
		t.Errorf("WantStart(ask taking a block) = %v, want %v", got, ahead)
	}
	if got := WantStart(&Order{Side: Ask}, now, now); !got.IsZero() {
		t.Errorf("WantStart(now) = %v, want zero", got)
	}
}

func TestFreeIn(t *testing.T) {
	o := &proto.Offer{Gpus: []*proto.GPU{{Uuid: "a", Market: "m"}, {Uuid: "b", Market: "m"}, {Uuid: "c", Market: "x"}, {Uuid: "d", Market: "m"}}}
	if got := FreeIn(o, "m", map[string]bool{"b": true, "c": true}); !slices.Equal(got, []string{"a", "d"}) {
		t.Errorf("FreeIn = %v, want [a d]", got)
	}
	if got := FreeIn(nil, "m", nil); got != nil {
		t.Errorf("FreeIn(no offer) = %v", got)
	}
}

// TestPreemptibleGPUs counts what ChoosePreempted may take: every spot
// lease for an on-demand trade, only the ones outbid by the margin for a
// spot one.
func TestPreemptibleGPUs(t *testing.T) {
	running := []Preemptible{
		{ID: "cheap", GPUs: []string{"a", "b"}, Price: 1_000_000, Type: Spot},
		{ID: "dear", GPUs: []string{"c"}, Price: 3_000_000, Type: Spot},
		{ID: "od", GPUs: []string{"d"}, Price: 1_000_000, Type: OnDemand},
	}
	for _, c := range []struct {
		t     LeaseType
		price int64
		want  int
	}{
		{OnDemand, 1, 3}, {Reserved, 1, 3},
		{Spot, 1_100_000, 2}, {Spot, 1_099_999, 0}, {Spot, 3_300_000, 3},
	} {
		got := PreemptibleGPUs(running, c.t, c.price, 1000)
		if got != c.want {
			t.Errorf("PreemptibleGPUs(%v at %d) = %d, want %d", c.t, c.price, got, c.want)
		}
		// The same leases ChoosePreempted picks from.
		_, gpus, ok := ChoosePreempted(running, nil, c.want, c.t, c.price, 1000)
		if c.want > 0 && (!ok || len(gpus) != c.want) {
			t.Errorf("ChoosePreempted(%d, %v at %d) = %v, %v", c.want, c.t, c.price, gpus, ok)
		}
		if _, _, ok := ChoosePreempted(running, nil, c.want+1, c.t, c.price, 1000); ok {
			t.Errorf("ChoosePreempted(%d, %v at %d) found more than PreemptibleGPUs", c.want+1, c.t, c.price)
		}
	}
}
