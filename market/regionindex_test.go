package market

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// refMatch is Match by a plain scan of every order in price-time priority,
// without the region index: what the indexed match must equal.
func refMatch(b *Book, o *Order, now time.Time) []Match {
	var out []Match
	left := o.Quantity
	opp := b.sideOf(o.Side.Opposite())
	for i := len(opp.levels) - 1; i >= 0 && left > 0; i-- {
		l := opp.levels[i]
		if !crosses(o.Side, o.Price, l.price) {
			break
		}
		for e := l.head; e != nil && left > 0; e = e.next {
			if e.exp <= now.UnixNano() || e.o.Maker == o.Maker || (e.o.AllOrNone && e.remaining > left) {
				continue
			}
			bid, ask := o, &e.o
			if o.Side == Ask {
				bid, ask = ask, bid
			}
			if !accepts(bid, ask) {
				continue
			}
			q := min(e.remaining, left)
			out = append(out, Match{OrderID: e.o.ID, Maker: e.o.Maker, Quantity: q, Price: l.price, LeaseType: ask.LeaseType})
			left -= q
		}
	}
	return out
}

// TestRegionIndexMatchesScan adds, cancels and matches at random and checks
// every constrained match against the plain scan, and the index's links.
func TestRegionIndexMatchesScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 9))
	regions := []string{"CN-SH", "CN-GZ", "CN-NM", "CN-GZ-W", "US-CA", "US-TX", "DE-BE", "JP-13", "SG", "FR-75"}
	patterns := [][]string{{"US-"}, {"CN-"}, {"CN-GZ"}, {"CN-GZ-W", "US-CA"}, {"SG"}, {"CN-", "US-", "DE-", "JP-", "SG", "FR-"}, {"KR-"}}
	book := newTestBook(t)
	var live []*Order
	for step := range 4000 {
		switch r := rng.IntN(10); {
		case r < 6:
			o := testAsk(fmt.Sprintf("a%d", step), fmt.Sprintf("p%d", rng.IntN(30)), uint32(1+rng.IntN(8)), 2_000_000+int64(rng.IntN(20))*10_000)
			o.Facts.Region = regions[rng.IntN(len(regions))]
			o.MaxDuration = time.Duration(1+rng.IntN(24)) * time.Hour
			mustAdd(t, book, o)
			live = append(live, o)
		case r < 8 && len(live) > 0:
			j := rng.IntN(len(live))
			if err := book.Cancel(live[j].ID, live[j].Maker); err != nil {
				t.Fatal(err)
			}
			live = slices.Delete(live, j, j+1)
		default:
			bid := testBid(fmt.Sprintf("b%d", step), "u1", uint32(1+rng.IntN(40)), 2_000_000+int64(rng.IntN(25))*10_000)
			bid.Duration = time.Duration(1+rng.IntN(24)) * time.Hour
			bid.Constraints.Regions = patterns[rng.IntN(len(patterns))]
			got, err := book.Match(bid, bookT0)
			if err != nil {
				t.Fatal(err)
			}
			if want := refMatch(book, bid, bookT0); !slices.Equal(got, want) {
				t.Fatalf("step %d: Match(%v) = %v, want %v", step, bid.Constraints.Regions, got, want)
			}
		}
		if step%100 == 0 {
			if err := checkBook(book); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
		}
	}
}
