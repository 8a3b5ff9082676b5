package market

import (
	"fmt"
	"testing"
	"time"
)

func TestEvictee(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	const mkt = "nvidia-h100-sxm5-80gb"
	order := func(id, maker string, side Side, price int64, at time.Duration) *Order {
		o := &Order{ID: id, Maker: maker, Side: side, Market: mkt, Currency: "USD", Quantity: 1, Price: price,
			LeaseType: Spot, Created: now.Add(at), Expires: now.Add(time.Hour)}
		if side == Bid {
			o.Duration = time.Hour
		} else {
			o.MinDuration, o.MaxDuration = time.Second, time.Hour
		}
		return o
	}
	type in struct {
		id, maker string
		side      Side
		price     int64
		at        time.Duration
	}
	mine := func(o Order) bool { return o.Maker == "me" }
	for _, c := range []struct {
		name   string
		limit  int
		orders []in
		want   string // "" for none
	}{
		{"under the limit", 3, []in{{"b1", "x", Bid, 10, 0}, {"b2", "y", Bid, 11, 1}}, ""},
		{"at the limit", 2, []in{{"b1", "x", Bid, 10, 0}, {"b2", "y", Bid, 11, 1}}, ""},
		{"worst bid goes", 2, []in{{"b1", "x", Bid, 10, 0}, {"b2", "y", Bid, 11, 1}, {"b3", "z", Bid, 12, 2}}, "b1"},
		{"an arrival that ranks last goes", 2, []in{{"b1", "x", Bid, 10, 0}, {"b2", "y", Bid, 11, 1}, {"b3", "z", Bid, 9, 2}}, "b3"},
		{"at one price the latest goes", 2, []in{{"b1", "x", Bid, 10, 0}, {"b2", "y", Bid, 10, 1}, {"b3", "z", Bid, 10, 2}}, "b3"},
		{"worst ask is the highest", 2, []in{{"a1", "x", Ask, 20, 0}, {"a2", "y", Ask, 21, 1}, {"a3", "z", Ask, 19, 2}}, "a2"},
		{"a thin side takes from the other", 4, []in{
			{"b1", "x", Bid, 10, 0}, {"b2", "x", Bid, 9, 1}, {"b3", "x", Bid, 8, 2}, {"b4", "x", Bid, 7, 3}, {"a1", "y", Ask, 30, 4}}, "b4"},
		{"own orders stay", 2, []in{{"b1", "me", Bid, 10, 0}, {"b2", "y", Bid, 11, 1}, {"b3", "z", Bid, 12, 2}}, "b2"},
		{"nothing but own", 1, []in{{"b1", "me", Bid, 10, 0}, {"b2", "me", Bid, 11, 1}}, ""},
	} {
		b, err := NewBook(mkt, "USD")
		if err != nil {
			t.Fatal(err)
		}
		var last Side
		for _, o := range c.orders {
			if err := b.Add(order(o.id, o.maker, o.side, o.price, time.Duration(o.at)*time.Millisecond), now.Add(time.Second)); err != nil {
				t.Fatalf("%s: add %s: %v", c.name, o.id, err)
			}
			last = o.side
		}
		v, ok := Evictee(b, c.limit, last, mine)
		if got := map[bool]string{true: v.ID, false: ""}[ok]; got != c.want {
			t.Errorf("%s: evictee %q, want %q", c.name, got, c.want)
		}
	}
}

func BenchmarkEvicteeFull(b *testing.B) {
	now := time.Unix(1_800_000_000, 0)
	bk, _ := NewBook("nvidia-h100-sxm5-80gb", "USD")
	for i := range MaxRestingOrders {
		o := &Order{ID: fmt.Sprint("b", i), Maker: "x", Side: Bid, Market: "nvidia-h100-sxm5-80gb", Currency: "USD", Quantity: 1,
			Price: int64(1000 + i%500), LeaseType: Spot, Duration: time.Hour, Created: now, Expires: now.Add(time.Hour)}
		if err := bk.Add(o, now); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		Evictee(bk, MaxRestingOrders-1, Bid, nil)
	}
}

// FuzzEvictee: whatever orders a book holds, the evictee is an order it
// holds, never a kept one, and the last in priority of its side among
// those not kept; there is none exactly when the book is within its limit
// or holds only kept orders.
func FuzzEvictee(f *testing.F) {
	f.Add([]byte{1, 10, 0, 2, 11, 1, 3, 12, 0}, uint8(2), true)
	f.Add([]byte{1, 10, 1, 1, 10, 1, 0, 9, 0}, uint8(1), false)
	f.Add([]byte{}, uint8(0), true)
	f.Fuzz(func(t *testing.T, spec []byte, limit uint8, bidArrived bool) {
		now := time.Unix(1_800_000_000, 0)
		const mkt = "nvidia-h100-sxm5-80gb"
		b, err := NewBook(mkt, "USD")
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+2 < len(spec) && i < 3*64; i += 3 {
			maker := fmt.Sprint("m", spec[i]%4) // m0 is kept
			o := &Order{ID: fmt.Sprint("o", i), Maker: maker, Market: mkt, Currency: "USD", Quantity: 1,
				Price: 1_000 + int64(spec[i+1]%16), LeaseType: Spot, Created: now.Add(time.Duration(i) * time.Millisecond), Expires: now.Add(time.Hour)}
			if spec[i+2]%2 == 0 {
				o.Side, o.Duration = Bid, time.Hour
			} else {
				o.Side, o.MinDuration, o.MaxDuration = Ask, time.Second, time.Hour
			}
			if err := b.Add(o, now.Add(time.Second)); err != nil {
				t.Fatalf("add: %v", err)
			}
		}
		arrived := Ask
		if bidArrived {
			arrived = Bid
		}
		keep := func(o Order) bool { return o.Maker == "m0" }
		v, ok := Evictee(b, int(limit), arrived, keep)
		evictable := 0
		for _, s := range []Side{Bid, Ask} {
			for o := range b.Orders(s) {
				if !keep(o) {
					evictable++
				}
			}
		}
		if want := b.Len() > int(limit) && evictable > 0; ok != want {
			t.Fatalf("evictee found %v, want %v (len %d, limit %d, evictable %d)", ok, want, b.Len(), limit, evictable)
		}
		if !ok {
			return
		}
		if keep(v) {
			t.Fatalf("evictee %s is kept", v.ID)
		}
		if _, _, held := b.Lookup(v.ID); !held {
			t.Fatalf("evictee %s is not in the book", v.ID)
		}
		var last string
		for o := range b.Orders(v.Side) {
			if !keep(o) {
				last = o.ID
			}
		}
		if last != v.ID {
			t.Fatalf("evictee %s is not the last in priority of its side (%s)", v.ID, last)
		}
	})
}
