package exchange

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
	"time"

	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/proto"
)

// memSet is an element set whose elements are their own IDs (an order
// body of the ID's bytes), for running the rounds in memory.
func memSet(keys ...[]uint64) *elemSet {
	e := &elemSet{elems: map[elemID]*elem{}}
	for _, ks := range keys {
		for _, k := range ks {
			var b [8]byte
			binary.BigEndian.PutUint64(b[:], k)
			id := sha256.Sum256(b[:])
			e.elems[id] = &elem{order: id[:]}
			e.ids = append(e.ids, id)
		}
	}
	return e.sorted()
}

func keys(from, n uint64) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = from + uint64(i)
	}
	return out
}

// runRounds reconciles a with b in memory, as reconcileRounds does over a
// stream (each side answers from its snapshot), then adds what each
// received to it; it returns the messages sent, the elements carried and
// the bytes of every message.
func runRounds(t *testing.T, a, b *elemSet) (msgs, items, size int) {
	t.Helper()
	got := map[*elemSet][]*proto.BookMessage{}
	add := func(to *elemSet, m *proto.Reconcile) {
		got[to] = append(got[to], m.Items...)
		items += len(m.Items)
	}
	in := &proto.Reconcile{Market: mkt, Ranges: []*proto.ReconcileRange{a.rangeOf(nil)}}
	msgs, size = 1, gproto.Size(in)
	sides := [2]*elemSet{b, a} // who answers next
	for turn := 0; ; turn++ {
		if msgs > maxReconcileRounds*2 {
			t.Fatalf("no end after %d messages", msgs)
		}
		if err := checkReconcile(in); err != nil {
			t.Fatalf("message %d: %v", msgs, err)
		}
		me := sides[turn%2]
		add(me, in)
		if in.Done {
			break
		}
		out := me.respond(in, reconcileBudget)
		out.Done = len(out.Ranges) == 0 && len(out.Want) == 0
		msgs++
		size += gproto.Size(out)
		in = out
	}
	for to, ms := range got {
		for _, it := range ms {
			id := elemID(it.GetOrder())
			if _, ok := to.elems[id]; ok {
				t.Fatalf("an element its receiver held was sent")
			}
			to.elems[id] = &elem{order: it.GetOrder()}
			to.ids = append(to.ids, id)
		}
		to.sorted()
	}
	return msgs, items, size
}

// TestReconcileCostGrowsWithDifference: two replicas of 5,000 elements
// that agree settle in one round trip of a few dozen bytes; with a few
// elements on each side only, exactly those cross, in under 24 KiB and a
// handful of rounds (not the 160 KiB of listing every ID), and in a book
// ten times larger for less than twice that; with half the book
// different, it costs more. Afterwards both hold the union.
func TestReconcileCostGrowsWithDifference(t *testing.T) {
	const n = 5000
	a, b := memSet(keys(0, n)), memSet(keys(0, n))
	msgs, items, size := runRounds(t, a, b)
	if msgs != 2 || items != 0 || size > 100 {
		t.Fatalf("equal sets: %d messages, %d elements, %d bytes; want 2, 0, under 100", msgs, items, size)
	}

	a, b = memSet(keys(0, n), keys(1e6, 3)), memSet(keys(0, n), keys(2e6, 2))
	msgs, items, size = runRounds(t, a, b)
	t.Logf("5 differences in %d: %d messages, %d elements, %d bytes", n, msgs, items, size)
	if items != 5 || size > 24<<10 || msgs > 8 {
		t.Fatalf("5 differences: %d messages, %d elements, %d bytes; want 5 elements in under 24 KiB and 8 messages", msgs, items, size)
	}
	if len(a.ids) != n+5 || len(b.ids) != n+5 {
		t.Fatalf("after reconciling: %d and %d elements, want %d each", len(a.ids), len(b.ids), n+5)
	}
	for i := range a.ids {
		if a.ids[i] != b.ids[i] {
			t.Fatal("after reconciling the sets differ")
		}
	}

	// Ten times the book, the same difference: the cost grows with the
	// depth of the ranges (log16 of the book), not the book.
	a10, b10 := memSet(keys(0, 10*n), keys(1e6, 3)), memSet(keys(0, 10*n), keys(2e6, 2))
	_, items10, size10 := runRounds(t, a10, b10)
	t.Logf("5 differences in %d: %d elements, %d bytes", 10*n, items10, size10)
	if items10 != 5 || size10 > 2*size {
		t.Fatalf("5 differences in %d: %d elements in %d bytes; want 5 in under twice the %d bytes of a tenth of the book", 10*n, items10, size10, size)
	}

	a, b = memSet(keys(0, n/2), keys(1e6, n/2)), memSet(keys(0, n/2), keys(2e6, n/2))
	bigMsgs, items, bigSize := runRounds(t, a, b)
	t.Logf("%d differences in %d: %d messages, %d elements, %d bytes", n, n, bigMsgs, items, bigSize)
	if items != n || bigSize <= size {
		t.Fatalf("half the book different: %d elements in %d bytes; want %d, more than %d", items, bigSize, n, size)
	}

	// One side empty (a late joiner): it gets everything.
	a, b = memSet(), memSet(keys(0, 300))
	if _, items, _ := runRounds(t, a, b); items != 300 || len(a.ids) != 300 {
		t.Fatalf("empty side got %d elements, holds %d; want 300", items, len(a.ids))
	}
}

// FuzzReconcileRespond: whatever a peer sends, checkReconcile bounds it or
// respond answers it with a message that itself passes checkReconcile.
func FuzzReconcileRespond(f *testing.F) {
	set := memSet(keys(0, 100))
	seed := func(m *proto.Reconcile) {
		b, err := gproto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	seed(&proto.Reconcile{Market: mkt, Ranges: []*proto.ReconcileRange{set.rangeOf(nil)}})
	seed(&proto.Reconcile{Market: mkt, Ranges: []*proto.ReconcileRange{memSet(keys(50, 100)).rangeOf(nil)}})
	seed(&proto.Reconcile{Ranges: []*proto.ReconcileRange{memSet(keys(0, 3)).rangeOf([]byte{1})}, Want: [][]byte{set.ids[0][:]}})
	seed(&proto.Reconcile{Ranges: []*proto.ReconcileRange{{Prefix: []byte{16}}}})
	seed(&proto.Reconcile{Done: true})
	f.Add([]byte{0x12, 0x02, 0x0a, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		var in proto.Reconcile
		if gproto.Unmarshal(data, &in) != nil || checkReconcile(&in) != nil {
			return
		}
		out := set.respond(&in, reconcileBudget)
		if err := checkReconcile(out); err != nil {
			t.Fatalf("respond made a message its peer refuses: %v", err)
		}
	})
}

// bookOf returns Books holding n asks of distinct makers whose envelopes
// are size bytes sharing a long prefix (as sealed orders do).
func bookOf(tb testing.TB, n, size int) (*Books, *clock) {
	tb.Helper()
	clk := &clock{t: t0}
	b := New(Config{Now: clk.now})
	for i := range n {
		o := ask(fmt.Sprintf("o%06d", i), fmt.Sprintf("maker-%d", i), 1, 2_000_000+int64(i))
		o.Created = t0.Add(-time.Duration(i%97) * time.Second)
		ev := orderEvent(o)
		ev.Envelope = append(bytes.Repeat([]byte{0xa5}, size-len(o.ID)), o.ID...)
		b.Apply(mkt, ev)
		knowStamps(b, o.Maker)
	}
	return b, clk
}

// TestElementIDs: a reconciliation's snapshot names each element by the
// SHA-256 of its kind and bytes, snapshot after snapshot while the book
// changes (the IDs are kept between snapshots, not recomputed), and keeps
// the IDs of the elements it listed only.
func TestElementIDs(t *testing.T) {
	b, _ := bookOf(t, 50, 300)
	check := func(when string, want int) {
		t.Helper()
		e := b.reconcileSet(mkt)
		if len(e.ids) != want {
			t.Fatalf("%s: %d elements, want %d", when, len(e.ids), want)
		}
		for _, m := range b.SyncAnswer(mkt) {
			var id elemID
			switch {
			case m.GetOrder() != nil:
				id = hashElem(kindOrder, m.GetOrder(), 0)
			case m.GetCancel() != nil:
				id = hashElem(kindCancel, m.GetCancel(), 0)
			default:
				t.Fatalf("%s: unexpected element %v", when, m)
			}
			if _, ok := e.elems[id]; !ok {
				t.Fatalf("%s: an element is missing or misnamed", when)
			}
		}
		b.idMu.Lock()
		kept := len(b.elemIDs[mkt])
		b.idMu.Unlock()
		if kept != want {
			t.Fatalf("%s: %d IDs kept, want %d", when, kept, want)
		}
	}
	check("first", 50)
	check("again", 50)
	if err := b.With(mkt, "USD", func(s *Replica) {
		if err := s.Cancel("o000007", "maker-7"); err != nil {
			t.Fatal(err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	o := ask("new", "maker-new", 1, 2_500_000)
	b.Apply(mkt, orderEvent(o))
	knowStamps(b, o.Maker)
	check("after a cancel and a new order", 50) // 49 orders, the new one, and no cancel: it has no sealed form here
}

// TestReconcileSetReused: a reconciliation's snapshot is handed out
// again while the market is unchanged, and built anew after anything it
// lists changes (an order added, cancelled, expired; a maker's stamp
// learnt, so its orders are now carried; one order for another, the
// count unchanged) or once it is snapMaxAge old;
// each snapshot lists what a fresh one would.
func TestReconcileSetReused(t *testing.T) {
	b, clk := bookOf(t, 20, 200)
	fresh := func() []elemID {
		set, _ := b.elements(mkt, false)
		return set.sorted().ids
	}
	last := b.reconcileSet(mkt)
	step := func(what string, reused bool) {
		t.Helper()
		got := b.reconcileSet(mkt)
		if (got == last) != reused {
			t.Fatalf("%s: snapshot reused %v, want %v", what, got == last, reused)
		}
		if !slices.Equal(got.ids, fresh()) {
			t.Fatalf("%s: the snapshot lists %d elements, a fresh one %d", what, len(got.ids), len(fresh()))
		}
		last = got
	}
	step("unchanged", true)
	o := ask("new", "maker-new", 1, 2_500_000)
	o.Expires = t0.Add(time.Minute)
	b.Apply(mkt, orderEvent(o))
	step("an order of a maker without a stamp", true) // not carried
	knowStamps(b, o.Maker)
	step("its maker's stamp learnt", false)
	step("unchanged again", true)
	if err := b.With(mkt, "USD", func(s *Replica) {
		if err := s.Cancel("o000003", "maker-3"); err != nil {
			t.Fatal(err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	step("an order cancelled", false)
	// One order for another: as many elements as before.
	if err := b.With(mkt, "USD", func(s *Replica) {
		if err := s.Cancel("o000005", "maker-5"); err != nil {
			t.Fatal(err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	swap := ask("swap", "maker-5", 1, 2_400_000)
	b.Apply(mkt, orderEvent(swap))
	step("one order for another", false)
	clk.set(t0.Add(2 * time.Minute))
	step("an order expired", false)
	clk.set(t0.Add(2*time.Minute + snapMaxAge - time.Second))
	step("unchanged, younger than snapMaxAge", true)
	clk.set(t0.Add(2*time.Minute + snapMaxAge + time.Second))
	step("snapMaxAge old", false)
}

// BenchmarkReconcileSnapshotReused is what a reconciliation's snapshot
// costs when the market has not changed since the last one (2,000 open
// asks): the signature's pass, no allocation.
func BenchmarkReconcileSnapshotReused(b *testing.B) {
	books, _ := bookOf(b, 2000, 400)
	books.reconcileSet(mkt)
	b.ReportAllocs()
	for b.Loop() {
		if e := books.reconcileSet(mkt); len(e.ids) != 2000 {
			b.Fatalf("%d elements", len(e.ids))
		}
	}
}

// BenchmarkReconcileSnapshot is what each reconciliation, started or
// answered, costs a replica before the first message: the snapshot of a
// market of 2,000 open asks sorted by element ID.
func BenchmarkReconcileSnapshot(b *testing.B) {
	books, _ := bookOf(b, 2000, 400)
	b.ReportAllocs()
	for b.Loop() {
		if e, _ := books.elements(mkt, false); len(e.sorted().ids) != 2000 {
			b.Fatalf("%d elements", len(e.ids))
		}
	}
}
