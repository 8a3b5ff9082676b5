package market

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"
)

func newTestBook(t testing.TB, opts ...BookOption) *Book {
	t.Helper()
	b, err := NewBook(bookMarket, "USD", opts...)
	if err != nil {
		t.Fatalf("NewBook() = %v", err)
	}
	return b
}

func mustAdd(t testing.TB, b *Book, orders ...*Order) {
	t.Helper()
	for _, o := range orders {
		if err := b.Add(o, bookT0); err != nil {
			t.Fatalf("Add(%s) = %v, want nil", o.ID, err)
		}
	}
}

// checkRegions verifies a level's region index: every order in exactly the
// list of its region, each list in arrival order.
func checkRegions(l *level) error {
	seen := map[*entry]bool{}
	regions := map[string]bool{}
	for _, rl := range l.regions {
		if rl.n == 0 || regions[rl.region] {
			return fmt.Errorf("region list %q empty or twice", rl.region)
		}
		regions[rl.region] = true
		n := 0
		var prev *entry
		for e := rl.head; e != nil; e = e.rnext {
			if e.rl != rl || e.rprev != prev || e.o.Facts.Region != rl.region || e.lvl != l || (prev != nil && prev.seq >= e.seq) {
				return fmt.Errorf("order %s: broken region links", e.o.ID)
			}
			seen[e] = true
			prev = e
			n++
		}
		if n != rl.n || rl.tail != prev {
			return fmt.Errorf("region list %q holds %d, counts %d", rl.region, n, rl.n)
		}
	}
	if len(seen) != l.n {
		return fmt.Errorf("%d orders in region lists, %d in the level", len(seen), l.n)
	}
	return nil
}

// checkBook verifies the book's structural invariants.
func checkBook(b *Book) error {
	total := 0
	for _, s := range []*bookSide{&b.bids, &b.asks} {
		for i, l := range s.levels {
			if i > 0 && !s.better(l.price, s.levels[i-1].price) {
				return fmt.Errorf("%s levels out of order at %d: %d after %d", s.side, i, l.price, s.levels[i-1].price)
			}
			var qty uint64
			n := 0
			var prev *entry
			for e := l.head; e != nil; e = e.next {
				switch {
				case e.lvl != l || e.prev != prev:
					return fmt.Errorf("order %s: broken links", e.o.ID)
				case e.o.Price != l.price || e.o.Side != s.side:
					return fmt.Errorf("order %s (%s at %d) in %s level %d", e.o.ID, e.o.Side, e.o.Price, s.side, l.price)
				case e.remaining == 0 || e.remaining > e.o.Quantity:
					return fmt.Errorf("order %s: remaining %d of %d", e.o.ID, e.remaining, e.o.Quantity)
				case prev != nil && prev.seq >= e.seq:
					return fmt.Errorf("order %s: FIFO out of arrival order", e.o.ID)
				case e.h != b.hash(e.o.ID) || b.orders.get(e.h, e.o.ID) != e:
					return fmt.Errorf("order %s: not indexed", e.o.ID)
				}
				qty += uint64(e.remaining)
				n++
				prev = e
			}
			if n == 0 || n != l.n || qty != l.qty || l.tail != prev {
				return fmt.Errorf("%s level %d: %d orders, %d GPUs, holds %d, %d", s.side, l.price, l.n, l.qty, n, qty)
			}
			if err := checkRegions(l); err != nil {
				return fmt.Errorf("%s level %d: %w", s.side, l.price, err)
			}
			total += n
		}
	}
	slots := 0
	for _, sl := range b.orders.slots {
		if sl.e == nil {
			continue
		}
		slots++
		if sl.e.lvl == nil || sl.h != sl.e.h {
			return fmt.Errorf("order table holds %q, which is not resting", sl.e.o.ID)
		}
	}
	if total != b.orders.n || slots != total {
		return fmt.Errorf("%d orders in levels, %d indexed in %d slots", total, b.orders.n, slots)
	}
	inHeap := map[*entry]int{}
	for i, it := range b.expiry {
		if i > 0 && it.before(b.expiry[(i-1)/2]) {
			return fmt.Errorf("expiry heap broken at %d", i)
		}
		if !it.stale() {
			if it.exp != it.e.exp {
				return fmt.Errorf("order %s: expiry item at %d, expires %d", it.e.o.ID, it.exp, it.e.exp)
			}
			inHeap[it.e]++
		}
	}
	if len(inHeap) != total {
		return fmt.Errorf("%d orders in the expiry heap, %d resting", len(inHeap), total)
	}
	for e, k := range inHeap {
		if k != 1 {
			return fmt.Errorf("order %s in the expiry heap %d times", e.o.ID, k)
		}
	}
	if len(b.expiry) > 2*total+1024 {
		return fmt.Errorf("expiry heap of %d items for %d orders", len(b.expiry), total)
	}
	for ck, id := range b.keys {
		h := b.hash(id)
		if e := b.orders.get(h, id); e != nil && e.o.ClientKey == ck.key && e.o.Maker == ck.maker {
			continue
		}
		if i, _, seq := b.tombs.find(h, id); i != -1 && b.recKey(b.tombs.rec(seq)) == ck.key && recMaker(b.tombs.rec(seq)) == ck.maker {
			continue
		}
		return fmt.Errorf("client key %q of %s names %s, which the book does not know", ck.key, ck.maker, id)
	}
	if err := b.tombs.check(b.hash); err != nil {
		return fmt.Errorf("dead orders: %w", err)
	}
	if err := b.checkTombs(); err != nil {
		return fmt.Errorf("dead orders: %w", err)
	}
	if err := b.fills.check(b.hash); err != nil {
		return fmt.Errorf("fills: %w", err)
	}
	return nil
}

// checkTombs verifies the dead orders' records beyond the memory's own
// checks: state and side valid, and the client-key slots: each slot in use
// named by exactly one live record (not an early tomb), each free slot
// empty and named by none.
func (b *Book) checkTombs() error {
	m := &b.tombs
	named := make([]int, len(b.deadKeys))
	for seq := m.head; seq != m.tail; seq++ {
		r := m.rec(seq)
		if r.dead() {
			continue
		}
		st, sd := recState(r), recSide(r)
		if st < tombCancelled || st > tombEarly || (sd != Bid && sd != Ask) {
			return fmt.Errorf("record %q: state %d, side %d", r.ID(), st, sd)
		}
		if recMaker(r) == "" {
			return fmt.Errorf("record %q: no maker", r.ID())
		}
		if st != tombEarly && recAux(r) != 0 {
			slot := int(recAux(r)) - 1
			if slot >= len(named) || b.deadKeys[slot] == "" {
				return fmt.Errorf("record %q names key slot %d of %d, empty or none", r.ID(), slot, len(named))
			}
			named[slot]++
		}
	}
	free := map[uint32]bool{}
	for _, slot := range b.deadFree {
		if int(slot) >= len(named) || free[slot] || b.deadKeys[slot] != "" {
			return fmt.Errorf("free key slot %d: out of range, twice free or holding %q", slot, b.deadKeys[min(int(slot), len(named)-1)])
		}
		free[slot] = true
	}
	for slot, n := range named {
		if n > 1 || (n == 0) != free[uint32(slot)] {
			return fmt.Errorf("key slot %d: named by %d records, free %v", slot, n, free[uint32(slot)])
		}
	}
	return nil
}

// check verifies the replay memory: the ring's counts; the index holding
// exactly the records not deleted (and stale slots), each found under its
// own ID at its recorded distance from home; each bucket's count of the
// live slots that passed it; the load.
func (m *memory[V]) check(hash func(string) uint64) error {
	if m.buckets != nil && m.cleanMask != cleanCycle/uint64(len(m.buckets))-1 {
		return fmt.Errorf("cleaner mask %#x for %d buckets", m.cleanMask, len(m.buckets))
	}
	if int(m.head%uint64(m.limit)) != m.hpos || int(m.tail%uint64(m.limit)) != m.tpos {
		return fmt.Errorf("ring [%d, %d) at positions %d, %d", m.head, m.tail, m.hpos, m.tpos)
	}
	if m.live+m.gone > m.limit || uint64(m.live+m.gone) != m.tail-m.head {
		return fmt.Errorf("%d records and %d deleted, limit %d, ring [%d, %d)", m.live, m.gone, m.limit, m.head, m.tail)
	}
	live, gone := 0, 0
	mask := uint32(len(m.buckets) - 1)
	for seq := m.head; seq != m.tail; seq++ {
		rec := m.rec(seq)
		if rec.dead() {
			gone++
			continue
		}
		live++
		h := hash(rec.ID())
		i, j, got := m.find(h, rec.ID())
		if i == -1 || got != seq {
			return fmt.Errorf("record %q not indexed", rec.ID())
		}
		if i == pendBucket {
			if rec.passed() {
				return fmt.Errorf("record %q pending, says passed", rec.ID())
			}
			continue
		}
		if dist := (uint32(i) - slotTag(h)) & mask; (dist > 0) != rec.passed() || uint32(m.buckets[i].s[j]>>32) != slotTag(h) {
			return fmt.Errorf("record %q indexed %d buckets from home, says passed %v", rec.ID(), dist, rec.passed())
		}
	}
	slots := 0
	if m.pn > memPend || m.pi >= memPend || m.pi < 0 {
		return fmt.Errorf("%d pending slots from %d", m.pn, m.pi)
	}
	for k := range m.pn {
		p := m.pend[(m.pi+k)%memPend]
		if p.word == 0 || p.seq < m.head {
			continue
		}
		if p.seq >= m.tail || p.seq+uint64(m.pn) < m.tail {
			return fmt.Errorf("pending slot of arrival %d, ring [%d, %d), %d pending", p.seq, m.head, m.tail, m.pn)
		}
		if r := m.rec(p.seq); r.dead() || slotTag(hash(r.ID())) != uint32(p.word>>32) || uint32(p.word) != 0 {
			return fmt.Errorf("pending slot names record %q, deleted or another handle's", r.ID())
		}
		w, bits := m.filterBitsOf(uint32(p.word >> 32))
		if g := m.genOf(p.seq); m.filt[2*w+uint64(g)]&bits != bits {
			return fmt.Errorf("pending record %q (arrival %d): not in filter generation %d", m.rec(p.seq).ID(), p.seq, g)
		}
		slots++
	}
	passed := make([]uint32, len(m.buckets))
	for i := range m.buckets {
		for _, s := range &m.buckets[i].s {
			if s == 0 {
				continue
			}
			seq, ok := m.seqOf(s)
			if !ok {
				continue
			}
			slots++
			if r := m.rec(seq); r.dead() || slotTag(hash(r.ID())) != uint32(s>>32) {
				return fmt.Errorf("bucket %d: a live slot names record %q, deleted or another handle's", i, r.ID())
			}
			// The filter holds the slot in the generation it arrived in.
			if seq < m.fstart-min(m.fstart, uint64(m.limit)) {
				return fmt.Errorf("record %d arrived before the filter's older generation (from %d)", seq, m.fstart-uint64(m.limit))
			}
			w, bits := m.filterBitsOf(uint32(s >> 32))
			if g := m.genOf(seq); m.filt[2*w+uint64(g)]&bits != bits {
				return fmt.Errorf("record %q (arrival %d): not in filter generation %d", m.rec(seq).ID(), seq, g)
			}
			for k := uint32(s>>32) & mask; k != uint32(i); k = (k + 1) & mask {
				passed[k]++
			}
		}
	}
	for i := range m.buckets {
		if passed[i] != m.buckets[i].passed {
			return fmt.Errorf("bucket %d: %d slots passed it, counts %d", i, passed[i], m.buckets[i].passed)
		}
	}
	if live != m.live || gone != m.gone || slots != live {
		return fmt.Errorf("%d live, %d deleted, %d live slots; counted %d, %d", live, gone, slots, m.live, m.gone)
	}
	if m.live > memLoad*len(m.buckets) {
		return fmt.Errorf("index of %d buckets holds %d records", len(m.buckets), m.live)
	}
	if words := max(len(m.buckets)>>filterWordsShift, 1); m.buckets != nil && (len(m.filt) != 2*words || 1<<(64-m.fshift) != words) {
		return fmt.Errorf("filter of %d words (shift %d) for %d buckets", len(m.filt), m.fshift, len(m.buckets))
	}
	if m.tail-m.fstart > uint64(m.limit) {
		return fmt.Errorf("filter generation from %d, tail %d: over the limit %d", m.fstart, m.tail, m.limit)
	}
	return nil
}

func TestNewBook(t *testing.T) {
	if _, err := NewBook("H100", "USD"); !errors.Is(err, ErrOrderMarket) {
		t.Errorf("NewBook(H100) = %v, want %v", err, ErrOrderMarket)
	}
	if _, err := NewBook(bookMarket, "XXX"); !errors.Is(err, ErrUnknownCurrency) {
		t.Errorf("NewBook(XXX) = %v, want %v", err, ErrUnknownCurrency)
	}
	if _, err := NewBook(bookMarket, "USD", WithMemoryLimit(0)); err == nil {
		t.Errorf("NewBook(WithMemoryLimit(0)) = nil error, want one")
	}
}

func TestPriceTimePriority(t *testing.T) {
	b := newTestBook(t)
	mustAdd(t, b,
		testAsk("a1", "p1", 2, 2_100_000),
		testAsk("a2", "p2", 2, 2_000_000),
		testAsk("a3", "p3", 2, 2_000_000),
		testAsk("a4", "p4", 2, 1_900_000),
		testBid("b1", "u1", 1, 1_500_000),
		testBid("b2", "u2", 1, 1_700_000),
	)
	got, err := b.Match(testBid("t", "u9", 7, 2_100_000), bookT0)
	want := []Match{
		{"a4", "p4", 2, 1_900_000, Spot},
		{"a2", "p2", 2, 2_000_000, Spot},
		{"a3", "p3", 2, 2_000_000, Spot},
		{"a1", "p1", 1, 2_100_000, Spot},
	}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Match(bid 7 @ 2.10) = %+v, %v, want %+v", got, err, want)
	}
	got, _ = b.Match(testBid("t", "u9", 3, 2_000_000), bookT0)
	want = []Match{{"a4", "p4", 2, 1_900_000, Spot}, {"a2", "p2", 1, 2_000_000, Spot}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Match(bid 3 @ 2.00) = %+v, want %+v", got, want)
	}
	got, _ = b.Match(testAsk("t", "p9", 5, 1_600_000), bookT0)
	want = []Match{{"b2", "u2", 1, 1_700_000, Spot}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Match(ask 5 @ 1.60) = %+v, want %+v", got, want)
	}
	if got, _ := b.Match(testBid("t", "u9", 1, 1_800_000), bookT0); len(got) != 0 {
		t.Errorf("Match(bid below the asks) = %+v, want none", got)
	}
	bids, asks := b.Depth(0)
	wantBids := []Level{{1_700_000, 1, 1}, {1_500_000, 1, 1}}
	wantAsks := []Level{{1_900_000, 2, 1}, {2_000_000, 4, 2}, {2_100_000, 2, 1}}
	if !reflect.DeepEqual(bids, wantBids) || !reflect.DeepEqual(asks, wantAsks) {
		t.Errorf("Depth(0) = %v, %v, want %v, %v", bids, asks, wantBids, wantAsks)
	}
	if bids, asks := b.Depth(1); len(bids) != 1 || len(asks) != 1 || asks[0].Price != 1_900_000 {
		t.Errorf("Depth(1) = %v, %v, want one level each", bids, asks)
	}
	if p, ok := b.BestBid(); p != 1_700_000 || !ok {
		t.Errorf("BestBid() = %d, %v, want 1700000, true", p, ok)
	}
	if p, ok := b.BestAsk(); p != 1_900_000 || !ok {
		t.Errorf("BestAsk() = %d, %v, want 1900000, true", p, ok)
	}
	if s, ok := b.Spread(); s != 200_000 || !ok {
		t.Errorf("Spread() = %d, %v, want 200000, true", s, ok)
	}
	var ids []string
	for o, rem := range b.Orders(Ask) {
		ids = append(ids, fmt.Sprintf("%s:%d", o.ID, rem))
	}
	if got, want := strings.Join(ids, " "), "a4:2 a2:2 a3:2 a1:2"; got != want {
		t.Errorf("Orders(Ask) = %s, want %s", got, want)
	}
	if err := checkBook(b); err != nil {
		t.Error(err)
	}
}

func TestEmptyBook(t *testing.T) {
	b := newTestBook(t)
	if _, ok := b.BestBid(); ok {
		t.Errorf("BestBid() on empty book ok = true")
	}
	if _, ok := b.Spread(); ok {
		t.Errorf("Spread() on empty book ok = true")
	}
	if _, ok := b.Spot(); ok {
		t.Errorf("Spot() on empty book ok = true")
	}
	if bids, asks := b.Depth(10); bids != nil || asks != nil {
		t.Errorf("Depth(10) = %v, %v, want nil, nil", bids, asks)
	}
}

func TestAddRefuses(t *testing.T) {
	b := newTestBook(t)
	mustAdd(t, b, testBid("b1", "u1", 1, 1_000_000))
	tests := []struct {
		name string
		o    *Order
		want error
	}{
		{"held ID", testBid("b1", "u1", 1, 1_000_000), ErrDuplicate},
		{"no ID", testBid("", "u1", 1, 1_000_000), ErrOrderSchema},
		{"other market", withOrder(testBid("x", "u1", 1, 1), func(o *Order) { o.Market = "nvidia-a100-sxm4-80gb" }), ErrWrongBook},
		{"other currency", withOrder(testBid("x", "u1", 1, 1), func(o *Order) { o.Currency = "EUR" }), ErrWrongBook},
		{"expired", withOrder(testBid("x", "u1", 1, 1), func(o *Order) { o.Expires = bookT0 }), ErrOrderExpired},
		{"IOC", withOrder(testBid("x", "u1", 1, 1), func(o *Order) { o.TimeInForce = IOC }), ErrNotResting},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := b.Add(tt.o, bookT0); !errors.Is(err, tt.want) {
				t.Errorf("Add(%s) = %v, want %v", tt.o.ID, err, tt.want)
			}
		})
	}
	if b.Len() != 1 {
		t.Errorf("Len() = %d, want 1", b.Len())
	}
}

func TestCancel(t *testing.T) {
	b := newTestBook(t)
	mustAdd(t, b, testBid("b1", "u1", 1, 1_000_000), testBid("b2", "u1", 1, 1_000_000))
	tests := []struct {
		id, maker string
		want      error
	}{
		{"b1", "u2", ErrNotMaker},
		{"b1", "u1", nil},
		{"b1", "u1", ErrNotFound},
		{"nope", "u1", ErrNotFound},
	}
	for _, tt := range tests {
		if err := b.Cancel(tt.id, tt.maker); !errors.Is(err, tt.want) || (err == nil) != (tt.want == nil) {
			t.Errorf("Cancel(%s, %s) = %v, want %v", tt.id, tt.maker, err, tt.want)
		}
	}
	if _, _, ok := b.Lookup("b2"); !ok || b.Len() != 1 {
		t.Errorf("after cancelling b1: Lookup(b2) ok = %v, Len() = %d, want true, 1", ok, b.Len())
	}
	// The gossip layer replays after 120 s: a cancelled order stays dead.
	if err := b.Add(testBid("b1", "u1", 1, 1_000_000), bookT0.Add(3*time.Minute)); !errors.Is(err, ErrDuplicate) {
		t.Errorf("Add(replayed cancelled b1) = %v, want %v", err, ErrDuplicate)
	}
	if err := checkBook(b); err != nil {
		t.Error(err)
	}
}

func TestSweep(t *testing.T) {
	b := newTestBook(t)
	mustAdd(t, b,
		withOrder(testBid("late", "u1", 1, 1_000_000), func(o *Order) { o.Expires = bookT0.Add(30 * time.Minute) }),
		withOrder(testBid("early", "u1", 1, 1_000_000), func(o *Order) { o.Expires = bookT0.Add(10 * time.Minute) }),
		withOrder(testAsk("a", "p1", 1, 2_000_000), func(o *Order) { o.Expires = bookT0.Add(10 * time.Minute) }),
		testAsk("keep", "p1", 1, 2_000_000),
	)
	tests := []struct {
		at   time.Duration
		want []string
	}{
		{5 * time.Minute, nil},
		{10 * time.Minute, []string{"early", "a"}},
		{40 * time.Minute, []string{"late"}},
		{50 * time.Minute, nil},
	}
	for _, tt := range tests {
		// Expired orders never match, swept or not.
		if got, _ := b.Match(testAsk("t", "p9", 1, 1), bookT0.Add(tt.at)); len(got) != 0 && tt.at >= 30*time.Minute {
			t.Errorf("Match at +%s = %+v, want none (all bids expired)", tt.at, got)
		}
		if got := b.Sweep(bookT0.Add(tt.at)); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Sweep(+%s) = %v, want %v", tt.at, got, tt.want)
		}
		if err := checkBook(b); err != nil {
			t.Fatal(err)
		}
	}
	if b.Len() != 1 {
		t.Errorf("Len() = %d, want 1", b.Len())
	}
}

func TestClientKey(t *testing.T) {
	b := newTestBook(t)
	first := withOrder(testBid("b1", "u1", 2, 1_000_000), func(o *Order) { o.ClientKey = "k" })
	mustAdd(t, b, first)
	second := withOrder(testBid("b2", "u1", 2, 1_000_000), func(o *Order) { o.ClientKey = "k" })
	err := b.Add(second, bookT0)
	var dup *DuplicateKeyError
	if !errors.As(err, &dup) || dup.ID != "b1" || !errors.Is(err, ErrDuplicateKey) {
		t.Fatalf("Add(second with key k) = %v, want *DuplicateKeyError naming b1", err)
	}
	// Another maker may use the same key.
	mustAdd(t, b, withOrder(testBid("b3", "u2", 2, 1_000_000), func(o *Order) { o.ClientKey = "k" }))
	// Still refused once the first is filled: the retry must not buy twice.
	if err := b.ApplyFill(Fill{ID: "f1", Market: bookMarket, Currency: "USD", BidID: "b1", AskID: "x", Buyer: "u1", Provider: "p1", Quantity: 2, Price: 1_000_000, LeaseType: Spot, Time: bookT0}); err != nil {
		t.Fatalf("ApplyFill() = %v", err)
	}
	if err := b.Add(second, bookT0); !errors.As(err, &dup) || dup.ID != "b1" {
		t.Errorf("Add(second after first filled) = %v, want *DuplicateKeyError naming b1", err)
	}
	if id, ok := b.ClientKey("u1", "k"); id != "b1" || !ok {
		t.Errorf("ClientKey(u1, k) = %s, %v, want b1, true", id, ok)
	}
	// Once the first has expired and been forgotten, the key is free.
	b.Sweep(bookT0.Add(2 * time.Hour))
	later := withOrder(testBid("b4", "u1", 2, 1_000_000), func(o *Order) {
		o.ClientKey, o.Created, o.Expires = "k", bookT0.Add(2*time.Hour), bookT0.Add(3*time.Hour)
	})
	if err := b.Add(later, bookT0.Add(2*time.Hour)); err != nil {
		t.Errorf("Add(key reused after expiry) = %v, want nil", err)
	}
	if err := checkBook(b); err != nil {
		t.Error(err)
	}
}

func TestDeadMemoryBounded(t *testing.T) {
	b := newTestBook(t, WithMemoryLimit(3))
	for i := range 10 {
		id := fmt.Sprintf("b%d", i)
		mustAdd(t, b, withOrder(testBid(id, "u1", 1, 1_000_000), func(o *Order) {
			o.Expires = bookT0.Add(time.Duration(i+1) * time.Minute)
			o.ClientKey = id
		}))
		if err := b.Cancel(id, "u1"); err != nil {
			t.Fatal(err)
		}
		if err := checkBook(b); err != nil {
			t.Fatal(err)
		}
	}
	// The three latest-expiring IDs are remembered; earlier ones were shed.
	for i, want := range []error{nil, ErrDuplicate} {
		id := []string{"b0", "b9"}[i]
		o := withOrder(testBid(id, "u1", 1, 1_000_000), func(o *Order) { o.Expires = bookT0.Add(time.Hour) })
		if err := b.Add(o, bookT0); !errors.Is(err, want) || (want == nil) != (err == nil) {
			t.Errorf("Add(replayed %s) = %v, want %v", id, err, want)
		}
	}
	if n := b.tombs.len(); n > 3 {
		t.Errorf("remembered %d dead IDs, want at most 3", n)
	}
	b.Sweep(bookT0.Add(2 * time.Hour))
	if n, k := b.tombs.len(), len(b.keys); n != 0 || k != 0 {
		t.Errorf("after Sweep past every expiry: %d dead IDs, %d keys, want 0, 0", n, k)
	}
}

// opDriver drives a Book from bytes: the fuzz target and the determinism
// test share it. It checks invariants after every operation and records a
// trace of every outcome.
type opDriver struct {
	t      testing.TB
	b      *Book
	now    time.Time
	seq    int
	orders []*Order // every order added successfully, in order
	qty    map[string]uint32
	filled map[string]uint32
	fills  []Fill
	trace  []string
}

var driverMakers = []string{"m0", "m1", "m2", "m3"}

func newOpDriver(t testing.TB) *opDriver {
	return &opDriver{t: t, b: newTestBook(t), now: bookT0, qty: map[string]uint32{}, filled: map[string]uint32{}}
}

func (d *opDriver) logf(format string, args ...any) {
	d.trace = append(d.trace, fmt.Sprintf(format, args...))
}

func (d *opDriver) order(r *byteReader) *Order {
	d.seq++
	side := Side(1 + r.byte()%2)
	flags := r.byte()
	o := &Order{
		ID:        fmt.Sprintf("o%d", d.seq),
		Maker:     driverMakers[r.byte()%4],
		Side:      side,
		Market:    bookMarket,
		Currency:  "USD",
		Quantity:  1 + uint32(r.byte()%8),
		Price:     (95 + int64(r.byte()%11)) * 10_000,
		LeaseType: LeaseType(1 + r.byte()%3),
		Created:   d.now,
		Expires:   d.now.Add(time.Duration(1+r.byte()%60) * time.Minute),
		AllOrNone: flags&1 != 0,
		PostOnly:  flags&2 != 0,
	}
	if flags&4 != 0 && !o.PostOnly {
		o.TimeInForce = IOC
	}
	if flags&8 != 0 {
		o.ClientKey = fmt.Sprintf("k%d", flags>>4)
	}
	if side == Bid {
		o.Duration = time.Duration(1+r.byte()%30) * time.Hour
		c := r.byte()
		if c&1 != 0 {
			o.Constraints.Regions = []string{[]string{"CN-", "US-CA"}[c>>1&1]}
		}
		if c&4 != 0 {
			o.Constraints.MinAttestation = AttestCCEvidence
		}
		if c&8 != 0 {
			o.Constraints.MinMemoryBytes = 80 << 30
		}
		if c&16 != 0 {
			o.Constraints.LeaseTypes = []LeaseType{Spot, OnDemand}
		}
	} else {
		o.MinDuration = time.Duration(1+r.byte()%4) * time.Hour
		o.MaxDuration = o.MinDuration + time.Duration(r.byte()%24)*time.Hour
		c := r.byte()
		o.Facts = Facts{
			Region:      []string{"CN-GZ", "CN-SH", "US-CA", ""}[c&3],
			Attestation: []string{AttestSelfReported, AttestCCEvidence, AttestCCVerified, ""}[c>>2&3],
			MemoryBytes: []uint64{40 << 30, 80 << 30}[c>>4&1],
		}
	}
	return o
}

// add rests o, tracking what it expects.
func (d *opDriver) add(o *Order) {
	err := d.b.Add(o, d.now)
	d.logf("add %s: %s", o.ID, Reason(err))
	if err == nil {
		d.orders = append(d.orders, o)
		d.qty[o.ID] = o.Quantity
	} else if errors.Is(err, ErrDuplicate) && d.filled[o.ID] < o.Quantity {
		d.t.Fatalf("Add(%s) = %v, but it is new and not filled", o.ID, err)
	}
}

// apply applies the proposals for taker, as the network layer would once
// each trade is agreed.
func (d *opDriver) apply(taker *Order, ms []Match) {
	for _, m := range ms {
		f := m.Fill(taker, d.now)
		f.ID = fmt.Sprintf("f%d", len(d.fills))
		if m.Maker == taker.Maker {
			d.t.Fatalf("Match(%s) proposed a self-match: %+v", taker.ID, m)
		}
		if !crosses(taker.Side, taker.Price, m.Price) {
			d.t.Fatalf("Match(%s at %d) proposed price %d", taker.ID, taker.Price, m.Price)
		}
		if err := d.b.ApplyFill(f); err != nil {
			d.t.Fatalf("ApplyFill(%+v) of a proposal = %v", f, err)
		}
		d.fills = append(d.fills, f)
		d.filled[f.BidID] += f.Quantity
		d.filled[f.AskID] += f.Quantity
		d.logf("fill %s %s/%s %d@%d", f.ID, f.BidID, f.AskID, f.Quantity, f.Price)
	}
}

func (d *opDriver) step(r *byteReader) {
	switch op := r.byte() % 8; op {
	case 0, 1:
		d.add(d.order(r))
	case 2:
		if len(d.orders) == 0 {
			return
		}
		o := d.orders[int(r.byte())%len(d.orders)]
		maker := driverMakers[r.byte()%4]
		err := d.b.Cancel(o.ID, maker)
		d.logf("cancel %s by %s: %s", o.ID, maker, Reason(err))
		if err == nil && maker != o.Maker {
			d.t.Fatalf("Cancel(%s, %s) = nil, but %s is the maker", o.ID, maker, o.Maker)
		}
	case 3:
		o := d.order(r)
		ms, err := d.b.Match(o, d.now)
		d.logf("match %s: %d, %s", o.ID, len(ms), Reason(err))
		if err != nil {
			if o.PostOnly && errors.Is(err, ErrWouldCross) {
				d.add(o)
				return
			}
			d.t.Fatalf("Match(%+v) = %v", o, err)
		}
		var got uint32
		for _, m := range ms {
			got += m.Quantity
		}
		if got > o.Quantity || (o.AllOrNone && got != 0 && got != o.Quantity) {
			d.t.Fatalf("Match(%s for %d, AON %v) proposed %d GPUs", o.ID, o.Quantity, o.AllOrNone, got)
		}
		d.apply(o, ms)
		if o.TimeInForce == GTC {
			d.add(o)
		}
	case 7:
		d.take(d.order(r))
	case 4:
		d.now = d.now.Add(time.Duration(r.byte()%16) * time.Minute)
		d.logf("sweep %s: %v", d.now.Format(time.Kitchen), d.b.Sweep(d.now))
	case 5:
		d.resolve()
	case 6:
		if r.byte()%2 == 0 && len(d.orders) > 0 {
			o := d.orders[int(r.byte())%len(d.orders)]
			if err := d.b.Add(o, d.now); err == nil {
				d.t.Fatalf("Add(replayed %s) = nil, want it refused", o.ID)
			}
		} else if len(d.fills) > 0 {
			f := d.fills[int(r.byte())%len(d.fills)]
			if err := d.b.ApplyFill(f); !errors.Is(err, ErrDuplicate) {
				d.t.Fatalf("ApplyFill(replayed %s) = %v, want %v", f.ID, err, ErrDuplicate)
			}
		}
	}
}

// take has o trade at once with Take, each proposal agreed, and checks
// what it did against what was proposed.
func (d *opDriver) take(o *Order) {
	ms, _ := d.b.Match(o, d.now)
	fills, err := d.b.Take(nil, o, d.now, func(m *Match) string {
		return fmt.Sprintf("f%d", len(d.fills)+matchIndex(ms, m.OrderID))
	})
	d.logf("take %s: %d, %s", o.ID, len(fills), Reason(err))
	if err != nil {
		if errors.Is(err, ErrWouldCross) {
			d.add(o)
			return
		}
		if !errors.Is(err, ErrDuplicate) && !errors.Is(err, ErrDuplicateKey) {
			d.t.Fatalf("Take(%+v) = %v", o, err)
		}
		return
	}
	if len(fills) != len(ms) {
		d.t.Fatalf("Take(%s) applied %d fills, Match proposed %d", o.ID, len(fills), len(ms))
	}
	var took uint32
	for k, f := range fills {
		if f.Quantity != ms[k].Quantity || f.Price != ms[k].Price || (f.BidID != ms[k].OrderID && f.AskID != ms[k].OrderID) {
			d.t.Fatalf("Take(%s) fill %d = %+v, proposal %+v", o.ID, k, f, ms[k])
		}
		d.fills = append(d.fills, f)
		d.filled[f.BidID] += f.Quantity
		d.filled[f.AskID] += f.Quantity
		took += f.Quantity
	}
	if _, rem, ok := d.b.Lookup(o.ID); ok {
		if o.TimeInForce != GTC || rem != o.Quantity-took {
			d.t.Fatalf("Take(%s) rests %d of %d after %d taken", o.ID, rem, o.Quantity, took)
		}
		d.orders = append(d.orders, o)
		d.qty[o.ID] = o.Quantity
	} else if o.TimeInForce == GTC && took < o.Quantity {
		d.t.Fatalf("Take(%s): %d of %d taken, the rest does not rest", o.ID, took, o.Quantity)
	}
}

// matchIndex is the place in ms of the proposal against resting order id.
func matchIndex(ms []Match, id string) int {
	for i := range ms {
		if ms[i].OrderID == id {
			return i
		}
	}
	return -1
}

// resolve lets every maker take what its resting orders cross, until no
// resting order that may take can trade.
func (d *opDriver) resolve() {
	for range 1000 {
		progress := false
		for _, m := range driverMakers {
			for _, c := range d.b.Crossing(m, d.now) {
				o, _, ok := d.b.Lookup(c.OrderID)
				if !ok || o.Maker != m || o.PostOnly {
					d.t.Fatalf("Crossing(%s) names %s: %+v, %v", m, c.OrderID, o, ok)
				}
				d.apply(&o, c.Matches)
				progress = true
			}
		}
		if !progress {
			return
		}
	}
	d.t.Fatalf("resolve did not settle")
}

func (d *opDriver) check() {
	d.t.Helper()
	if err := checkBook(d.b); err != nil {
		d.t.Fatal(err)
	}
	for id, q := range d.qty {
		if d.filled[id] > q {
			d.t.Fatalf("order %s: filled %d of %d", id, d.filled[id], q)
		}
		if _, rem, ok := d.b.Lookup(id); ok && rem != q-d.filled[id] {
			d.t.Fatalf("order %s: remaining %d, want %d - %d", id, rem, q, d.filled[id])
		}
	}
}

func (d *opDriver) run(data []byte) {
	r := &byteReader{data: data}
	for !r.done() {
		d.step(r)
		d.check()
	}
	d.resolve()
	d.check()
	for _, m := range driverMakers {
		if c := d.b.Crossing(m, d.now); len(c) != 0 {
			d.t.Fatalf("after resolve, Crossing(%s) = %+v, want none", m, c)
		}
	}
	bids, asks := d.b.Depth(0)
	spot, _ := d.b.Spot()
	d.logf("depth %v %v spot %d", bids, asks, spot)
}

func FuzzBook(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 1, 0, 1, 3, 5, 10, 0, 0, 0, 0})
	f.Add([]byte("add add match sweep crossing replay \x00\x01\x02\x03\x04\x05\x06 cancel everything, match again and again"))
	rng := rand.New(rand.NewPCG(1, 2))
	for range 4 {
		seed := make([]byte, 600)
		for i := range seed {
			seed[i] = byte(rng.Uint32())
		}
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		newOpDriver(t).run(data)
	})
}

func TestDeterministicReplay(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for i := range 20 {
		data := make([]byte, 3000)
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		d1, d2 := newOpDriver(t), newOpDriver(t)
		d1.run(data)
		d2.run(data)
		if !reflect.DeepEqual(d1.trace, d2.trace) {
			for j := range min(len(d1.trace), len(d2.trace)) {
				if d1.trace[j] != d2.trace[j] {
					t.Fatalf("run %d step %d: replay = %q, want %q", i, j, d2.trace[j], d1.trace[j])
				}
			}
			t.Fatalf("run %d: replay traced %d steps, want %d", i, len(d2.trace), len(d1.trace))
		}
		if len(d1.fills) == 0 {
			t.Errorf("run %d: no fills; the sequence exercises too little", i)
		}
	}
}

// deepBook rests n asks from distinct makers over levels price levels.
func deepBook(b testing.TB, n, levels int) (*Book, []*Order) {
	book := newTestBook(b)
	orders := make([]*Order, n)
	for i := range orders {
		orders[i] = testAsk(fmt.Sprintf("ask-%06d", i), fmt.Sprintf("p%d", i%97), 8, 2_000_000+int64(i%levels)*1_000)
		if err := book.Add(orders[i], bookT0); err != nil {
			b.Fatal(err)
		}
	}
	return book, orders
}

func BenchmarkAdd(b *testing.B) {
	book, _ := deepBook(b, 10_000, 200)
	orders := make([]*Order, b.N)
	for i := range orders {
		orders[i] = testBid(fmt.Sprintf("bid-%08d", i), fmt.Sprintf("u%d", i%89), 4, 1_000_000+int64(i%200)*1_000)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := book.Add(orders[i], bookT0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMatch(b *testing.B) {
	book, _ := deepBook(b, 10_000, 200)
	// Takes 64 GPUs: eight orders across the best level.
	taker := testBid("taker", "u1", 64, 2_050_000)
	b.ReportAllocs()
	for b.Loop() {
		ms, err := book.Match(taker, bookT0)
		if err != nil || len(ms) != 8 {
			b.Fatalf("Match() = %d matches, %v", len(ms), err)
		}
	}
}

func BenchmarkMatchAppend(b *testing.B) {
	book, _ := deepBook(b, 10_000, 200)
	taker := testBid("taker", "u1", 64, 2_050_000)
	buf := make([]Match, 0, 16)
	b.ReportAllocs()
	for b.Loop() {
		ms, err := book.MatchAppend(buf[:0], taker, bookT0)
		if err != nil || len(ms) != 8 {
			b.Fatalf("MatchAppend() = %d matches, %v", len(ms), err)
		}
	}
}

// BenchmarkMatchConstrained makes the bid pass over 5,000 asks that fail its
// region constraint before it finds one it accepts.
func BenchmarkMatchConstrained(b *testing.B) {
	book := newTestBook(b)
	for i := range 5_000 {
		mustAdd(b, book, testAsk(fmt.Sprintf("a%d", i), fmt.Sprintf("p%d", i), 8, 2_000_000+int64(i%50)*1_000))
	}
	mustAdd(b, book, withOrder(testAsk("us", "p-us", 8, 2_100_000), func(o *Order) { o.Facts.Region = "US-CA" }))
	taker := withOrder(testBid("taker", "u1", 8, 2_200_000), func(o *Order) { o.Constraints.Regions = []string{"US-"} })
	buf := make([]Match, 0, 16)
	b.ReportAllocs()
	for b.Loop() {
		ms, err := book.MatchAppend(buf[:0], taker, bookT0)
		if err != nil || len(ms) != 1 {
			b.Fatalf("MatchAppend() = %d matches, %v", len(ms), err)
		}
	}
}

// BenchmarkAddCancel is the steady state: a book of 10,000 orders where each
// new order replaces a cancelled one.
func BenchmarkAddCancel(b *testing.B) {
	book, orders := deepBook(b, 10_000, 200)
	fresh := make([]*Order, b.N)
	for i := range fresh {
		fresh[i] = testAsk(fmt.Sprintf("new-%08d", i), "p1", 8, 2_000_000+int64(i%200)*1_000)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		var victim *Order
		if i < len(orders) {
			victim = orders[i]
		} else {
			victim = fresh[i-len(orders)]
		}
		if err := book.Cancel(victim.ID, victim.Maker); err != nil {
			b.Fatal(err)
		}
		if err := book.Add(fresh[i], bookT0); err != nil {
			b.Fatal(err)
		}
	}
}

// TestReplayMemory checks the replay memory against a plain model (a list
// of every record in arrival order, scanned) through puts, replacements,
// deletes, evictions at the limit, sweeps and ring growth.
func TestReplayMemory(t *testing.T) {
	type rec struct {
		id   string
		exp  int64
		v    int
		dead bool
	}
	seed := maphash.MakeSeed()
	for _, tc := range []struct {
		limit int
		tags  uint64 // distinct tags among handles; 0: all the hash gives
		// saturate: set every bit of the filter before each lookup, so
		// every ID is a false "maybe" and the index alone answers.
		saturate bool
	}{{1, 0, false}, {3, 0, false}, {64, 0, false}, {100, 0, false}, {1000, 0, false}, {100, 3, false}, {1000, 5, false}, {1000, 40, false}, {100, 0, true}, {1000, 5, true}} {
		limit := tc.limit
		// With few tags, many IDs share a home bucket: buckets fill up
		// and slots are stored past them.
		hash := func(id string) uint64 {
			h := idHash(seed, id)
			if tc.tags > 0 {
				h = (h>>32%tc.tags)<<32 | h&0xffffffff
			}
			return h
		}
		rng := rand.New(rand.NewPCG(3, uint64(limit)+tc.tags<<32))
		var dropped []string
		freed, puts := 0, 0 // records handed to onFree (dropped or deleted), and put
		m := newMemory(limit, hash, func(r *memRec[int], drop bool) {
			if r.dead() {
				t.Fatalf("limit %d: record %q freed twice", limit, r.ID())
			}
			freed++
			if drop {
				dropped = append(dropped, r.ID())
			}
		})
		var model []rec
		swept := int64(minTime)
		lookup := func(id string) (rec, bool) {
			for i := len(model) - 1; i >= 0; i-- {
				if r := model[i]; r.id == id && !r.dead {
					return r, r.exp > swept
				}
			}
			return rec{}, false
		}
		for step := range 20_000 {
			id := fmt.Sprintf("id%d", rng.IntN(3*limit+5))
			h := hash(id)
			switch rng.IntN(5) {
			case 0, 1:
				exp := int64(rng.IntN(1000))
				fresh := true // no record of id, expired or not: put may skip looking
				for i := range model {
					if model[i].id == id {
						fresh = fresh && model[i].dead
						model[i].dead = true
					}
				}
				var want []string
				if len(model) == limit {
					if !model[0].dead {
						want = append(want, model[0].id)
					}
					model = model[1:]
				}
				model = append(model, rec{id: id, exp: exp, v: step})
				dropped = nil
				puts++
				m.put(h, id, exp, fresh && rng.IntN(2) == 0).v = step
				if !slices.Equal(dropped, want) {
					t.Fatalf("limit %d step %d: put(%s) dropped %q, want %q", limit, step, id, dropped, want)
				}
			case 2:
				for i := range model {
					if model[i].id == id {
						model[i].dead = true
					}
				}
				m.del(h, id)
			case 3:
				now := swept
				if now == minTime || rng.IntN(3) == 0 {
					now = int64(rng.IntN(1000))
				}
				swept = max(swept, now)
				var want []string
				for len(model) > 0 && (model[0].dead || model[0].exp <= swept) {
					if !model[0].dead {
						want = append(want, model[0].id)
					}
					model = model[1:]
				}
				dropped = nil
				m.sweep(now)
				if !slices.Equal(dropped, want) {
					t.Fatalf("limit %d step %d: sweep(%d) dropped %v, want %v", limit, step, now, dropped, want)
				}
			case 4:
				if step%7 == 0 && m.buckets != nil {
					m.cleanBucket() // it runs every few thousand inserts
				}
				if tc.saturate && m.filt != nil && rng.IntN(2) == 0 {
					for i := range m.filt {
						m.filt[i] = ^uint64(0)
					}
				}
				want, wantOK := lookup(id)
				got, ok := m.get(h, id)
				if ok != wantOK || (ok && (got.v != want.v || got.exp != want.exp)) {
					t.Fatalf("limit %d step %d: get(%s) = %+v, %v, want %+v, %v", limit, step, id, got, ok, want, wantOK)
				}
			}
			live := 0
			for _, r := range model {
				if !r.dead {
					live++
				}
			}
			if m.len() != live || m.live+m.gone != len(model) {
				t.Fatalf("limit %d step %d: len() = %d of %d, want %d of %d", limit, step, m.len(), m.live+m.gone, live, len(model))
			}
			if puts-freed != live {
				t.Fatalf("limit %d step %d: %d records put, %d freed, %d live", limit, step, puts, freed, live)
			}
			if step%1000 == 0 {
				runtime.GC() // the records hold their IDs' bytes alive by pointer alone
			}
			if step%97 == 0 {
				if err := m.check(hash); err != nil {
					t.Fatalf("limit %d step %d: %v", limit, step, err)
				}
			}
		}
	}
}

// TestReplayFilter checks that the filter in front of the replay index
// answers most never-seen IDs itself (its point: at the cap's load about
// one in six is a false "maybe"), while every remembered ID is still found
// (TestReplayMemory and check hold that under every mix of operations),
// across generations: after three full turns of the ring, the IDs of the
// last limit arrivals are all found, and those dropped before them are not.
func TestReplayFilter(t *testing.T) {
	const limit = 1 << 14
	seed := maphash.MakeSeed()
	hash := func(id string) uint64 { return idHash(seed, id) }
	m := newMemory[struct{}](limit, hash, nil)
	ids := make([]string, 3*limit+limit/3)
	for i := range ids {
		ids[i] = fmt.Sprintf("id%d", i)
		m.put(hash(ids[i]), ids[i], 1, true)
	}
	if err := m.check(hash); err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		_, ok := m.get(hash(id), id)
		if want := i >= len(ids)-limit; ok != want {
			t.Fatalf("arrival %d of %d: get(%s) = %v, want %v", i, len(ids), id, ok, want)
		}
	}
	maybes := 0
	const probes = 20_000
	for i := range probes {
		if m.maybe(hash(fmt.Sprintf("never%d", i))) {
			maybes++
		}
	}
	// Expected ~0.2 at 4 bits a record and two generations; 0.5 is far
	// outside chance, and a filter saying "maybe" to all is caught.
	if maybes > probes/2 {
		t.Errorf("%d of %d never-seen IDs passed the filter", maybes, probes)
	}
	t.Logf("%d of %d never-seen IDs passed the filter (%d words a generation)", maybes, probes, len(m.filt)/2)
}

// TestRecordSizes holds the replay memory's records at the sizes its
// benchmarks were measured with: a dead order's 32 bytes, a fill's 24.
func TestRecordSizes(t *testing.T) {
	if n := unsafe.Sizeof(tombRec{}); n != 32 {
		t.Errorf("dead order's record: %d bytes, want 32", n)
	}
	if n := unsafe.Sizeof(memRec[struct{}]{}); n != 24 {
		t.Errorf("fill's record: %d bytes, want 24", n)
	}
}
