package market

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// mixedRegions are the asks' regions in the mixed workload: two east, two
// west, one abroad.
var mixedRegions = []string{"CN-SH", "CN-GZ", "CN-NM", "CN-GZ-W", "US-CA"}

// BenchmarkMixed is the engine's mixed workload on one core, one op per
// iteration, against a book holding 10,000 resting orders (asks over 200
// price levels in five regions, bids under them):
//
//   - 45% add: a new ask or bid (alternating) at a random level, resting;
//   - 40% cancel: a random resting order;
//   - 15% match: a crossing bid for 8 GPUs and 1-8 h, half of them
//     constrained to a region prefix that only one ask in 100 satisfies
//     ("US-"), the other half to any "CN-" region; Match only proposes.
//
// Orders are built before the timer starts; ops/s is reported.
func BenchmarkMixed(b *testing.B) {
	rng := rand.New(rand.NewPCG(7, 11))
	book := newTestBook(b)
	const resting = 10_000
	live := make([]*Order, 0, resting+b.N)
	mk := func(i int, side Side) *Order {
		var o *Order
		if side == Ask {
			o = testAsk(fmt.Sprintf("a%09d", i), fmt.Sprintf("p%d", i%997), 8, 2_000_000+int64(rng.IntN(200))*1_000)
			r := mixedRegions[rng.IntN(4)]
			if rng.IntN(100) == 0 {
				r = "US-CA"
			}
			o.Facts.Region = r
			o.MinDuration, o.MaxDuration = time.Hour, time.Duration(1+rng.IntN(24))*time.Hour
		} else {
			o = testBid(fmt.Sprintf("b%09d", i), fmt.Sprintf("u%d", i%991), 4, 1_000_000+int64(rng.IntN(200))*1_000)
		}
		return o
	}
	for i := range resting {
		o := mk(i, Side(1+i%2))
		mustAdd(b, book, o)
		live = append(live, o)
	}
	type op struct {
		kind  int // 0 add, 1 cancel, 2 match
		order *Order
	}
	ops := make([]op, b.N)
	for i := range ops {
		switch r := rng.IntN(100); {
		case r < 45:
			ops[i] = op{0, mk(resting+i, Side(1+i%2))}
		case r < 85:
			ops[i] = op{kind: 1}
		default:
			t := testBid(fmt.Sprintf("t%09d", i), "taker", 8, 2_300_000)
			t.Duration = time.Duration(1+rng.IntN(8)) * time.Hour
			if i%2 == 0 {
				t.Constraints.Regions = []string{"US-"}
			} else {
				t.Constraints.Regions = []string{"CN-"}
			}
			ops[i] = op{2, t}
		}
	}
	picks := make([]int, b.N)
	for i := range picks {
		picks[i] = rng.IntN(1 << 30)
	}
	buf := make([]Match, 0, 64)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		switch o := ops[i]; o.kind {
		case 0:
			if err := book.Add(o.order, bookT0); err != nil {
				b.Fatal(err)
			}
			live = append(live, o.order)
		case 1:
			if len(live) == 0 {
				continue
			}
			j := picks[i] % len(live)
			v := live[j]
			live[j] = live[len(live)-1]
			live = live[:len(live)-1]
			if err := book.Cancel(v.ID, v.Maker); err != nil {
				b.Fatal(err)
			}
		case 2:
			var err error
			if buf, err = book.MatchAppend(buf[:0], o.order, bookT0); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
}
