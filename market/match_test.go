package market

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"
)

func matchIDs(ms []Match) []string {
	var ids []string
	for _, m := range ms {
		ids = append(ids, m.OrderID)
	}
	return ids
}

func TestMatchRules(t *testing.T) {
	// Resting asks, best first: a1 (p1, 2.00, 2 GPUs), a2 (p2, 2.00, AON 4),
	// a3 (p3, 2.10, 4, US-CA self-reported 40 GB, on-demand, 1-4 h).
	resting := func() *Book {
		b := newTestBook(t)
		mustAdd(t, b,
			testAsk("a1", "p1", 2, 2_000_000),
			withOrder(testAsk("a2", "p2", 4, 2_000_000), func(o *Order) { o.AllOrNone = true }),
			withOrder(testAsk("a3", "p3", 4, 2_100_000), func(o *Order) {
				o.Facts = Facts{Region: "US-CA", Attestation: AttestSelfReported, MemoryBytes: 40 << 30}
				o.LeaseType = OnDemand
				o.MaxDuration = 4 * time.Hour
			}),
		)
		return b
	}
	anyLease := func(o *Order) { o.Constraints.LeaseTypes = []LeaseType{Spot, OnDemand} }
	tests := []struct {
		name    string
		taker   *Order
		want    []string
		wantQty []uint32
		err     error
	}{
		{"takes across levels", withOrder(testBid("t", "u1", 10, 2_100_000), anyLease), []string{"a1", "a2", "a3"}, []uint32{2, 4, 4}, nil},
		{"own lease type only", testBid("t", "u1", 10, 2_100_000), []string{"a1", "a2"}, []uint32{2, 4}, nil},
		{"AON ask taken whole or passed over", withOrder(testBid("t", "u1", 5, 2_100_000), anyLease), []string{"a1", "a3"}, []uint32{2, 3}, nil},
		{"AON ask taken whole", withOrder(testBid("t", "u1", 6, 2_000_000), anyLease), []string{"a1", "a2"}, []uint32{2, 4}, nil},
		{"self-match passed over", withOrder(testBid("t", "p1", 6, 2_100_000), anyLease), []string{"a2", "a3"}, []uint32{4, 2}, nil},
		{"region constraint", withOrder(testBid("t", "u1", 10, 2_100_000), func(o *Order) {
			anyLease(o)
			o.Constraints.Regions = []string{"US-"}
		}), []string{"a3"}, []uint32{4}, nil},
		{"attestation constraint", withOrder(testBid("t", "u1", 10, 2_100_000), func(o *Order) {
			anyLease(o)
			o.Constraints.MinAttestation = AttestCCEvidence
		}), []string{"a1", "a2"}, []uint32{2, 4}, nil},
		{"attestation above every ask", withOrder(testBid("t", "u1", 10, 2_100_000), func(o *Order) {
			o.Constraints.MinAttestation = AttestCCVerified
		}), nil, nil, nil},
		{"memory constraint", withOrder(testBid("t", "u1", 10, 2_100_000), func(o *Order) {
			anyLease(o)
			o.Constraints.MinMemoryBytes = 80 << 30
		}), []string{"a1", "a2"}, []uint32{2, 4}, nil},
		{"duration outside the ask's range", withOrder(testBid("t", "u1", 10, 2_100_000), func(o *Order) {
			anyLease(o)
			o.Duration = 8 * time.Hour
		}), []string{"a1", "a2"}, []uint32{2, 4}, nil},
		{"AON taker filled completely", withOrder(testBid("t", "u1", 6, 2_000_000), func(o *Order) { o.AllOrNone = true }), []string{"a1", "a2"}, []uint32{2, 4}, nil},
		{"AON taker cannot fill", withOrder(testBid("t", "u1", 7, 2_000_000), func(o *Order) { o.AllOrNone = true }), nil, nil, nil},
		{"IOC takes what it can", withOrder(testBid("t", "u1", 9, 2_000_000), func(o *Order) { o.TimeInForce = IOC }), []string{"a1", "a2"}, []uint32{2, 4}, nil},
		{"post-only would cross", withOrder(testBid("t", "u1", 1, 2_000_000), func(o *Order) { o.PostOnly = true }), nil, nil, ErrWouldCross},
		{"post-only below the asks", withOrder(testBid("t", "u1", 1, 1_990_000), func(o *Order) { o.PostOnly = true }), nil, nil, nil},
		{"post-only crossing only what it may not take", withOrder(testBid("t", "p1", 1, 2_000_000), func(o *Order) {
			o.PostOnly = true
			o.Constraints.Regions = []string{"CN-GZ"}
			o.Constraints.MinAttestation = AttestCCVerified
		}), nil, nil, nil},
		{"wrong market", withOrder(testBid("t", "u1", 1, 2_000_000), func(o *Order) { o.Currency = "EUR" }), nil, nil, ErrWrongBook},
		{"invalid taker", testBid("t", "u1", 0, 2_000_000), nil, nil, ErrOrderQuantity},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := resting()
			ms, err := b.Match(tt.taker, bookT0)
			var qty []uint32
			for _, m := range ms {
				qty = append(qty, m.Quantity)
			}
			if !errors.Is(err, tt.err) || (err == nil) != (tt.err == nil) || !reflect.DeepEqual(matchIDs(ms), tt.want) || !reflect.DeepEqual(qty, tt.wantQty) {
				t.Errorf("Match(%s) = %v %v, %v, want %v %v, %v", tt.name, matchIDs(ms), qty, err, tt.want, tt.wantQty, tt.err)
			}
			if b.Len() != 3 {
				t.Errorf("Match changed the book: Len() = %d, want 3", b.Len())
			}
		})
	}
}

func TestMatchAskTaker(t *testing.T) {
	b := newTestBook(t)
	mustAdd(t, b,
		withOrder(testBid("b1", "u1", 2, 2_200_000), func(o *Order) { o.Constraints.Regions = []string{"US-CA"} }),
		testBid("b2", "u2", 2, 2_100_000),
		withOrder(testBid("b3", "u3", 2, 2_050_000), func(o *Order) { o.LeaseType = Reserved }),
	)
	ms, err := b.Match(testAsk("t", "p1", 8, 2_000_000), bookT0)
	want := []Match{{"b2", "u2", 2, 2_100_000, Spot}}
	if err != nil || !reflect.DeepEqual(ms, want) {
		t.Errorf("Match(ask) = %+v, %v, want %+v", ms, err, want)
	}
	f := ms[0].Fill(testAsk("t", "p1", 8, 2_000_000), bookT0)
	wantFill := Fill{Market: bookMarket, Currency: "USD", BidID: "b2", AskID: "t", Buyer: "u2", Provider: "p1", Quantity: 2, Price: 2_100_000, LeaseType: Spot, Time: bookT0}
	if f != wantFill {
		t.Errorf("Match.Fill() = %+v, want %+v", f, wantFill)
	}
}

func TestMatchRestingTaker(t *testing.T) {
	b := newTestBook(t)
	own := testBid("b1", "u1", 4, 2_000_000)
	mustAdd(t, b, own, testAsk("a1", "p1", 8, 2_000_000))
	mustApply(t, b, Fill{ID: "f1", BidID: "b1", AskID: "a1", Buyer: "u1", Provider: "p1", Quantity: 3, Price: 2_000_000})
	ms, err := b.Match(own, bookT0)
	if err != nil || len(ms) != 1 || ms[0].Quantity != 1 {
		t.Errorf("Match(own resting b1 with 1 left) = %+v, %v, want one match for 1", ms, err)
	}
	mustApply(t, b, Fill{ID: "f2", BidID: "b1", AskID: "a1", Buyer: "u1", Provider: "p1", Quantity: 1, Price: 2_000_000})
	if _, err := b.Match(own, bookT0); !errors.Is(err, ErrDuplicate) {
		t.Errorf("Match(filled b1) = %v, want %v", err, ErrDuplicate)
	}
}

func TestCrossing(t *testing.T) {
	b := newTestBook(t)
	mustAdd(t, b,
		testBid("mine1", "me", 3, 2_100_000),
		testBid("mine2", "me", 3, 2_050_000),
		withOrder(testBid("mine-po", "me", 3, 2_100_000), func(o *Order) { o.PostOnly = true }),
		testBid("mine-low", "me", 3, 1_000_000),
		// theirs crosses my ask but wants another region: passed over.
		withOrder(testBid("theirs", "u2", 3, 2_200_000), func(o *Order) { o.Constraints.Regions = []string{"US-CA"} }),
		testAsk("my-ask", "me", 1, 1_900_000),
	)
	if got := b.Crossing("me", bookT0); len(got) != 0 {
		t.Fatalf("Crossing(me) with only my own ask = %+v, want none", got)
	}
	// A provider rests a post-only ask through the bids: my resting bids
	// are found, and take without overlapping.
	mustAdd(t, b, withOrder(testAsk("new", "p1", 4, 2_000_000), func(o *Order) { o.PostOnly = true }))
	got := b.Crossing("me", bookT0)
	want := []Cross{
		{"mine1", []Match{{"new", "p1", 3, 2_000_000, Spot}}},
		{"mine2", []Match{{"new", "p1", 1, 2_000_000, Spot}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Crossing(me) = %+v, want %+v", got, want)
	}
	if got := b.Crossing("nobody", bookT0); len(got) != 0 {
		t.Errorf("Crossing(nobody) = %+v, want none", got)
	}
	if got := b.Crossing("me", bookT0.Add(2*time.Hour)); len(got) != 0 {
		t.Errorf("Crossing(me) after expiry = %+v, want none", got)
	}
}

func mustApply(t *testing.T, b *Book, f Fill) {
	t.Helper()
	f.Market, f.Currency = bookMarket, "USD"
	if f.LeaseType == 0 {
		f.LeaseType = Spot
	}
	if f.Time.IsZero() {
		f.Time = bookT0
	}
	if err := b.ApplyFill(f); err != nil {
		t.Fatalf("ApplyFill(%s) = %v", f.ID, err)
	}
}

func TestApplyFill(t *testing.T) {
	b := newTestBook(t)
	mustAdd(t, b,
		testBid("b1", "u1", 4, 2_100_000),
		testAsk("a1", "p1", 3, 2_000_000),
		testAsk("a2", "p2", 3, 2_000_000),
	)
	fill := func(id, bid, ask, buyer, provider string, q uint32, price int64, mod ...func(*Fill)) Fill {
		f := Fill{ID: id, Market: bookMarket, Currency: "USD", BidID: bid, AskID: ask, Buyer: buyer, Provider: provider, Quantity: q, Price: price, LeaseType: Spot, Time: bookT0}
		for _, m := range mod {
			m(&f)
		}
		return f
	}
	steps := []struct {
		name string
		f    Fill
		want error
	}{
		{"partial", fill("f1", "b1", "a1", "u1", "p1", 2, 2_000_000), nil},
		{"same fill again", fill("f1", "b1", "a1", "u1", "p1", 2, 2_000_000), ErrDuplicate},
		{"overfill the ask", fill("f2", "b1", "a1", "u1", "p1", 2, 2_000_000), ErrOverfill},
		{"fills a1", fill("f3", "b1", "a1", "u1", "p1", 1, 2_000_000), nil},
		{"a1 already filled", fill("f4", "b1", "a1", "u1", "p1", 1, 2_000_000), ErrOverfill},
		{"wrong buyer", fill("f5", "b1", "a2", "u9", "p2", 1, 2_000_000), ErrBadFill},
		{"bid ID is an ask", fill("f5", "a2", "b1", "p2", "u1", 1, 2_000_000), ErrBadFill},
		{"price above the bid", fill("f5", "b1", "a2", "u1", "p2", 1, 2_200_000), ErrBadFill},
		{"price below the ask", fill("f5", "b1", "a2", "u1", "p2", 1, 1_900_000), ErrBadFill},
		{"lease type not the ask's", fill("f5", "b1", "a2", "u1", "p2", 1, 2_000_000, func(f *Fill) { f.LeaseType = OnDemand }), ErrBadFill},
		{"self-trade", fill("f5", "b1", "a2", "u1", "u1", 1, 2_000_000), ErrSelfMatch},
		{"zero quantity", fill("f5", "b1", "a2", "u1", "p2", 0, 2_000_000), ErrBadFill},
		{"no ID", fill("", "b1", "a2", "u1", "p2", 1, 2_000_000), ErrBadFill},
		{"other market", fill("f5", "b1", "a2", "u1", "p2", 1, 2_000_000, func(f *Fill) { f.Market = "amd-mi300x-192gb" }), ErrWrongBook},
		{"fills b1", fill("f5", "b1", "a2", "u1", "p2", 1, 2_000_000), nil},
		{"overfill the filled bid", fill("f6", "b1", "a2", "u1", "p2", 1, 2_000_000), ErrOverfill},
		{"late joiner: unknown orders", fill("f7", "x-bid", "x-ask", "u7", "p7", 5, 2_500_000, func(f *Fill) { f.Time = bookT0.Add(time.Second) }), nil},
		{"unseen order overfilled", fill("f8", "x-bid", "x-ask2", "u7", "p7", MaxOrderQuantity, 2_500_000), ErrOverfill},
	}
	for _, s := range steps {
		if err := b.ApplyFill(s.f); !errors.Is(err, s.want) || (err == nil) != (s.want == nil) {
			t.Errorf("%s: ApplyFill(%s) = %v, want %v", s.name, s.f.ID, err, s.want)
		}
		if err := checkBook(b); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
	}
	bids, asks := b.Depth(0)
	if len(bids) != 0 || !reflect.DeepEqual(asks, []Level{{2_000_000, 2, 1}}) {
		t.Errorf("Depth(0) = %v, %v, want no bids, a2 with 2 left", bids, asks)
	}
	if p, ok := b.Spot(); p != 2_500_000 || !ok {
		t.Errorf("Spot() = %d, %v, want 2500000 (the late joiner's print is the latest)", p, ok)
	}
	// Filled and replayed orders stay dead.
	if err := b.Add(testBid("b1", "u1", 4, 2_100_000), bookT0.Add(3*time.Minute)); !errors.Is(err, ErrDuplicate) {
		t.Errorf("Add(replayed filled b1) = %v, want %v", err, ErrDuplicate)
	}
}

func TestFillBeforeOrder(t *testing.T) {
	b := newTestBook(t)
	mustApply(t, b, Fill{ID: "f1", BidID: "b1", AskID: "a1", Buyer: "u1", Provider: "p1", Quantity: 2, Price: 2_000_000})
	mustApply(t, b, Fill{ID: "f2", BidID: "b2", AskID: "a1", Buyer: "u2", Provider: "p1", Quantity: 1, Price: 2_000_000})
	// The ask's gossip arrives after its fills: it rests with what is left.
	mustAdd(t, b, testAsk("a1", "p1", 5, 2_000_000))
	if _, rem, ok := b.Lookup("a1"); rem != 2 || !ok {
		t.Errorf("Lookup(a1) remaining = %d, %v, want 2, true", rem, ok)
	}
	// The taker asks Match again for an order whose fills it has applied
	// but which it has not rested yet: only the rest is matched.
	mustAdd(t, b, testAsk("a-other", "p2", 8, 2_000_000))
	if ms, err := b.Match(testBid("b2", "u2", 4, 2_000_000), bookT0); err != nil || len(ms) != 2 || ms[0].Quantity+ms[1].Quantity != 3 {
		t.Errorf("Match(b2 with 1 of 4 filled) = %+v, %v, want 3 GPUs", ms, err)
	}
	if _, err := b.Match(testBid("b1", "u1", 2, 2_000_000), bookT0); !errors.Is(err, ErrDuplicate) {
		t.Errorf("Match(b1 filled before it arrived) = %v, want %v", err, ErrDuplicate)
	}
	// A fully filled one is refused.
	if err := b.Add(testBid("b1", "u1", 2, 2_000_000), bookT0); !errors.Is(err, ErrDuplicate) {
		t.Errorf("Add(b1 filled before it arrived) = %v, want %v", err, ErrDuplicate)
	}
	// A fill that named another maker's order does not count against it.
	mustAdd(t, b, testBid("b2", "someone-else", 3, 2_000_000))
	if _, rem, _ := b.Lookup("b2"); rem != 3 {
		t.Errorf("Lookup(b2) remaining = %d, want 3", rem)
	}
	if err := b.ApplyFill(Fill{ID: "f3", Market: bookMarket, Currency: "USD", BidID: "b9", AskID: "a1", Buyer: "u9", Provider: "p1", Quantity: 3, Price: 2_000_000, LeaseType: Spot, Time: bookT0}); !errors.Is(err, ErrOverfill) {
		t.Errorf("ApplyFill(3 of a1's 2 left) = %v, want %v", err, ErrOverfill)
	}
	// A fill for a cancelled order records the print only.
	mustAdd(t, b, testBid("b3", "u3", 1, 2_000_000))
	if err := b.Cancel("b3", "u3"); err != nil {
		t.Fatal(err)
	}
	mustApply(t, b, Fill{ID: "f4", BidID: "b3", AskID: "a1", Buyer: "u3", Provider: "p1", Quantity: 1, Price: 2_000_000, Time: bookT0.Add(time.Minute)})
	if _, rem, _ := b.Lookup("a1"); rem != 1 {
		t.Errorf("Lookup(a1) remaining = %d, want 1", rem)
	}
	if err := checkBook(b); err != nil {
		t.Error(err)
	}
}

func TestSpotPrice(t *testing.T) {
	fill := func(id string, at time.Duration, price int64) Fill {
		return Fill{ID: id, Market: bookMarket, Currency: "USD", BidID: "b" + id, AskID: "a" + id, Buyer: "u", Provider: "p", Quantity: 1, Price: price, LeaseType: Spot, Time: bookT0.Add(at)}
	}
	fills := []Fill{
		fill("f1", time.Minute, 1_000_000),
		fill("f3", 3*time.Minute, 3_000_000),
		fill("f2", 2*time.Minute, 2_000_000), // late, older: does not move spot
		fill("f4", 3*time.Minute, 4_000_000), // same time, larger ID: wins
		fill("f0", 3*time.Minute, 9_000_000), // same time, smaller ID: loses
	}
	want := []int64{1_000_000, 3_000_000, 3_000_000, 4_000_000, 4_000_000}
	// Every arrival order gives the same final spot.
	for _, perm := range [][]int{{0, 1, 2, 3, 4}, {4, 3, 2, 1, 0}, {2, 4, 0, 3, 1}} {
		b := newTestBook(t)
		for i, j := range perm {
			if err := b.ApplyFill(fills[j]); err != nil {
				t.Fatal(err)
			}
			if perm[0] == 0 {
				if p, _ := b.Spot(); p != want[i] {
					t.Errorf("Spot() after %s = %d, want %d", fills[j].ID, p, want[i])
				}
			}
		}
		if p, _ := b.Spot(); p != 4_000_000 {
			t.Errorf("Spot() after fills in order %v = %d, want 4000000", perm, p)
		}
		if f, _ := b.LastFill(); f.ID != "f4" {
			t.Errorf("LastFill().ID = %s, want f4", f.ID)
		}
	}
}

func TestFillMemoryShed(t *testing.T) {
	b := newTestBook(t)
	mustApply(t, b, Fill{ID: "f1", BidID: "b1", AskID: "a1", Buyer: "u1", Provider: "p1", Quantity: 1, Price: 1})
	b.Sweep(bookT0.Add(fillMemory - time.Second))
	if n := b.fills.len(); n != 1 {
		t.Errorf("fill IDs remembered before the horizon = %d, want 1", n)
	}
	b.Sweep(bookT0.Add(fillMemory))
	if n, m := b.fills.len(), b.tombs.len(); n != 0 || m != 0 {
		t.Errorf("after the horizon: %d fill IDs, %d order IDs remembered, want 0, 0", n, m)
	}
}

func TestMatchAllocations(t *testing.T) {
	book, _ := deepBook(t, 2_000, 200)
	taker := testBid("taker", "u1", 64, 2_050_000)
	buf := make([]Match, 0, 16)
	allocs := testing.AllocsPerRun(100, func() {
		buf, _ = book.MatchAppend(buf[:0], taker, bookT0)
	})
	if allocs != 0 {
		t.Errorf("MatchAppend allocs = %v, want 0", allocs)
	}
}

// TestTakeMatchesSequence drives two books with the same random orders: one
// takes with Take, the other as a node does step by step (Match, ApplyFill
// of each agreed proposal, Add of the remainder). Fills, errors, depth,
// priority order, spot and replay refusals must agree, and both books must
// keep their invariants.
func TestTakeMatchesSequence(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	makers := []string{"m0", "m1", "m2", "m3", "m4"}
	var totalFills, declined int
	defer func() {
		if totalFills < 100 || declined == 0 {
			t.Errorf("%d fills, %d declined: the sequence exercises too little", totalFills, declined)
		}
	}()
	for run := range 20 {
		one, seq := newTestBook(t), newTestBook(t)
		var placed []*Order
		fills := 0
		for step := range 400 {
			o := &Order{
				ID: fmt.Sprintf("r%d-o%d", run, step), Maker: makers[rng.IntN(len(makers))],
				Side: Side(1 + rng.IntN(2)), Market: bookMarket, Currency: "USD",
				Quantity: uint32(1 + rng.IntN(6)), Price: (95 + int64(rng.IntN(11))) * 10_000,
				LeaseType: Spot, Created: bookT0, Expires: bookT0.Add(time.Duration(1+rng.IntN(60)) * time.Minute),
				AllOrNone: rng.IntN(6) == 0, PostOnly: rng.IntN(8) == 0,
			}
			if !o.PostOnly && rng.IntN(6) == 0 {
				o.TimeInForce = IOC
			}
			if o.Side == Bid {
				o.Duration = time.Hour
				if rng.IntN(3) == 0 {
					o.Constraints.Regions = []string{[]string{"CN-", "US-CA"}[rng.IntN(2)]}
				}
			} else {
				o.MinDuration, o.MaxDuration = time.Hour, 2*time.Hour
				o.Facts.Region = []string{"CN-GZ", "US-CA", "CN-SH"}[rng.IntN(3)]
			}
			if rng.IntN(5) == 0 && len(placed) > 0 {
				v := placed[rng.IntN(len(placed))]
				e1, e2 := one.Cancel(v.ID, v.Maker), seq.Cancel(v.ID, v.Maker)
				if Reason(e1) != Reason(e2) {
					t.Fatalf("run %d step %d: Cancel(%s) = %v and %v", run, step, v.ID, e1, e2)
				}
				continue
			}
			decline := rng.Uint64() // bit k: the k-th proposal's maker declines
			var want []Fill
			k := 0
			agree := func(m *Match) string {
				k++
				if decline>>(k%64)&1 != 0 && decline%3 == 0 {
					declined++
					return ""
				}
				fills++
				return fmt.Sprintf("f%d", fills)
			}
			got, err := one.Take(nil, o, bookT0, agree)
			totalFills += len(got)
			// The same, step by step. Fill IDs are given in the same order.
			fills -= len(got)
			k = 0
			ms, merr := seq.Match(o, bookT0)
			if Reason(merr) != Reason(err) {
				t.Fatalf("run %d step %d: Take(%s) = %v, Match = %v", run, step, o.ID, err, merr)
			}
			if merr == nil {
				for _, m := range ms {
					id := agree(&m)
					if id == "" {
						continue
					}
					f := m.Fill(o, bookT0)
					f.ID = id
					if err := seq.ApplyFill(f); err != nil {
						t.Fatalf("run %d step %d: ApplyFill(%+v) = %v", run, step, f, err)
					}
					want = append(want, f)
				}
				var took uint32
				for _, f := range want {
					took += f.Quantity
				}
				if o.TimeInForce == GTC && took < o.Quantity {
					if err := seq.Add(o, bookT0); err != nil {
						t.Fatalf("run %d step %d: Add(rest of %s) = %v", run, step, o.ID, err)
					}
					placed = append(placed, o)
				}
			}
			if !reflect.DeepEqual(got, want) && (len(got) != 0 || len(want) != 0) {
				t.Fatalf("run %d step %d: Take(%s) fills %+v, step by step %+v", run, step, o.ID, got, want)
			}
			b1, a1 := one.Depth(0)
			b2, a2 := seq.Depth(0)
			s1, ok1 := one.Spot()
			s2, ok2 := seq.Spot()
			if !reflect.DeepEqual(b1, b2) || !reflect.DeepEqual(a1, a2) || s1 != s2 || ok1 != ok2 || one.Len() != seq.Len() {
				t.Fatalf("run %d step %d: after %s the books differ: %v %v %d vs %v %v %d", run, step, o.ID, b1, a1, s1, b2, a2, s2)
			}
			for _, side := range []Side{Bid, Ask} {
				var l1, l2 []string
				for o, rem := range one.Orders(side) {
					l1 = append(l1, fmt.Sprintf("%s:%d", o.ID, rem))
				}
				for o, rem := range seq.Orders(side) {
					l2 = append(l2, fmt.Sprintf("%s:%d", o.ID, rem))
				}
				if !slices.Equal(l1, l2) {
					t.Fatalf("run %d step %d: %s orders %v, step by step %v", run, step, side, l1, l2)
				}
			}
			// A replay is refused by both once the order traded or rested.
			if o.TimeInForce == GTC && err == nil {
				if e1, e2 := one.Add(o, bookT0), seq.Add(o, bookT0); e1 == nil || e2 == nil {
					t.Fatalf("run %d step %d: replayed %s: Add = %v and %v, want both refused", run, step, o.ID, e1, e2)
				}
			}
			if err := checkBook(one); err != nil {
				t.Fatalf("run %d step %d: Take's book: %v", run, step, err)
			}
			if err := checkBook(seq); err != nil {
				t.Fatalf("run %d step %d: sequential book: %v", run, step, err)
			}
		}
	}
}

func TestTakeRefuses(t *testing.T) {
	b := newTestBook(t)
	mustAdd(t, b, testAsk("a1", "p1", 4, 2_000_000), withOrder(testBid("b1", "u1", 1, 1_000_000), func(o *Order) { o.ClientKey = "k" }))
	n := 0
	agree := func(*Match) string { n++; return fmt.Sprintf("f%d", n) }
	tests := []struct {
		name string
		o    *Order
		want error
	}{
		{"no ID", testBid("", "u2", 1, 2_000_000), ErrOrderSchema},
		{"resting", testBid("b1", "u1", 1, 1_000_000), ErrDuplicate},
		{"other book", withOrder(testBid("x1", "u2", 1, 2_000_000), func(o *Order) { o.Currency = "EUR" }), ErrWrongBook},
		{"invalid", testBid("x2", "u2", 0, 2_000_000), ErrOrderQuantity},
		{"client key taken", withOrder(testBid("x3", "u1", 1, 2_000_000), func(o *Order) { o.ClientKey = "k" }), ErrDuplicateKey},
		{"post-only crossing", withOrder(testBid("x4", "u2", 1, 2_000_000), func(o *Order) { o.PostOnly = true }), ErrWouldCross},
	}
	for _, tt := range tests {
		if fills, err := b.Take(nil, tt.o, bookT0, agree); !errors.Is(err, tt.want) || len(fills) != 0 {
			t.Errorf("%s: Take = %d fills, %v, want none, %v", tt.name, len(fills), err, tt.want)
		}
	}
	if _, rem, _ := b.Lookup("a1"); rem != 4 || n != 0 {
		t.Fatalf("refused takes traded: a1 has %d left, %d fills agreed", rem, n)
	}
	// The honest take: fills the ask's 4, rests 2.
	fills, err := b.Take(nil, testBid("t1", "u2", 6, 2_000_000), bookT0, agree)
	if err != nil || len(fills) != 1 || fills[0].Quantity != 4 || fills[0].ID != "f1" {
		t.Fatalf("Take(t1) = %+v, %v, want one fill of 4", fills, err)
	}
	if _, rem, ok := b.Lookup("t1"); rem != 2 || !ok {
		t.Errorf("Lookup(t1) = %d, %v, want 2 resting", rem, ok)
	}
	if _, err := b.Take(nil, testBid("t1", "u2", 6, 2_000_000), bookT0, agree); !errors.Is(err, ErrDuplicate) {
		t.Errorf("Take(t1 again) = %v, want %v", err, ErrDuplicate)
	}
	// A fill ID already applied stops the take; nothing rests.
	mustAdd(t, b, testAsk("a2", "p2", 1, 2_000_000))
	fills, err = b.Take(nil, testBid("t2", "u3", 3, 2_000_000), bookT0, func(*Match) string { return "f1" })
	if !errors.Is(err, ErrDuplicate) || len(fills) != 0 {
		t.Errorf("Take(t2 with a used fill ID) = %+v, %v, want %v", fills, err, ErrDuplicate)
	}
	if _, _, ok := b.Lookup("t2"); ok {
		t.Errorf("t2 rests after its take was stopped")
	}
	if err := checkBook(b); err != nil {
		t.Error(err)
	}
}

func TestTakeAllocations(t *testing.T) {
	b := newTestBook(t, WithMemoryLimit(64)) // IDs are forgotten before they come round again
	ids := make([]string, 400)
	for i := range ids {
		ids[i] = fmt.Sprintf("id-%d", i)
	}
	buy, sell := testBid("", "u1", 2, 2_000_000), testAsk("", "p1", 2, 2_000_000)
	fillIDs := make([]string, 400)
	for i := range fillIDs {
		fillIDs[i] = fmt.Sprintf("fill-%d", i)
	}
	i := 0
	next := func(*Match) string { return fillIDs[i/2] }
	dst := make([]Fill, 0, 4)
	// Warm the book's buffers and memory, then measure.
	var err error
	run := func() {
		buy.ID = ids[i%400]
		if dst, err = b.Take(dst[:0], buy, bookT0, next); err != nil || len(dst) != 0 {
			t.Fatalf("Take(buy %s) = %d fills, %v", buy.ID, len(dst), err)
		}
		i++
		sell.ID = ids[i%400]
		if dst, err = b.Take(dst[:0], sell, bookT0, next); err != nil || len(dst) != 1 {
			t.Fatalf("Take(sell %s) = %d fills, %v", sell.ID, len(dst), err)
		}
		i++
	}
	for range 50 {
		run()
	}
	if allocs := testing.AllocsPerRun(100, run); allocs != 0 {
		t.Errorf("Take allocs = %v, want 0", allocs)
	}
}
