package market

import (
	"errors"
	"math"
	"testing"
)

func TestParseMoney(t *testing.T) {
	tests := []struct {
		in, cur string
		want    int64
		err     error
	}{
		{"2.50", "USD", 2_500_000, nil},
		{"2.5", "USD", 2_500_000, nil},
		{"2", "USD", 2_000_000, nil},
		{"0.0001", "USD", 100, nil},
		{"2.405000", "USD", 2_405_000, nil}, // trailing zeros are not precision
		{"0.00001", "USD", 0, ErrBadAmount},
		{"0.000001", "USDC", 1, nil},
		{"15", "JPY", 15_000_000, nil},
		{"15.001", "JPY", 0, ErrBadAmount},
		{"-1", "USD", 0, ErrBadAmount},
		{"1e3", "USD", 0, ErrBadAmount},
		{".5", "USD", 0, ErrBadAmount},
		{"5.", "USD", 0, ErrBadAmount},
		{"", "USD", 0, ErrBadAmount},
		{"99999999999999999999", "USD", 0, ErrBadAmount},
		{"1", "XXX", 0, ErrUnknownCurrency},
	}
	for _, tt := range tests {
		got, err := ParseMoney(tt.in, tt.cur)
		if !errors.Is(err, tt.err) {
			t.Errorf("ParseMoney(%q, %q) error = %v, want %v", tt.in, tt.cur, err, tt.err)
			continue
		}
		if err == nil && got.Micros != tt.want {
			t.Errorf("ParseMoney(%q, %q) = %d, want %d", tt.in, tt.cur, got.Micros, tt.want)
		}
	}
}

func TestFormatMicros(t *testing.T) {
	tests := []struct {
		micros int64
		cur    string
		want   string
	}{
		{2_500_000, "USD", "2.50"},
		{2_405_000, "USD", "2.405"},
		{0, "USD", "0.00"},
		{15_000_000, "JPY", "15"},
		{-100_000, "USD", "-0.10"},
		{1, "USDC", "0.000001"},
		{math.MinInt64, "USD", "-9223372036854.775808"},
	}
	for _, tt := range tests {
		if got := FormatMicros(tt.micros, tt.cur); got != tt.want {
			t.Errorf("FormatMicros(%d, %q) = %q, want %q", tt.micros, tt.cur, got, tt.want)
		}
	}
}

func FuzzParseMoney(f *testing.F) {
	for _, s := range []string{"2.50", "0.0001", "1e3", "99999999999999999999", "", "."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseMoney(s, "USD")
		if err != nil {
			return
		}
		if m.Micros < 0 {
			t.Fatalf("ParseMoney(%q) = %d, negative", s, m.Micros)
		}
		back, err := ParseMoney(m.Decimal(), "USD")
		if err != nil || back != m {
			t.Fatalf("round trip %q -> %q -> %v, %v", s, m.Decimal(), back, err)
		}
	})
}
