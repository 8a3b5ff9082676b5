package market

import (
	"errors"
	"testing"
)

func TestParseAmount(t *testing.T) {
	for _, tc := range []struct {
		in     string
		micros int64
		err    error
	}{
		{"0.111326", 111_326, nil},
		{"12", 12_000_000, nil},
		{"0.000001", 1, nil},
		{"0.1113260", 111_326, nil},
		{"0.0000001", 0, ErrBadAmount},
		{"abc", 0, ErrBadAmount},
		{"-1", 0, ErrBadAmount},
		{"", 0, ErrBadAmount},
	} {
		m, err := ParseAmount(tc.in, "USD")
		if !errors.Is(err, tc.err) || (err == nil && m.Micros != tc.micros) {
			t.Errorf("ParseAmount(%q) = %d, %v; want %d, %v", tc.in, m.Micros, err, tc.micros, tc.err)
		}
		if err == nil {
			if back := FormatMicros(m.Micros, "USD"); back != tc.in && tc.in != "0.1113260" && tc.in != "12" {
				t.Errorf("FormatMicros(ParseAmount(%q)) = %q", tc.in, back)
			}
		}
	}
	// Prices keep the currency's precision.
	if _, err := ParseMoney("0.111326", "USD"); !errors.Is(err, ErrBadAmount) {
		t.Errorf("ParseMoney(0.111326 USD) = %v, want the price precision refused", err)
	}
}
