package market

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func newTestIndex(t *testing.T, opts ...IndexOption) *Index {
	t.Helper()
	x, err := NewIndex(bookMarket, "USD", opts...)
	if err != nil {
		t.Fatalf("NewIndex() = %v", err)
	}
	return x
}

type indexPrint struct {
	provider, buyer string
	qty             uint32
	price           int64
	ago             time.Duration
}

func addPrints(t *testing.T, x *Index, now time.Time, prints []indexPrint) {
	t.Helper()
	for i, p := range prints {
		f := Fill{
			ID: fmt.Sprintf("f%d-%s-%s", i, p.provider, p.buyer), Market: bookMarket, Currency: "USD",
			BidID: fmt.Sprintf("b%d", i), AskID: fmt.Sprintf("a%d", i), Buyer: p.buyer, Provider: p.provider,
			Quantity: p.qty, Price: p.price, LeaseType: Spot, Time: now.Add(-p.ago),
		}
		if err := x.Add(f, now); err != nil {
			t.Fatalf("Add(%s) = %v", f.ID, err)
		}
	}
}

func TestIndexValue(t *testing.T) {
	now := bookT0.Add(2 * time.Hour)
	tests := []struct {
		name   string
		prints []indexPrint
		opts   []IndexOption
		want   int64
		ok     bool
	}{
		{"empty", nil, nil, 0, false},
		{"one provider is its VWAP", []indexPrint{{"p1", "u1", 2, 1_000_000, 0}, {"p1", "u2", 1, 4_000_000, time.Minute}}, nil, 2_000_000, true},
		{"rounds half up", []indexPrint{{"p1", "u1", 1, 1, 0}, {"p1", "u2", 1, 2, 0}}, nil, 2, true},
		{"volume capped at the median provider's", []indexPrint{
			{"p1", "u1", 10, 2_000_000, 0}, {"p2", "u1", 10, 2_200_000, 0}, {"p3", "u1", 1000, 2_100_000, 0},
		}, nil, 2_100_000, true},
		{"small providers weigh their own volume", []indexPrint{
			{"p1", "u1", 1, 1_000_000, 0}, {"p2", "u1", 10, 2_000_000, 0}, {"p3", "u1", 10, 2_000_000, 0},
		}, nil, 1_952_381, true}, // (1*1 + 10*2 + 10*2) / 21
		{"outside the window", []indexPrint{{"p1", "u1", 1, 1_000_000, 0}, {"p2", "u1", 1, 9_000_000, 61 * time.Minute}}, nil, 1_000_000, true},
		{"shorter window", []indexPrint{{"p1", "u1", 1, 1_000_000, 0}, {"p2", "u1", 1, 1_200_000, 20 * time.Minute}}, []IndexOption{WithWindow(10 * time.Minute)}, 1_000_000, true},
		{"too few providers", []indexPrint{{"p1", "u1", 1, 1_000_000, 0}, {"p1", "u2", 1, 1_000_000, 0}}, []IndexOption{WithMinProviders(2)}, 0, false},
		{"enough providers", []indexPrint{{"p1", "u1", 1, 1_000_000, 0}, {"p2", "u2", 1, 1_500_000, 0}}, []IndexOption{WithMinProviders(2)}, 1_250_000, true},
		{"price clamped to twice the median", []indexPrint{
			{"p1", "u1", 1, 1_000_000, 0}, {"p2", "u1", 1, 1_000_000, 0}, {"p3", "u1", 1, 5_000_000, 0},
		}, nil, 1_333_333, true},
		{"price clamped to half the median", []indexPrint{
			{"p1", "u1", 1, 1_000_000, 0}, {"p2", "u1", 1, 1_000_000, 0}, {"p3", "u1", 1, 1, 0},
		}, nil, 833_333, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := newTestIndex(t, tt.opts...)
			addPrints(t, x, now, tt.prints)
			if got, ok := x.Value(now); got != tt.want || ok != tt.ok {
				t.Errorf("Value() = %d, %v, want %d, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

// TestIndexWashTrading: one provider trades huge volume with itself through
// sybil buyers, at an inflated price. A plain VWAP follows it; the index
// moves by at most the provider's capped share of the distance.
func TestIndexWashTrading(t *testing.T) {
	now := bookT0
	var honest []indexPrint
	for i := range 9 {
		honest = append(honest, indexPrint{fmt.Sprintf("honest%d", i), fmt.Sprintf("buyer%d", i), 10, 2_000_000 + int64(i)*10_000, time.Duration(i) * time.Minute})
	}
	base := newTestIndex(t)
	addPrints(t, base, now, honest)
	baseline, _ := base.Value(now)

	for _, washPrice := range []int64{2_400_000, 3_000_000, 100_000_000} {
		t.Run(FormatMicros(washPrice, "USD"), func(t *testing.T) {
			prints := append([]indexPrint(nil), honest...)
			for i := range 200 { // 200 sybil buyers, 50 GPUs each: 10,000 GPUs
				prints = append(prints, indexPrint{"washer", fmt.Sprintf("sybil%d", i), 50, washPrice, time.Duration(i%60) * time.Second})
			}
			x := newTestIndex(t)
			addPrints(t, x, now, prints)
			got, _ := x.Value(now)
			var notional, vol int64
			for _, p := range prints {
				notional += int64(p.qty) * p.price
				vol += int64(p.qty)
			}
			if naive := notional / vol; naive < washPrice*9/10 {
				t.Fatalf("plain VWAP = %d: the wash volume should dominate it", naive)
			}
			// Ten providers: at least six carry the full cap, so the washer
			// holds at most 1/6 of the weight, at a price clamped to 2x median.
			limit := (min(washPrice, 2*2_040_000) - baseline) / 6
			if move := got - baseline; move < 0 || move > limit {
				t.Errorf("Value() = %d, baseline %d: moved %d, want at most %d", got, baseline, move, limit)
			}
		})
	}
}

func TestIndexAdd(t *testing.T) {
	x := newTestIndex(t)
	good := Fill{ID: "f1", Market: bookMarket, Currency: "USD", BidID: "b", AskID: "a", Buyer: "u", Provider: "p", Quantity: 1, Price: 1_000_000, LeaseType: Spot, Time: bookT0}
	if err := x.Add(good, bookT0); err != nil {
		t.Fatalf("Add(f1) = %v", err)
	}
	tests := []struct {
		name string
		mod  func(*Fill)
		want error
	}{
		{"duplicate", func(f *Fill) {}, ErrDuplicate},
		{"self-trade", func(f *Fill) { f.ID, f.Buyer = "f2", "p" }, ErrSelfMatch},
		{"from the future", func(f *Fill) { f.ID, f.Time = "f2", bookT0.Add(MaxClockSkew+time.Second) }, ErrBadFill},
		{"other currency", func(f *Fill) { f.ID, f.Currency = "f2", "CNY" }, ErrWrongBook},
		{"bad price", func(f *Fill) { f.ID, f.Price = "f2", 0 }, ErrBadFill},
		{"too old is ignored", func(f *Fill) { f.ID, f.Time = "f2", bookT0.Add(-2*time.Hour) }, nil},
	}
	for _, tt := range tests {
		f := good
		tt.mod(&f)
		if err := x.Add(f, bookT0); !errors.Is(err, tt.want) || (err == nil) != (tt.want == nil) {
			t.Errorf("%s: Add(%s) = %v, want %v", tt.name, f.ID, err, tt.want)
		}
	}
	if n := len(x.fills); n != 1 {
		t.Errorf("index holds %d fills, want 1", n)
	}
	// Pruned with time; a replay then is too old to count.
	later := bookT0.Add(DefaultIndexWindow)
	if err := x.Add(Fill{ID: "f3", Market: bookMarket, Currency: "USD", BidID: "b3", AskID: "a3", Buyer: "u", Provider: "p", Quantity: 1, Price: 3_000_000, LeaseType: Spot, Time: later}, later); err != nil {
		t.Fatal(err)
	}
	if err := x.Add(good, later); err != nil || len(x.fills) != 1 {
		t.Errorf("Add(replayed f1 after the window) = %v with %d fills held, want nil with 1", err, len(x.fills))
	}
	if got, _ := x.Value(later); got != 3_000_000 {
		t.Errorf("Value() = %d, want 3000000", got)
	}
	if _, err := NewIndex(bookMarket, "USD", WithWindow(0)); err == nil {
		t.Errorf("NewIndex(WithWindow(0)) = nil error, want one")
	}
	if _, err := NewIndex("x y", "USD"); !errors.Is(err, ErrOrderMarket) {
		t.Errorf("NewIndex(bad market) = %v, want %v", err, ErrOrderMarket)
	}
}

func TestIndexNoOverflow(t *testing.T) {
	x := newTestIndex(t)
	var prints []indexPrint
	for i := range 3000 {
		prints = append(prints, indexPrint{fmt.Sprintf("p%d", i%3), fmt.Sprintf("u%d", i), MaxOrderQuantity, MaxPriceMicros, 0})
	}
	addPrints(t, x, bookT0, prints)
	if got, ok := x.Value(bookT0); got != MaxPriceMicros || !ok {
		t.Errorf("Value() = %d, %v, want %d, true", got, ok, int64(MaxPriceMicros))
	}
}
