package market

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// MicrosPerUnit is how many micro-units make one unit of any currency. All
// money in Suanli is an int64 count of micro-units; never a float.
const MicrosPerUnit = 1_000_000

// Currency describes how a currency's amounts may be written.
type Currency struct {
	Code string
	// Minor is the number of decimals always shown (ISO 4217 minor unit).
	Minor int
	// Max is the most decimals a price may carry. GPU time is priced per
	// GPU-hour, so sub-cent prices are normal: USD allows 4 decimals.
	Max int
}

var currencies = map[string]Currency{
	"USD":  {"USD", 2, 4},
	"EUR":  {"EUR", 2, 4},
	"CNY":  {"CNY", 2, 4},
	"GBP":  {"GBP", 2, 4},
	"JPY":  {"JPY", 0, 2},
	"KRW":  {"KRW", 0, 2},
	"USDC": {"USDC", 2, 6},
	"USDT": {"USDT", 2, 6},
}

// ErrUnknownCurrency is returned when a currency code is not one Suanli prices in.
var ErrUnknownCurrency = errors.New("market: unknown currency")

// ErrBadAmount is returned when a decimal amount cannot be parsed or is out of range.
var ErrBadAmount = errors.New("market: bad amount")

// LookupCurrency returns the currency for an upper-case code such as "USD".
func LookupCurrency(code string) (Currency, error) {
	c, ok := currencies[code]
	if !ok {
		return Currency{}, fmt.Errorf("%w %q (known: USD, EUR, CNY, GBP, JPY, KRW, USDC, USDT)", ErrUnknownCurrency, code)
	}
	return c, nil
}

// Money is an amount of one currency in micro-units.
type Money struct {
	Micros   int64
	Currency string
}

// ParseMoney parses a non-negative decimal such as "2.50" in the given
// currency. More decimals than the currency allows is an error, as is a value
// that does not fit in int64 micro-units.
func ParseMoney(s, currency string) (Money, error) {
	cur, err := LookupCurrency(currency)
	if err != nil {
		return Money{}, err
	}
	micros, err := parseMicros(s, cur)
	if err != nil {
		return Money{}, err
	}
	return Money{Micros: micros, Currency: cur.Code}, nil
}

func parseMicros(s string, cur Currency) (int64, error) {
	if s == "" {
		return 0, fmt.Errorf("%w: empty", ErrBadAmount)
	}
	whole, frac, hasDot := strings.Cut(s, ".")
	if whole == "" || (hasDot && frac == "") {
		return 0, fmt.Errorf("%w %q: want digits like 2.50", ErrBadAmount, s)
	}
	for _, part := range []string{whole, frac} {
		for _, r := range part {
			if r < '0' || r > '9' {
				return 0, fmt.Errorf("%w %q: want a non-negative decimal like 2.50", ErrBadAmount, s)
			}
		}
	}
	if trimmed := strings.TrimRight(frac, "0"); len(trimmed) > cur.Max {
		return 0, fmt.Errorf("%w %q: %s allows at most %d decimals", ErrBadAmount, s, cur.Code, cur.Max)
	}
	frac = strings.TrimRight(frac, "0")
	var units int64
	for _, r := range whole {
		if units > (math.MaxInt64/MicrosPerUnit-9)/10 {
			return 0, fmt.Errorf("%w %q: too large", ErrBadAmount, s)
		}
		units = units*10 + int64(r-'0')
	}
	micros := units * MicrosPerUnit
	scale := int64(MicrosPerUnit / 10)
	for _, r := range frac {
		micros += int64(r-'0') * scale
		scale /= 10
	}
	return micros, nil
}

// Decimal writes the amount as a decimal string with at least the currency's
// minor digits and no trailing zeros beyond them: "2.50", "2.405", "-0.10".
func (m Money) Decimal() string { return FormatMicros(m.Micros, m.Currency) }

// String is the amount followed by its currency code: "2.50 USD".
func (m Money) String() string { return m.Decimal() + " " + m.Currency }

// FormatMicros writes micros as a decimal in the given currency's style.
// Unknown currencies are written with two decimals minimum.
func FormatMicros(micros int64, currency string) string {
	minor := 2
	if c, ok := currencies[currency]; ok {
		minor = c.Minor
	}
	neg := micros < 0
	u := uint64(micros)
	if neg {
		u = uint64(-(micros + 1)) + 1
	}
	whole, frac := u/MicrosPerUnit, u%MicrosPerUnit
	fs := strings.TrimRight(fmt.Sprintf("%06d", frac), "0")
	for len(fs) < minor {
		fs += "0"
	}
	s := fmt.Sprintf("%d", whole)
	if fs != "" {
		s += "." + fs
	}
	if neg {
		s = "-" + s
	}
	return s
}
