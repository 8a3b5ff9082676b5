package market

import (
	"errors"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"
)

// The engine benchmarks report ops/s over the timed part only
// (b.Elapsed), and allocations per op. Their orders are a few templates
// whose fields change per op (the book copies what it keeps), and their IDs
// come from an idSource, so the loop itself allocates nothing: whatever
// allocs/op shows is the book's.

// idLen is the length of a CIDv1 in base32 ("bafy..."), the IDs the
// network uses.
const idLen = 59

// idChunk is how many IDs an idSource builds at a time.
const idChunk = 1 << 16

// idSource hands out distinct CID-sized IDs by index. With cycle > 0 (a
// power of two, so the timed loop divides by nothing), index i gives the
// same ID as i+cycle: a benchmark may reuse an ID once
// the book has forgotten it; the whole cycle is built up front (once per
// process and salt), so the timed loop allocates nothing. With cycle 0
// every index is distinct: IDs are built a chunk at a time with the timer
// stopped, and only the newest chunk is kept.
type idSource struct {
	b      *testing.B
	salt   uint64
	cycle  int
	chunks []string // by chunk number; with cycle 0 only the newest is kept
	last   int      // with cycle 0, the newest chunk's number
	ahead  int      // with cycle > 0, IDs below ahead have been read ahead
}

// idPools holds the cyclic sources' chunks by salt.
var idPools = map[uint64][]string{}

func newIDSource(b *testing.B, salt uint64, cycle int) *idSource {
	s := &idSource{b: b, salt: salt, cycle: cycle, chunks: make([]string, 1), last: -1}
	if cycle > 0 {
		if cycle&(cycle-1) != 0 || cycle%idChunk != 0 {
			b.Fatalf("ID cycle %d: want a power of two, a multiple of %d", cycle, idChunk)
		}
		n := (cycle + idChunk - 1) / idChunk
		if len(idPools[salt]) != n {
			chunks := make([]string, n)
			for c := range chunks {
				chunks[c] = buildIDs(salt, c*idChunk, idChunk)
			}
			idPools[salt] = chunks
		}
		s.chunks = idPools[salt]
	}
	return s
}

func (s *idSource) id(i int) string {
	c := 0
	if s.cycle > 0 {
		s.readAhead(i)
		i &= s.cycle - 1
		c = i / idChunk
	} else if i/idChunk != s.last {
		s.b.StopTimer()
		t := cpuNanos()
		s.last = i / idChunk
		s.chunks[0] = buildIDs(s.salt, s.last*idChunk, idChunk)
		pausedCPU += cpuNanos() - t
		s.b.StartTimer()
	}
	k := i % idChunk
	return s.chunks[c][k*idLen : (k+1)*idLen]
}

// idAhead is how far ahead of its use a cyclic source reads an ID. A node
// hands the book IDs it has just decoded or computed, hot in its cache;
// read in turn from a pool of hundreds of megabytes they would reach the
// book cold. Reading them ahead, idBatch at a time (their misses overlap),
// while the book works on the current one, brings them in the way the
// node's own decoding would, at a cost to the harness of a few ns an ID.
const (
	idAhead = 64
	idBatch = 32
)

// readAhead loads the bytes of the IDs up to i+idAhead (both cache lines
// each may span) not yet read, a batch at a time.
func (s *idSource) readAhead(i int) {
	if s.ahead > i+idAhead {
		return
	}
	var sum byte
	for end := s.ahead + idBatch; s.ahead < end; s.ahead++ {
		k := s.ahead & (s.cycle - 1)
		ch := s.chunks[k/idChunk]
		off := (k % idChunk) * idLen
		sum += ch[off] + ch[off+idLen-1]
	}
	idSink += sum
}

var idSink byte

// pausedCPU is the CPU time spent with the timer stopped since startTimer,
// left out of cpu-ns/op.
var pausedCPU int64

// startTimer collects garbage left by the setup, then starts timing: the
// timed loop should not pay for the setup's garbage. It returns a function
// that reports ops/s for ops operations per iteration and the CPU time per
// iteration (cpu-ns/op), which on a shared machine varies less than wall
// time.
func startTimer(b *testing.B) func(ops int) {
	runtime.GC()
	b.ReportAllocs()
	cpu := cpuNanos()
	pausedCPU = 0
	b.ResetTimer()
	return func(ops int) {
		b.StopTimer()
		if used := cpuNanos() - cpu - pausedCPU; cpu > 0 {
			b.ReportMetric(float64(used)/float64(b.N), "cpu-ns/op")
		}
		b.ReportMetric(float64(ops*b.N)/b.Elapsed().Seconds(), "ops/s")
	}
}

// buildIDs returns n IDs from index first on, back to back in one string.
func buildIDs(salt uint64, first, n int) string {
	const b32 = "abcdefghijklmnopqrstuvwxyz234567"
	buf := make([]byte, n*idLen)
	for i := range n {
		id := buf[i*idLen : (i+1)*idLen]
		copy(id, "bafyrei")
		x := (uint64(first+i) ^ salt<<40) * 0x9e3779b97f4a7c15 // a bijection: distinct indices, distinct IDs
		for j := range 12 {
			id[7+j] = b32[(x>>(5*j))&31]
		}
		for j := 19; j < idLen; j += 12 {
			copy(id[j:], id[7:19])
		}
	}
	return string(buf)
}

// The workloads of geseq/orderbook's BenchmarkThroughput and
// BenchmarkThroughputDeep, written here from their description, with one
// AddOrder done as a replica does its own order (Take: match, apply each
// fill, rest the remainder) and one CancelOrder as Cancel. Prices are its
// band, 50.00 to 100.00 in steps of 0.25, in micro-units.
const (
	geseqLow  = 50_000_000
	geseqHigh = 100_000_000
	geseqTick = 250_000
	geseqQty  = 10
)

// BenchmarkThroughput: per iteration (4 ops), cancel the last buy and the
// last sell (both already filled: ErrNotFound), add a buy, add a sell one
// tick under it that fills it; the price walks at random within the band.
func BenchmarkThroughput(b *testing.B) {
	book := newTestBook(b, benchOpts...)
	ids := newIDSource(b, 1, 1<<21) // reused after 1 M iterations: 2 M dead IDs later, forgotten
	fillIDs := newIDSource(b, 2, 1<<21)
	buy := testBid("", "buyer", geseqQty, 0)
	sell := testAsk("", "seller", geseqQty, 0)
	bid := int64(geseqLow+geseqHigh) / 2
	ask := bid - geseqTick
	rng := rand.New(rand.NewPCG(1, 2))
	buyID, sellID := "none", "none"
	next, fills := 0, 0
	agree := func(*Match) string { fills++; return fillIDs.id(fills) }
	dst := make([]Fill, 0, 4)
	var err error
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
		if err := book.Cancel(buyID, "buyer"); err != nil && err != ErrNotFound {
			b.Fatal(err)
		}
		if err := book.Cancel(sellID, "seller"); err != nil && err != ErrNotFound {
			b.Fatal(err)
		}
		buyID, sellID = ids.id(next), ids.id(next+1)
		next += 2
		buy.ID, buy.Price = buyID, bid
		if dst, err = book.Take(dst[:0], buy, bookT0, agree); err != nil || len(dst) != 0 {
			b.Fatalf("Take(buy) = %d fills, %v", len(dst), err)
		}
		sell.ID, sell.Price = sellID, ask
		if dst, err = book.Take(dst[:0], sell, bookT0, agree); err != nil || len(dst) != 1 {
			b.Fatalf("Take(sell) = %d fills, %v", len(dst), err)
		}
	}
	report(4)
	if book.Len() != 0 {
		b.Fatalf("book holds %d orders, want none", book.Len())
	}
}

var benchOpts []BookOption

// geseqDeepWindow is how many orders BenchmarkThroughputDeep keeps resting.
const geseqDeepWindow = 50_000

// BenchmarkThroughputDeep: 50,000 orders rest (buys under the mid, sells
// over it, over 100 levels a side); per iteration (2 ops) one more is added
// and the oldest cancelled.
func BenchmarkThroughputDeep(b *testing.B) {
	book := newTestBook(b, benchOpts...)
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
	none := func(*Match) string { b.Fatal("deep book crossed"); return "" }
	dst := make([]Fill, 0, 4)
	var err error
	for i := range geseqDeepWindow {
		if dst, err = book.Take(dst[:0], order(i), bookT0, none); err != nil {
			b.Fatal(err)
		}
	}
	report := startTimer(b)
	for i := range b.N {
		if dst, err = book.Take(dst[:0], order(geseqDeepWindow+i), bookT0, none); err != nil {
			b.Fatal(err)
		}
		maker := "buyer"
		if i&1 != 0 {
			maker = "seller"
		}
		if err := book.Cancel(cancels.id(i), maker); err != nil {
			b.Fatal(err)
		}
	}
	report(2)
	if book.Len() != geseqDeepWindow {
		b.Fatalf("book holds %d orders, want %d", book.Len(), geseqDeepWindow)
	}
}

// BenchmarkApplyFill applies fills of 1 GPU from unseen buyers' bids (a
// replica that did not see the taker: it remembers what was filled) to
// resting asks of 1,024 GPUs, taken in turn; enough asks rest for b.N.
func BenchmarkApplyFill(b *testing.B) {
	book := newTestBook(b)
	asks := max(10_000, b.N/MaxOrderQuantity+1)
	askIDs, fillIDs, bidIDs := newIDSource(b, 4, 0), newIDSource(b, 6, 0), newIDSource(b, 7, 0)
	resting := make([]string, asks)
	o := testAsk("", "", MaxOrderQuantity, 0)
	makers := make([]string, 97)
	for i := range makers {
		makers[i] = "p" + askIDs.id(i)[40:]
	}
	for i := range resting {
		resting[i] = askIDs.id(100 + i)
		o.ID, o.Maker, o.Price = resting[i], makers[i%len(makers)], 2_000_000+int64(i%200)*1_000
		if err := book.Add(o, bookT0); err != nil {
			b.Fatal(err)
		}
	}
	f := Fill{Market: bookMarket, Currency: "USD", Buyer: "u1", Quantity: 1, Price: 2_200_000, LeaseType: Spot, Time: bookT0}
	report := startTimer(b)
	for i := range b.N {
		a := i % asks
		f.ID, f.BidID = fillIDs.id(i), bidIDs.id(i)
		f.AskID, f.Provider = resting[a], makers[a%len(makers)]
		if err := book.ApplyFill(f); err != nil {
			b.Fatal(err)
		}
	}
	report(1)
}

// mixedRegions are the asks' regions in the mixed workload: two east, two
// west, one abroad.
var mixedRegions = []string{"CN-SH", "CN-GZ", "CN-NM", "CN-GZ-W", "US-CA"}

// BenchmarkMixed is the engine's mixed workload on one core, one op per
// iteration, against a book holding 10,000 resting orders at the start
// (asks over 200 price levels in five regions, bids under them):
//
//   - 45% add: a new ask or bid (alternating) at a random level, resting;
//   - 40% cancel: a random resting order;
//   - 15% match: a crossing bid for 8 GPUs and 1-8 h, half of them
//     constrained to a region prefix that only one ask in 100 satisfies
//     ("US-"), the other half to any "CN-" region; Match only proposes.
//
// Adds outpace cancels, so the book grows by 5% of the ops (to about half
// a million orders at 10 M ops) and its memory fills with dead IDs: run it
// at 100k, 1 M and 10 M iterations to see whether it slows as it ages.
func BenchmarkMixed(b *testing.B) {
	rng := rand.New(rand.NewPCG(7, 11))
	book := newTestBook(b)
	ids := newIDSource(b, 5, 0)
	const resting = 10_000
	type ref struct{ id, maker string }
	live := make([]ref, 0, resting+b.N/2)
	providers, users := make([]string, 997), make([]string, 991)
	for i := range providers {
		providers[i] = "p" + ids.id(i)[40:]
	}
	for i := range users {
		users[i] = "u" + ids.id(i)[40:]
	}
	ask := testAsk("", "", 8, 0)
	ask.MinDuration = time.Hour
	bid := testBid("", "", 4, 0)
	next := 2000
	add := func(side Side) *Order {
		next++
		var o *Order
		if side == Ask {
			o = ask
			o.Maker = providers[next%len(providers)]
			o.Price = 2_000_000 + int64(rng.IntN(200))*1_000
			o.Facts.Region = mixedRegions[rng.IntN(4)]
			if rng.IntN(100) == 0 {
				o.Facts.Region = "US-CA"
			}
			o.MaxDuration = time.Duration(1+rng.IntN(24)) * time.Hour
		} else {
			o = bid
			o.Maker = users[next%len(users)]
			o.Price = 1_000_000 + int64(rng.IntN(200))*1_000
		}
		o.ID = ids.id(next)
		return o
	}
	for i := range resting {
		o := add(Side(1 + i%2))
		mustAdd(b, book, o)
		live = append(live, ref{o.ID, o.Maker})
	}
	takerUS, takerCN := testBid("", "taker", 8, 2_300_000), testBid("", "taker", 8, 2_300_000)
	takerUS.Constraints.Regions, takerCN.Constraints.Regions = []string{"US-"}, []string{"CN-"}
	buf := make([]Match, 0, 64)
	var err error
	report := startTimer(b)
	for i := range b.N {
		switch r := rng.IntN(100); {
		case r < 45:
			o := add(Side(1 + i%2))
			if err := book.Add(o, bookT0); err != nil {
				b.Fatal(err)
			}
			live = append(live, ref{o.ID, o.Maker})
		case r < 85:
			if len(live) == 0 {
				continue
			}
			j := rng.IntN(len(live))
			v := live[j]
			live[j] = live[len(live)-1]
			live = live[:len(live)-1]
			if err := book.Cancel(v.id, v.maker); err != nil {
				b.Fatal(err)
			}
		default:
			t := takerCN
			if i%2 == 0 {
				t = takerUS
			}
			t.Duration = time.Duration(1+rng.IntN(8)) * time.Hour
			if buf, err = book.MatchAppend(buf[:0], t, bookT0); err != nil {
				b.Fatal(err)
			}
		}
	}
	report(1)
}

// TestIDSource checks the benchmarks' IDs are distinct and CID-sized.
func TestIDSource(t *testing.T) {
	seen := map[string]bool{}
	s := buildIDs(9, 0, 3*idChunk/2)
	for i := range 3 * idChunk / 2 {
		id := s[i*idLen : (i+1)*idLen]
		if seen[id] || !strings.HasPrefix(id, "bafyrei") {
			t.Fatalf("ID %d = %q: repeated or not CID-like", i, id)
		}
		seen[id] = true
	}
}

// isNotFound reports a cancel of an order the book does not hold.
func isNotFound(err error) bool { return errors.Is(err, ErrNotFound) }
