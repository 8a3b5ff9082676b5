package market

import (
	"testing"
	"time"
)

func TestExplain(t *testing.T) {
	b, err := NewBook(bookMarket, "USD")
	if err != nil {
		t.Fatal(err)
	}
	asks := []*Order{
		testAsk("long", "p1", 2, 1_000_000), // min 1h
		withOrder(testAsk("nm", "p2", 2, 1_100_000), func(o *Order) { o.MinDuration = time.Second; o.Facts.Region = "CN-NM" }),
		withOrder(testAsk("small", "p3", 2, 1_200_000), func(o *Order) { o.MinDuration = time.Second; o.Facts.MemoryBytes = 40 << 30 }),
		withOrder(testAsk("mine", "u1", 2, 1_300_000), func(o *Order) { o.MinDuration = time.Second }),
		withOrder(testAsk("od", "p4", 2, 1_400_000), func(o *Order) { o.MinDuration = time.Second; o.LeaseType = OnDemand }),
		withOrder(testAsk("dear", "p5", 2, 9_000_000), func(o *Order) { o.MinDuration = time.Second }), // above the bid: not crossing
	}
	for _, a := range asks {
		if err := b.Add(a, bookT0); err != nil {
			t.Fatal(err)
		}
	}
	bid := withOrder(testBid("b", "u1", 2, 2_000_000), func(o *Order) {
		o.Duration = 10 * time.Second
		o.Constraints = Constraints{Regions: []string{"CN-GZ"}, MinMemoryBytes: 80 << 30}
	})
	got := map[string]string{}
	for _, p := range b.Explain(bid, bookT0) {
		got[p.Reason] = p.Example.ID
		if p.Orders != 1 || p.GPUs != 2 {
			t.Errorf("%s: %d orders, %d GPUs; want 1 and 2", p.Reason, p.Orders, p.GPUs)
		}
	}
	want := map[string]string{PassMinDuration: "long", PassRegion: "nm", PassVRAM: "small", PassOwnOrder: "mine", PassLeaseType: "od"}
	if len(got) != len(want) {
		t.Errorf("Explain = %v, want %v", got, want)
	}
	for r, id := range want {
		if got[r] != id {
			t.Errorf("reason %s: example %q, want %q", r, got[r], id)
		}
	}
	if ms, _ := b.Match(bid, bookT0); len(ms) != 0 {
		t.Errorf("Match = %+v: the book trades what Explain says it passes over", ms)
	}
}

func TestMatchWholeAllOrNone(t *testing.T) {
	b, _ := NewBook(bookMarket, "USD")
	for _, a := range []*Order{testAsk("a2", "p1", 2, 1_000_000), testAsk("a4", "p2", 4, 1_100_000), testAsk("a6", "p3", 6, 1_200_000)} {
		if err := b.Add(a, bookT0); err != nil {
			t.Fatal(err)
		}
	}
	aon := withOrder(testBid("t", "u1", 6, 2_000_000), func(o *Order) { o.AllOrNone = true })
	m, ok := b.MatchWhole(aon, bookT0, nil)
	if !ok || m.OrderID != "a6" || m.Quantity != 6 {
		t.Fatalf("MatchWhole = %+v, %v; want all 6 from a6 alone", m, ok)
	}
	if _, ok := b.MatchWhole(aon, bookT0, func(id string) bool { return id == "a6" }); ok {
		t.Error("MatchWhole took a skipped order, or combined smaller ones")
	}
	big := withOrder(testBid("t2", "u1", 7, 2_000_000), func(o *Order) { o.AllOrNone = true })
	if _, ok := b.MatchWhole(big, bookT0, nil); ok {
		t.Error("MatchWhole filled 7 from orders of at most 6")
	}
	ps := b.Explain(big, bookT0)
	if len(ps) != 1 || ps[0].Reason != PassAllOrNone || ps[0].Orders != 3 {
		t.Errorf("Explain = %+v, want the three asks passed over as all-or-none", ps)
	}
}
