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
