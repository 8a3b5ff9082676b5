package market

import (
	"errors"
	"testing"
	"time"
)

func TestReservedPrice(t *testing.T) {
	schedule := []Discount{{720 * time.Hour, 1_000}, {168 * time.Hour, 500}}
	tests := []struct {
		onDemand int64
		d        time.Duration
		schedule []Discount
		want     int64
		err      error
	}{
		{2_000_000, 100 * time.Hour, schedule, 2_000_000, nil},
		{2_000_000, 168 * time.Hour, schedule, 1_900_000, nil},
		{2_000_000, 1000 * time.Hour, schedule, 1_800_000, nil},
		{2_000_000, 1000 * time.Hour, nil, 2_000_000, nil},
		{3, 168 * time.Hour, []Discount{{time.Hour, 3_333}}, 2, nil},       // 2.0001
		{5, 168 * time.Hour, []Discount{{time.Hour, 1_000}}, 5, nil},       // 4.5 rounds up
		{7, 168 * time.Hour, []Discount{{time.Hour, 250}}, 7, nil},         // 6.825
		{1_000_000, time.Hour, []Discount{{time.Hour, 250}}, 975_000, nil}, // 2.5%
		{MaxPriceMicros, time.Hour, []Discount{{time.Hour, 9_999}}, MaxPriceMicros / 10_000, nil},
		{2_000_000, time.Hour, []Discount{{time.Hour, 10_000}}, 0, ErrBadDiscount},
		{2_000_000, time.Hour, []Discount{{0, 100}}, 0, ErrBadDiscount},
		{0, time.Hour, schedule, 0, ErrOrderPrice},
	}
	for _, tt := range tests {
		got, err := ReservedPrice(tt.onDemand, tt.d, tt.schedule)
		if got != tt.want || !errors.Is(err, tt.err) || (err == nil) != (tt.err == nil) {
			t.Errorf("ReservedPrice(%d, %s, %v) = %d, %v, want %d, %v", tt.onDemand, tt.d, tt.schedule, got, err, tt.want, tt.err)
		}
	}
}

func TestPreemptionCandidate(t *testing.T) {
	leases := []SpotLease{
		{ID: "l1", Price: 1_000_000, Start: bookT0},
		{ID: "l2", Price: 800_000, Start: bookT0},
		{ID: "l3", Price: 800_000, Start: bookT0.Add(time.Minute)},
		{ID: "l0", Price: 800_000, Start: bookT0.Add(time.Minute)},
		{ID: "l4", Price: 1_500_000, Start: bookT0},
	}
	tests := []struct {
		incoming LeaseType
		price    int64
		want     string
		ok       bool
	}{
		{OnDemand, 0, "l0", true},
		{Reserved, 0, "l0", true},
		{Spot, 900_000, "l0", true},
		{Spot, 800_000, "", false},
		{Spot, 2_000_000, "l0", true},
		{0, 2_000_000, "", false},
	}
	for _, tt := range tests {
		got, ok := PreemptionCandidate(leases, tt.incoming, tt.price)
		if got.ID != tt.want || ok != tt.ok {
			t.Errorf("PreemptionCandidate(%v, %d) = %s, %v, want %s, %v", tt.incoming, tt.price, got.ID, ok, tt.want, tt.ok)
		}
	}
	if _, ok := PreemptionCandidate(nil, OnDemand, 0); ok {
		t.Errorf("PreemptionCandidate(nil) ok = true, want false")
	}
	if !Spot.Interruptible() || OnDemand.Interruptible() || Reserved.Interruptible() {
		t.Errorf("Interruptible() wrong: only spot leases may be preempted")
	}
}
