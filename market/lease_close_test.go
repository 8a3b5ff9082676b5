package market

import (
	"errors"
	"testing"
	"time"

	"github.com/suanli/suanli/proto"
)

func TestAgreeClose(t *testing.T) {
	t0 := time.UnixMilli(1_700_000_000_000)
	cases := []struct {
		name       string
		aReason    CloseReason
		aAt        time.Time
		bReason    CloseReason
		bAt        time.Time
		wantReason CloseReason
		wantAt     time.Time
	}{
		{"earlier buyer close wins", CloseBuyer, t0, CloseUnpaid, t0.Add(time.Second), CloseBuyer, t0},
		{"earlier provider close wins", CloseBuyer, t0.Add(time.Second), CloseUnpaid, t0, CloseUnpaid, t0},
		{"same instant: lower reason", CloseUnpaid, t0, CloseBuyer, t0, CloseBuyer, t0},
		{"same close", CloseCompleted, t0, CloseCompleted, t0, CloseCompleted, t0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, at := AgreeClose(c.aReason, c.aAt, c.bReason, c.bAt)
			r2, at2 := AgreeClose(c.bReason, c.bAt, c.aReason, c.aAt)
			if r != c.wantReason || !at.Equal(c.wantAt) {
				t.Errorf("AgreeClose = %s at %v, want %s at %v", r, at, c.wantReason, c.wantAt)
			}
			if r2 != r || !at2.Equal(at) {
				t.Errorf("AgreeClose not symmetric: %s at %v one way, %s at %v the other", r, at, r2, at2)
			}
		})
	}
}

func TestCheckBuyerClose(t *testing.T) {
	start := time.UnixMilli(1_700_000_000_000)
	terms := func(lt proto.LeaseType) *proto.Lease {
		return &proto.Lease{Id: "l", StartUnixMs: start.UnixMilli(), DurationS: 3600, BillingIntervalS: 60, LeaseType: lt}
	}
	grace := 3 * time.Minute
	cases := []struct {
		name     string
		lt       proto.LeaseType
		reason   CloseReason
		at       time.Time
		billedTo time.Time
		refused  bool
	}{
		{"on-demand closes any time", proto.LeaseType_LEASE_TYPE_ON_DEMAND, CloseBuyer, start.Add(time.Minute), start.Add(time.Minute), false},
		{"spot closes any time", proto.LeaseType_LEASE_TYPE_SPOT, CloseBuyer, start.Add(time.Minute), start.Add(time.Minute), false},
		{"reserved early while billed: refused", proto.LeaseType_LEASE_TYPE_RESERVED, CloseBuyer, start.Add(time.Minute), start.Add(time.Minute), true},
		{"reserved early, provider silent past grace", proto.LeaseType_LEASE_TYPE_RESERVED, CloseBuyer, start.Add(10 * time.Minute), start.Add(5 * time.Minute), false},
		{"reserved early, silent within grace: refused", proto.LeaseType_LEASE_TYPE_RESERVED, CloseBuyer, start.Add(8 * time.Minute), start.Add(5 * time.Minute), true},
		{"reserved never billed, silent past grace", proto.LeaseType_LEASE_TYPE_RESERVED, CloseBuyer, start.Add(5 * time.Minute), time.Time{}, false},
		{"reserved at its end", proto.LeaseType_LEASE_TYPE_RESERVED, CloseBuyer, start.Add(time.Hour), start.Add(59 * time.Minute), false},
		{"a provider's reason from the buyer", proto.LeaseType_LEASE_TYPE_ON_DEMAND, CloseUnpaid, start.Add(time.Minute), start, true},
		{"preempted from the buyer", proto.LeaseType_LEASE_TYPE_SPOT, ClosePreempted, start.Add(time.Minute), start, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := CheckBuyerClose(terms(c.lt), c.reason, c.at, c.billedTo, grace)
			if got := errors.Is(err, ErrCloseRefused); got != c.refused {
				t.Errorf("CheckBuyerClose = %v, want refused %v", err, c.refused)
			}
		})
	}
}

// FuzzCloseRules: AgreeClose is symmetric and picks one of its two closes,
// never later than either; CheckBuyerClose and VouchWindow never panic and
// refuse only with their own errors.
func FuzzCloseRules(f *testing.F) {
	f.Add(uint8(CloseBuyer), int64(1_700_000_000_000), uint8(CloseUnpaid), int64(1_700_000_001_000), int32(2), int64(3600), int64(60))
	f.Add(uint8(CloseCompleted), int64(0), uint8(CloseCompleted), int64(0), int32(0), int64(0), int64(0))
	f.Fuzz(func(t *testing.T, ar uint8, aMs int64, br uint8, bMs int64, lt int32, dur, interval int64) {
		a, b := time.UnixMilli(aMs), time.UnixMilli(bMs)
		r1, t1 := AgreeClose(CloseReason(ar), a, CloseReason(br), b)
		r2, t2 := AgreeClose(CloseReason(br), b, CloseReason(ar), a)
		if r1 != r2 || !t1.Equal(t2) {
			t.Fatalf("AgreeClose not symmetric: %v %v / %v %v", r1, t1, r2, t2)
		}
		if t1.After(a) || t1.After(b) || r1 != CloseReason(ar) && r1 != CloseReason(br) {
			t.Fatalf("AgreeClose = %v %v, from %v %v and %v %v", r1, t1, ar, a, br, b)
		}
		terms := &proto.Lease{Id: "l", StartUnixMs: aMs, DurationS: dur, BillingIntervalS: interval, LeaseType: proto.LeaseType(lt)}
		if err := CheckBuyerClose(terms, CloseReason(br), b, a, 0); err != nil && !errors.Is(err, ErrCloseRefused) {
			t.Fatalf("CheckBuyerClose = %v", err)
		}
		rc := &proto.Receipt{WindowStartUnixMs: bMs, GpuMs: uint64(dur)}
		if err := VouchWindow(terms, rc, WorkSeen{Workload: lt%2 == 0, Started: ar%2 == 0, DownSince: a, ExitedAt: b}); err != nil && !errors.Is(err, ErrNotVouched) {
			t.Fatalf("VouchWindow = %v", err)
		}
	})
}
