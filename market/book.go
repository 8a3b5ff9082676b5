package market

import (
	"errors"
	"fmt"
	"hash/maphash"
	"iter"
	"time"
	"unsafe"
)

// Book errors. Each is returned wrapped with detail; Reason labels them.
var (
	// ErrWrongBook is returned when an order or fill names another market
	// or currency than the book's.
	ErrWrongBook = errors.New("market: wrong market or currency for this book")
	// ErrDuplicate is returned when the book already holds an order with
	// this ID, remembers it as filled or cancelled, or has already applied a
	// fill with this ID. Replays are expected on gossip: callers treat it as
	// a no-op.
	ErrDuplicate = errors.New("market: duplicate")
	// ErrDuplicateKey is returned (as a *DuplicateKeyError naming the first
	// order) when a maker reuses a client key the book still knows.
	ErrDuplicateKey = errors.New("market: duplicate client key")
	// ErrNotResting is returned when an immediate-or-cancel order is added:
	// it trades through Match or not at all.
	ErrNotResting = errors.New("market: immediate-or-cancel order cannot rest")
	// ErrNotFound is returned when a cancel names an order the book does not
	// hold (unknown, already filled, cancelled or expired).
	ErrNotFound = errors.New("market: order not in book")
	// ErrNotMaker is returned when anyone but an order's maker cancels it.
	ErrNotMaker = errors.New("market: only the maker may cancel an order")
)

// DuplicateKeyError is returned when a maker's order reuses a ClientKey of
// an order the book still knows; ID is that first order's ID. It wraps
// ErrDuplicateKey.
type DuplicateKeyError struct {
	Maker, Key, ID string
}

func (e *DuplicateKeyError) Error() string {
	return fmt.Sprintf("%v %q: already used by order %s", ErrDuplicateKey, e.Key, e.ID)
}

// Unwrap returns ErrDuplicateKey.
func (e *DuplicateKeyError) Unwrap() error { return ErrDuplicateKey }

// DefaultMemoryLimit is how many dead order IDs, and separately how many
// applied fill IDs, a Book remembers at most (see WithMemoryLimit).
const DefaultMemoryLimit = 1 << 20

// maxMemoryLimit bounds WithMemoryLimit: the replay memory's index holds
// ring positions in 32 bits.
const maxMemoryLimit = 1 << 30

// fillMemory is how long a fill ID is remembered after the fill's time: any
// order a fill touched has expired by then (MaxOrderTTL), so a replay can no
// longer reduce a live order.
const fillMemory = MaxOrderTTL + MaxClockSkew

// freeEntries bounds the pool of recycled order entries.
const freeEntries = 4096

// entrySlab is the most entries allocated at once.
const entrySlab = 8192

// BookOption configures a Book.
type BookOption func(*Book) error

// WithMemoryLimit caps the dead order IDs and the applied fill IDs a book
// remembers (each; default DefaultMemoryLimit). Both are forgotten anyway
// once a replay could do no harm (an order at its expiry; a fill a day after
// its time); past the cap the oldest (first remembered) are forgotten
// first.
func WithMemoryLimit(n int) BookOption {
	return func(b *Book) error {
		if n < 1 || n > maxMemoryLimit {
			return fmt.Errorf("market: memory limit %d, want 1..%d", n, maxMemoryLimit)
		}
		b.limit = n
		return nil
	}
}

// Book is one market's order book in one currency: the bids and asks this
// replica has seen, in price-time priority, and the fills applied to them.
//
// Priority: better price first; at one price, this book's arrival order
// (replicas may differ on arrival, which the maker's re-check on Take
// settles). Every method is deterministic: the same calls in the same order
// give the same book. A Book is not safe for concurrent use.
//
// Memory: each live order costs one entry (recycled); each filled or
// cancelled order's ID is remembered until the order's own expiry, so a
// gossip replay is refused (after expiry Validate refuses it); each applied
// fill's ID until a day past its time, so a replayed fill changes nothing.
// Both are capped by WithMemoryLimit (oldest forgotten first) and are
// forgotten in Sweep once expired. Every operation costs O(1) in the size
// of this memory (see idtable.go), and none allocates in the steady state.
type Book struct {
	market, currency string
	limit            int
	seed             maphash.Seed

	bids, asks bookSide
	orders     liveTable
	keys       map[clientKey]string // live and remembered orders' client keys
	expiry     []expItem            // min-heap by (exp, seq); stale items are skipped
	seq        uint64

	tombs memory[unsafe.Pointer] // dead orders, and fills seen before their order (see tombRec)
	fills memory[struct{}]       // applied fill IDs

	// deadKeys holds the client keys of the dead orders remembered with
	// one, by slot (tombRec's aux - 1); deadFree the free slots. Most
	// dead orders have none, so the ring's records hold no room for one.
	deadKeys []string
	deadFree []uint32

	last    Fill // the latest applied fill by (Time, ID)
	hasLast bool

	free    []*entry
	slab    []entry  // fresh entries, allocated a slab at a time
	matches []Match  // Take's scratch
	takes   []*entry // the entries of matches
}

type clientKey struct{ maker, key string }

// entry is a resting order. The fields a match scan reads on every order it
// passes over come first, to share a cache line.
type entry struct {
	exp       int64 // o.Expires in Unix nanoseconds
	next      *entry
	remaining uint32
	h         uint64 // the ID's handle
	tombed    bool   // the replay memory may hold a record of the ID
	seq       uint64
	lvl       *level // nil once the order has left the book
	prev      *entry
	// The order's place in its level's list of its region (see
	// regionindex.go).
	rl           *regionList
	rnext, rprev *entry
	o            Order
}

// expItem is a resting order's place in the expiry heap. Removing an order
// leaves its item behind; the item is stale once its entry has left the
// book or been reused (seq differs), and is dropped when it surfaces or the
// heap is compacted.
type expItem struct {
	exp int64
	seq uint64
	e   *entry
}

func (it expItem) stale() bool { return it.e.lvl == nil || it.e.seq != it.seq }

type level struct {
	price      int64
	qty        uint64 // sum of the orders' remaining quantity
	n          int
	head, tail *entry
	regions    []*regionList // the level's orders by region, each a FIFO
}

// bookSide keeps its levels sorted worst first, so the best is last: the
// busy end of the slice is its cheap end.
type bookSide struct {
	side   Side
	hint   int // the index search last found or placed a price at
	levels []*level
	free   []*level
	rfree  []*regionList
}

type tombState uint8

const (
	tombCancelled tombState = 1 + iota
	tombFilled
	tombEarly // fills arrived before the order
)

type tomb struct {
	state  tombState
	side   Side
	filled uint32 // tombEarly: quantity already filled
	maker  string
	key    string // the dead order's client key
}

// tombRec is a dead order's record in the replay memory: v is its maker's
// bytes, and meta's bits above the memory's hold its state, side, the
// maker's length and aux: for tombEarly the GPUs already filled, for the
// others 1 + the slot of its client key in deadKeys (0: none; an early
// tomb, made from fills, has no key).
type tombRec = memRec[unsafe.Pointer]

const (
	tombStateShift = 16 // 2 bits
	tombSideShift  = 18 // 2 bits
	tombMakerShift = 24 // 8 bits: MaxMakerLen fits
	tombAuxShift   = 32
)

func recState(r *tombRec) tombState { return tombState(r.meta >> tombStateShift & 3) }
func recSide(r *tombRec) Side       { return Side(r.meta >> tombSideShift & 3) }
func recMaker(r *tombRec) string {
	return unsafe.String((*byte)(r.v), int(r.meta>>tombMakerShift&0xff))
}
func recAux(r *tombRec) uint32 { return uint32(r.meta >> tombAuxShift) }

// recFilled is what an early tomb's fills took of the order.
func recFilled(r *tombRec) uint32 { return recAux(r) }

// addFilled adds q GPUs to an early tomb (checkLeg keeps the sum within
// MaxOrderQuantity).
func addFilled(r *tombRec, q uint32) { r.meta += uint64(q) << tombAuxShift }

// recKey returns a dead order's client key.
func (b *Book) recKey(r *tombRec) string {
	if recState(r) == tombEarly || recAux(r) == 0 {
		return ""
	}
	return b.deadKeys[recAux(r)-1]
}

// setTomb stores t in r, a record just put.
func (b *Book) setTomb(r *tombRec, t tomb) {
	aux := uint64(t.filled)
	if t.key != "" {
		if t.state == tombEarly {
			panic("market: an early tomb with a client key")
		}
		var slot uint32
		if n := len(b.deadFree); n > 0 {
			slot = b.deadFree[n-1]
			b.deadFree = b.deadFree[:n-1]
			b.deadKeys[slot] = t.key
		} else {
			slot = uint32(len(b.deadKeys))
			b.deadKeys = append(b.deadKeys, t.key)
		}
		aux = uint64(slot) + 1
	}
	if len(t.maker) > 0xff {
		panic("market: maker too long for a tomb") // validated first: MaxMakerLen
	}
	r.v = unsafe.Pointer(unsafe.StringData(t.maker))
	r.meta = r.meta&metaMine | uint64(t.state)<<tombStateShift | uint64(t.side)<<tombSideShift |
		uint64(len(t.maker))<<tombMakerShift | aux<<tombAuxShift
}

// freeTomb releases a dead order's record as it is deleted or dropped;
// a dropped one's client key is forgotten.
func (b *Book) freeTomb(r *tombRec, dropped bool) {
	key := b.recKey(r)
	if key == "" {
		return
	}
	slot := recAux(r) - 1
	b.deadKeys[slot] = ""
	b.deadFree = append(b.deadFree, slot)
	if dropped {
		b.dropKey(recMaker(r), key, r.ID())
	}
}

// NewBook returns an empty book for market (a market key) priced in currency.
func NewBook(market, currency string, opts ...BookOption) (*Book, error) {
	if !ValidMarketKey(market) {
		return nil, fmt.Errorf("%w: %q", ErrOrderMarket, market)
	}
	if _, err := LookupCurrency(currency); err != nil {
		return nil, err
	}
	b := &Book{
		market:   market,
		currency: currency,
		limit:    DefaultMemoryLimit,
		seed:     maphash.MakeSeed(),
		bids:     bookSide{side: Bid},
		asks:     bookSide{side: Ask},
		keys:     make(map[clientKey]string),
	}
	for _, opt := range opts {
		if err := opt(b); err != nil {
			return nil, err
		}
	}
	b.tombs = newMemory(b.limit, b.hash, b.freeTomb)
	b.fills = newMemory[struct{}](b.limit, b.hash, nil)
	return b, nil
}

// Market returns the book's market key.
func (b *Book) Market() string { return b.market }

// Currency returns the book's currency code.
func (b *Book) Currency() string { return b.currency }

// Len returns the number of resting orders.
func (b *Book) Len() int { return b.orders.n }

func (b *Book) hash(id string) uint64 { return idHash(b.seed, id) }

// admit checks an order once for any book operation: it names this book
// and is valid at now.
func (b *Book) admit(o *Order, now time.Time) error {
	if o.Market != b.market || o.Currency != b.currency {
		return fmt.Errorf("%w: order for %s in %s, book is %s in %s", ErrWrongBook, o.Market, o.Currency, b.market, b.currency)
	}
	return o.validate(now, false)
}

// Add rests an order. It validates the order against now and refuses one
// the book holds or remembers as filled or cancelled (ErrDuplicate), a client
// key the maker already used (*DuplicateKeyError), an immediate-or-cancel
// order (ErrNotResting) and one for another book (ErrWrongBook). Fills seen
// before the order arrived are deducted from it. Add never matches: a node
// calls Match for its own orders first (or Take, which does both).
//
// The book keeps a copy of *o; slices in its Constraints are shared and must
// not be modified afterwards.
func (b *Book) Add(o *Order, now time.Time) error {
	if o.ID == "" {
		return fmt.Errorf("%w: no ID", ErrOrderSchema)
	}
	h := b.early(o)
	if err := b.admit(o, now); err != nil {
		return err
	}
	if o.TimeInForce == IOC {
		return ErrNotResting
	}
	filled, rec, err := b.prior(o, h)
	if err != nil {
		return err
	}
	if err := b.keyFree(o); err != nil {
		return err
	}
	if filled >= o.Quantity {
		b.bury(o.ID, h, o.Expires.UnixNano(), false, tomb{state: tombFilled, side: o.Side, maker: o.Maker, key: o.ClientKey})
		return ErrDuplicate
	}
	if filled > 0 {
		b.tombs.del(h, o.ID)
		rec = nil
	}
	b.rest(o, h, filled, rec != nil)
	return nil
}

// early returns the handle of o's ID and starts loading the replay
// memory's index line and the order table's slot for it, so that the
// misses overlap the order's validation instead of following it: the
// lookup of a never-seen ID mostly ends at the memory's filter, and the
// insert when the order dies finds the line loaded. An ID too long to be
// valid is not hashed (validation refuses it).
func (b *Book) early(o *Order) uint64 {
	if len(o.ID) > MaxOrderIDLen {
		return 0
	}
	h := b.hash(o.ID)
	ti, tf := b.tombs.lines(h)
	slot := b.orders.line(h)
	prefetch4(ti, tf, slot, slot)
	return h
}

// prior returns what of o (handle h) is already filled by fills seen before
// it, and ErrDuplicate if the book holds it or remembers it as dead. rec is
// the memory's record of o's ID, nil if it has none (expired or not).
func (b *Book) prior(o *Order, h uint64) (filled uint32, rec *tombRec, err error) {
	if b.orders.get(h, o.ID) != nil {
		return 0, nil, ErrDuplicate
	}
	rec, live := b.tombs.lookup(h, o.ID)
	if !live {
		return 0, rec, nil
	}
	if recState(rec) != tombEarly {
		return 0, rec, ErrDuplicate
	}
	if recSide(rec) == o.Side && recMaker(rec) == o.Maker {
		return recFilled(rec), rec, nil
	}
	return 0, rec, nil
}

// keyFree refuses o if its maker's client key is taken.
func (b *Book) keyFree(o *Order) error {
	if o.ClientKey == "" {
		return nil
	}
	if id, ok := b.ClientKey(o.Maker, o.ClientKey); ok {
		return &DuplicateKeyError{Maker: o.Maker, Key: o.ClientKey, ID: id}
	}
	return nil
}

// rest puts o (handle h, filled already filled) in the book. tombed says
// the memory may hold a record of its ID.
func (b *Book) rest(o *Order, h uint64, filled uint32, tombed bool) {
	if o.ClientKey != "" {
		b.keys[clientKey{o.Maker, o.ClientKey}] = o.ID
	}
	e := b.newEntry()
	e.o = *o
	e.h = h
	e.tombed = tombed
	e.remaining = o.Quantity - filled
	e.seq = b.seq
	b.seq++
	e.exp = o.Expires.UnixNano()
	b.orders.put(h, e)
	b.sideOf(o.Side).insert(e)
	b.pushExpiry(e)
}

// Cancel removes a resting order on its maker's behalf. Only maker may cancel
// (ErrNotMaker); an order the book does not hold gives ErrNotFound (as is:
// a cancel racing a fill is expected). The ID is remembered so a replay of
// the order is refused.
func (b *Book) Cancel(id, maker string) error {
	h := b.hash(id)
	prefetch2(b.tombs.lines(h)) // the tomb's lines, loaded beside the order's
	e := b.orders.get(h, id)
	if e == nil {
		return ErrNotFound
	}
	if e.o.Maker != maker {
		return fmt.Errorf("%w: order %s", ErrNotMaker, id)
	}
	b.kill(e, tombCancelled)
	return nil
}

// Sweep removes every order that has expired by now and returns their IDs,
// earliest expiry first. It also forgets dead order IDs and fill IDs whose
// replay can no longer do harm.
func (b *Book) Sweep(now time.Time) []string {
	n := now.UnixNano()
	var ids []string
	for len(b.expiry) > 0 && b.expiry[0].exp <= n {
		it := b.popExpiry()
		if it.stale() {
			continue
		}
		e := it.e
		ids = append(ids, e.o.ID)
		if e.o.ClientKey != "" {
			b.dropKey(e.o.Maker, e.o.ClientKey, e.o.ID)
		}
		b.remove(e)
	}
	b.tombs.sweep(n)
	b.fills.sweep(n)
	return ids
}

// dropKey forgets maker's client key if it still names id.
func (b *Book) dropKey(maker, key, id string) {
	if key == "" {
		return
	}
	ck := clientKey{maker, key}
	if b.keys[ck] == id {
		delete(b.keys, ck)
	}
}

// Level is one price level of one side: its price, the GPUs resting there
// and the number of orders.
type Level struct {
	Price    int64
	Quantity int
	Orders   int
}

// Depth returns up to n price levels per side, best first (all of them when
// n <= 0). Orders that have expired but not yet been swept are included.
func (b *Book) Depth(n int) (bids, asks []Level) {
	return b.bids.depth(n), b.asks.depth(n)
}

func (s *bookSide) depth(n int) []Level {
	if n <= 0 || n > len(s.levels) {
		n = len(s.levels)
	}
	if n == 0 {
		return nil
	}
	out := make([]Level, 0, n)
	for i := len(s.levels) - 1; len(out) < n; i-- {
		l := s.levels[i]
		out = append(out, Level{Price: l.price, Quantity: int(l.qty), Orders: l.n})
	}
	return out
}

// BestBid returns the highest bid price; ok is false when there is no bid.
func (b *Book) BestBid() (price int64, ok bool) { return b.bids.best() }

// BestAsk returns the lowest ask price; ok is false when there is no ask.
func (b *Book) BestAsk() (price int64, ok bool) { return b.asks.best() }

// Spread returns best ask minus best bid; ok is false unless both exist. It
// may be zero or negative: constraints, self-match prevention and post-only
// orders can leave a book crossed.
func (b *Book) Spread() (spread int64, ok bool) {
	bid, ok1 := b.BestBid()
	ask, ok2 := b.BestAsk()
	if !ok1 || !ok2 {
		return 0, false
	}
	return ask - bid, true
}

// Lookup returns a copy of a resting order and its remaining quantity.
func (b *Book) Lookup(id string) (o Order, remaining uint32, ok bool) {
	e := b.orders.get(b.hash(id), id)
	if e == nil {
		return Order{}, 0, false
	}
	return e.o, e.remaining, true
}

// ClientKey returns the ID of the order the book knows (resting or
// remembered) under maker's client key.
func (b *Book) ClientKey(maker, key string) (id string, ok bool) {
	id, ok = b.keys[clientKey{maker, key}]
	if !ok {
		return "", false
	}
	h := b.hash(id)
	if e := b.orders.get(h, id); e != nil {
		return id, true
	}
	if _, ok := b.tombs.get(h, id); ok {
		return id, true
	}
	return "", false // remembered past its expiry, not yet dropped
}

// Orders yields one side's resting orders in priority order with their
// remaining quantity. The book must not be changed while iterating.
func (b *Book) Orders(side Side) iter.Seq2[Order, uint32] {
	return func(yield func(Order, uint32) bool) {
		s := b.sideOf(side)
		for i := len(s.levels) - 1; i >= 0; i-- {
			for e := s.levels[i].head; e != nil; e = e.next {
				if !yield(e.o, e.remaining) {
					return
				}
			}
		}
	}
}

func (b *Book) sideOf(s Side) *bookSide {
	if s == Bid {
		return &b.bids
	}
	return &b.asks
}

func (b *Book) newEntry() *entry {
	if n := len(b.free); n > 0 {
		e := b.free[n-1]
		b.free = b.free[:n-1]
		return e
	}
	if len(b.slab) == 0 {
		// Slabs grow with the book, to 8192 entries (~4 MB, on huge
		// pages where the kernel allows: a deep book's entries are
		// visited at random). The cost: a slab is freed only when none
		// of its entries is resting or pooled, so a book that shrinks
		// from a peak may keep some of the peak's memory.
		b.slab = hugeSlice[entry](min(entrySlab, max(16, 2*b.orders.n)))
	}
	e := &b.slab[0]
	b.slab = b.slab[1:]
	return e
}

// remove takes e out of the book and recycles it (its order is left in
// place until the entry is reused: the pool is bounded). Its expiry item
// stays behind, stale.
func (b *Book) remove(e *entry) {
	b.sideOf(e.o.Side).unlink(e)
	b.orders.del(e.h, e)
	if len(b.free) < freeEntries {
		b.free = append(b.free, e)
	}
	if len(b.expiry) > 2*b.orders.n+1024 {
		b.compactExpiry()
	}
}

// kill removes e and remembers its ID (and client key) until its expiry.
func (b *Book) kill(e *entry, state tombState) {
	r := b.tombs.put(e.h, e.o.ID, e.exp, !e.tombed)
	b.setTomb(r, tomb{state: state, side: e.o.Side, maker: e.o.Maker, key: e.o.ClientKey})
	if e.o.ClientKey != "" {
		b.keys[clientKey{e.o.Maker, e.o.ClientKey}] = e.o.ID
	}
	b.remove(e)
}

// bury remembers a dead order (handle h) until exp; fresh says the memory
// holds no record of it.
func (b *Book) bury(id string, h uint64, exp int64, fresh bool, t tomb) {
	b.setTomb(b.tombs.put(h, id, exp, fresh), t)
	if t.key != "" {
		b.keys[clientKey{t.maker, t.key}] = id
	}
}

const minTime = -1 << 63

// insert appends e to the FIFO of its price level, creating the level.
func (s *bookSide) insert(e *entry) {
	i, found := s.search(e.o.Price)
	var l *level
	if found {
		l = s.levels[i]
	} else {
		if n := len(s.free); n > 0 {
			l = s.free[n-1]
			s.free = s.free[:n-1]
		} else {
			l = new(level)
		}
		l.price = e.o.Price
		s.levels = append(s.levels, nil)
		copy(s.levels[i+1:], s.levels[i:])
		s.levels[i] = l
	}
	e.lvl = l
	e.next = nil
	e.prev = l.tail
	if l.tail != nil {
		l.tail.next = e
	} else {
		l.head = e
	}
	l.tail = e
	l.n++
	l.qty += uint64(e.remaining)
	s.linkRegion(l, e)
}

// unlink takes e out of its level, dropping the level when it empties.
func (s *bookSide) unlink(e *entry) {
	l := e.lvl
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		l.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		l.tail = e.prev
	}
	l.n--
	l.qty -= uint64(e.remaining)
	s.unlinkRegion(l, e)
	e.prev, e.next, e.lvl = nil, nil, nil
	if l.n > 0 {
		return
	}
	i, _ := s.search(l.price)
	copy(s.levels[i:], s.levels[i+1:])
	s.levels[len(s.levels)-1] = nil
	s.levels = s.levels[:len(s.levels)-1]
	*l = level{regions: l.regions[:0]}
	if len(s.free) < freeEntries {
		s.free = append(s.free, l)
	}
}

// better reports whether price a has priority over price b on this side.
func (s *bookSide) better(a, b int64) bool {
	if s.side == Bid {
		return a > b
	}
	return a < b
}

// search returns the index of price's level, or where it would be inserted.
// It looks first at the level it last found and its two neighbours: orders
// come in at and around the same few prices.
func (s *bookSide) search(price int64) (int, bool) {
	for _, i := range [3]int{s.hint, s.hint - 1, s.hint + 1} {
		if uint(i) < uint(len(s.levels)) && s.levels[i].price == price {
			s.hint = i
			return i, true
		}
	}
	lo, hi := 0, len(s.levels)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s.better(price, s.levels[m].price) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	s.hint = lo
	return lo, lo < len(s.levels) && s.levels[lo].price == price
}

func (s *bookSide) best() (int64, bool) {
	if len(s.levels) == 0 {
		return 0, false
	}
	return s.levels[len(s.levels)-1].price, true
}

// The expiry heap: resting orders by (exp, seq), with stale items left
// behind by removals.

func (a expItem) before(b expItem) bool {
	return a.exp < b.exp || (a.exp == b.exp && a.seq < b.seq)
}

func (b *Book) pushExpiry(e *entry) {
	b.expiry = append(b.expiry, expItem{e.exp, e.seq, e})
	b.siftUp(len(b.expiry) - 1)
}

func (b *Book) popExpiry() expItem {
	h := b.expiry
	top, last := h[0], len(h)-1
	h[0] = h[last]
	h[last] = expItem{}
	b.expiry = h[:last]
	if last > 0 {
		b.siftDown(0)
	}
	return top
}

// compactExpiry drops the stale items and restores the heap.
func (b *Book) compactExpiry() {
	h := b.expiry[:0]
	for _, it := range b.expiry {
		if !it.stale() {
			h = append(h, it)
		}
	}
	clear(b.expiry[len(h):])
	b.expiry = h
	for i := len(h)/2 - 1; i >= 0; i-- {
		b.siftDown(i)
	}
}

func (b *Book) siftUp(i int) {
	h := b.expiry
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].before(h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (b *Book) siftDown(i int) {
	h := b.expiry
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if r := c + 1; r < len(h) && h[r].before(h[c]) {
			c = r
		}
		if !h[c].before(h[i]) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}
