package market

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkThroughputSteps is BenchmarkThroughput done as a node does it
// today, step by step: Match, ApplyFill of each proposal, Add of what is
// left. It validates each order twice and looks each ID up more than once:
// the price of separate calls, which Take saves.
func BenchmarkThroughputSteps(b *testing.B) {
	book := newTestBook(b)
	ids := newIDSource(b, 1, 1<<21)
	fillIDs := newIDSource(b, 2, 1<<21)
	buy := testBid("", "buyer", geseqQty, 0)
	sell := testAsk("", "seller", geseqQty, 0)
	bid := int64(geseqLow+geseqHigh) / 2
	ask := bid - geseqTick
	rng := rand.New(rand.NewPCG(1, 2))
	buyID, sellID := "none", "none"
	next, fills := 0, 0
	buf := make([]Match, 0, 4)
	var err error
	take := func(o *Order) int {
		if buf, err = book.MatchAppend(buf[:0], o, bookT0); err != nil {
			b.Fatal(err)
		}
		var took uint32
		for _, m := range buf {
			fills++
			f := m.Fill(o, bookT0)
			f.ID = fillIDs.id(fills)
			if err := book.ApplyFill(f); err != nil {
				b.Fatal(err)
			}
			took += m.Quantity
		}
		if took < o.Quantity {
			if err := book.Add(o, bookT0); err != nil {
				b.Fatal(err)
			}
		}
		return len(buf)
	}
	report := startTimer(b)
	for range b.N {
		d := int64(geseqTick)
		if rng.IntN(10) < 5 {
			d = -d
		}
		bid, ask = bid+d, ask+d
		if bid < geseqLow {
			bid, ask = bid+geseqTick, ask+geseqTick
		} else if bid > geseqHigh {
			bid, ask = bid-geseqTick, ask-geseqTick
		}
		if err := book.Cancel(buyID, "buyer"); err != nil && !isNotFound(err) {
			b.Fatal(err)
		}
		if err := book.Cancel(sellID, "seller"); err != nil && !isNotFound(err) {
			b.Fatal(err)
		}
		buyID, sellID = ids.id(next), ids.id(next+1)
		next += 2
		buy.ID, buy.Price = buyID, bid
		if n := take(buy); n != 0 {
			b.Fatalf("buy took %d", n)
		}
		sell.ID, sell.Price = sellID, ask
		if n := take(sell); n != 1 {
			b.Fatalf("sell took %d", n)
		}
	}
	report(4)
}

// BenchmarkThroughputDeepSteps is BenchmarkThroughputDeep done step by
// step: Match (nothing crosses), then Add.
func BenchmarkThroughputDeepSteps(b *testing.B) {
	book := newTestBook(b)
	ids := newIDSource(b, 3, 1<<21)
	cancels := newIDSource(b, 3, 1<<21) // the same IDs, read ahead as the cancels come
	buy := testBid("", "buyer", geseqQty, 0)
	sell := testAsk("", "seller", geseqQty, 0)
	const mid, steps = (geseqLow + geseqHigh) / 2, (geseqHigh - geseqLow) / geseqTick / 2
	order := func(i int) *Order {
		step := int64(i%steps+1) * geseqTick
		if i&1 == 0 {
			buy.ID, buy.Price = ids.id(i), mid-step
			return buy
		}
		sell.ID, sell.Price = ids.id(i), mid+step
		return sell
	}
	buf := make([]Match, 0, 4)
	var err error
	add := func(o *Order) {
		if buf, err = book.MatchAppend(buf[:0], o, bookT0); err != nil || len(buf) != 0 {
			b.Fatalf("Match = %d, %v", len(buf), err)
		}
		if err := book.Add(o, bookT0); err != nil {
			b.Fatal(err)
		}
	}
	for i := range geseqDeepWindow {
		add(order(i))
	}
	report := startTimer(b)
	for i := range b.N {
		add(order(geseqDeepWindow + i))
		maker := "buyer"
		if i&1 != 0 {
			maker = "seller"
		}
		if err := book.Cancel(cancels.id(i), maker); err != nil {
			b.Fatal(err)
		}
	}
	report(2)
}
