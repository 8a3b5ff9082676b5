package market

import (
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"time"
)

// DefaultIndexWindow is the window an Index averages over unless told.
const DefaultIndexWindow = time.Hour

// IndexOption configures an Index.
type IndexOption func(*Index) error

// WithWindow sets how far back an Index looks (default DefaultIndexWindow).
func WithWindow(d time.Duration) IndexOption {
	return func(x *Index) error {
		if d <= 0 || d > MaxOrderTTL {
			return fmt.Errorf("market: index window %s, want (0, %s]", d, MaxOrderTTL)
		}
		x.window = d
		return nil
	}
}

// WithMinProviders makes Value report no index until fills from at least n
// distinct providers are in the window (default 1).
func WithMinProviders(n int) IndexOption {
	return func(x *Index) error {
		if n < 1 {
			return fmt.Errorf("market: index min providers %d, want at least 1", n)
		}
		x.minProviders = n
		return nil
	}
}

// Index is a market's price index, built only from fills (doubly signed:
// the caller guarantees that). It is a volume-weighted average over a
// sliding window, made hard to move by any one provider:
//
//  1. One print per provider: the provider's volume-weighted average price
//     over its fills in the window. However many buyers (sybils or not) it
//     trades with, a provider is one print.
//  2. That print's weight is the provider's volume (GPUs) capped at the
//     median provider's volume (the lower median). Wash volume therefore
//     buys no weight beyond the median: with n providers, at least
//     n-⌊(n-1)/2⌋ of them carry the full cap, so one provider holds at most
//     1/(n-⌊(n-1)/2⌋) of the weight (1/2 for 2 or 3 providers, 1/6 for 10).
//  3. A print priced outside [½, 2]× the median provider's price (lower
//     median) counts at the nearer bound, so a single absurd print moves
//     the index by at most its weight share times the distance to that
//     bound.
//
// Fills of every lease type are averaged together: feed an Index only the
// lease types it should price. All arithmetic is integer (128-bit
// intermediates); averages round half up to the micro-unit. An Index is not
// safe for concurrent use.
type Index struct {
	market, currency string
	window           time.Duration
	minProviders     int
	fills            []Fill // in the window, sorted by (Time, ID)
	seen             map[string]struct{}
}

// NewIndex returns an empty index for market priced in currency.
func NewIndex(market, currency string, opts ...IndexOption) (*Index, error) {
	if !ValidMarketKey(market) {
		return nil, fmt.Errorf("%w: %q", ErrOrderMarket, market)
	}
	if _, err := LookupCurrency(currency); err != nil {
		return nil, err
	}
	x := &Index{market: market, currency: currency, window: DefaultIndexWindow, minProviders: 1, seen: make(map[string]struct{})}
	for _, opt := range opts {
		if err := opt(x); err != nil {
			return nil, err
		}
	}
	return x, nil
}

// Add records a fill seen at now. A fill older than the window is ignored
// (nil); a fill ID already in the window gives ErrDuplicate (a no-op); a
// fill from more than MaxClockSkew after now, malformed or a self-trade is
// refused. It also forgets fills that have left the window, so now should
// not go backwards between calls.
func (x *Index) Add(f Fill, now time.Time) error {
	if f.Market != x.market || f.Currency != x.currency {
		return fmt.Errorf("%w: fill for %s in %s, index is %s in %s", ErrWrongBook, f.Market, f.Currency, x.market, x.currency)
	}
	if err := validateFill(&f); err != nil {
		return err
	}
	if f.Time.Sub(now) > MaxClockSkew {
		return fmt.Errorf("%w: fill time %s is ahead of now", ErrBadFill, f.Time.Sub(now).Round(time.Second))
	}
	x.prune(now)
	if !f.Time.After(now.Add(-x.window)) {
		return nil
	}
	if _, ok := x.seen[f.ID]; ok {
		return fmt.Errorf("%w: fill %s already in the index", ErrDuplicate, f.ID)
	}
	i, _ := slices.BinarySearchFunc(x.fills, f, cmpFill)
	x.fills = slices.Insert(x.fills, i, f)
	x.seen[f.ID] = struct{}{}
	return nil
}

func cmpFill(a, b Fill) int {
	if c := a.Time.Compare(b.Time); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}

func (x *Index) prune(now time.Time) {
	cut := now.Add(-x.window)
	n := 0
	for n < len(x.fills) && !x.fills[n].Time.After(cut) {
		delete(x.seen, x.fills[n].ID)
		n++
	}
	if n > 0 {
		x.fills = slices.Delete(x.fills, 0, n)
	}
}

type providerPrint struct {
	vol      uint64
	notional u128
	price    uint64
}

// Value returns the index at now over fills with times in (now-window,
// now]; ok is false when fewer than the minimum number of providers traded
// in the window. It does not change the index.
func (x *Index) Value(now time.Time) (price int64, ok bool) {
	cut := now.Add(-x.window)
	byProvider := make(map[string]int)
	var prints []providerPrint
	for i := range x.fills {
		f := &x.fills[i]
		if !f.Time.After(cut) || f.Time.After(now) {
			continue
		}
		j, seen := byProvider[f.Provider]
		if !seen {
			j = len(prints)
			byProvider[f.Provider] = j
			prints = append(prints, providerPrint{})
		}
		p := &prints[j]
		p.vol += uint64(f.Quantity)
		p.notional = p.notional.addMul(uint64(f.Quantity), uint64(f.Price))
	}
	n := len(prints)
	if n == 0 || n < x.minProviders {
		return 0, false
	}
	vols := make([]uint64, n)
	prices := make([]uint64, n)
	for i := range prints {
		prints[i].price = prints[i].notional.divRound(prints[i].vol)
		vols[i], prices[i] = prints[i].vol, prints[i].price
	}
	slices.Sort(vols)
	slices.Sort(prices)
	capVol, mid := vols[(n-1)/2], prices[(n-1)/2]
	lo, hi := mid/2, 2*mid
	var num u128
	var den uint64
	for _, p := range prints {
		w := min(p.vol, capVol)
		num = num.addMul(w, min(max(p.price, lo), hi))
		den += w
	}
	return int64(num.divRound(den)), true
}

// u128 is an unsigned 128-bit integer for sums of quantity × price.
type u128 struct{ hi, lo uint64 }

// addMul returns a + x*y.
func (a u128) addMul(x, y uint64) u128 {
	h, l := bits.Mul64(x, y)
	lo, c := bits.Add64(a.lo, l, 0)
	hi, _ := bits.Add64(a.hi, h, c)
	return u128{hi, lo}
}

// divRound returns a/d rounded half up; the quotient must fit in 64 bits.
func (a u128) divRound(d uint64) uint64 {
	a = a.addMul(d/2, 1)
	if a.hi >= d {
		panic("market: u128 quotient overflows")
	}
	q, _ := bits.Div64(a.hi, a.lo, d)
	return q
}
