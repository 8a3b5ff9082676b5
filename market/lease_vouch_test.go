package market

import (
	"errors"
	"testing"
	"time"

	"github.com/suanli/suanli/proto"
)

func TestVouchWindow(t *testing.T) {
	start := time.UnixMilli(1_700_000_000_000)
	terms := &proto.Lease{Id: "l", StartUnixMs: start.UnixMilli(), DurationS: 3600, BillingIntervalS: 60}
	window := func(from time.Duration, gpuMs uint64) *proto.Receipt {
		ws := start.Add(from)
		return &proto.Receipt{WindowStartUnixMs: ws.UnixMilli(), WindowEndUnixMs: ws.Add(time.Minute).UnixMilli(), GpuMs: gpuMs, AmountMicros: int64(gpuMs)}
	}
	cases := []struct {
		name    string
		rc      *proto.Receipt
		seen    WorkSeen
		vouched bool
	}{
		{"no workload: the reserve promise", window(0, 60_000), WorkSeen{}, true},
		{"started and up", window(5*time.Minute, 60_000), WorkSeen{Workload: true, Started: true}, true},
		{"never started", window(0, 60_000), WorkSeen{Workload: true}, false},
		{"never started, nothing charged", window(0, 0), WorkSeen{Workload: true}, true},
		{"stream broke within the window's interval", window(5*time.Minute, 60_000), WorkSeen{Workload: true, Started: true, DownSince: start.Add(4*time.Minute + 30*time.Second)}, true},
		{"stream broke long before", window(10*time.Minute, 60_000), WorkSeen{Workload: true, Started: true, DownSince: start.Add(2 * time.Minute)}, false},
		{"exited long before", window(10*time.Minute, 60_000), WorkSeen{Workload: true, Started: true, ExitedAt: start.Add(2 * time.Minute)}, false},
		{"exited during the window", window(2*time.Minute, 60_000), WorkSeen{Workload: true, Started: true, ExitedAt: start.Add(2*time.Minute + time.Second)}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := VouchWindow(terms, c.rc, c.seen)
			if got := err == nil; got != c.vouched {
				t.Errorf("VouchWindow = %v, want vouched %v", err, c.vouched)
			}
			if err != nil && !errors.Is(err, ErrNotVouched) {
				t.Errorf("VouchWindow = %v, want ErrNotVouched", err)
			}
		})
	}
}
