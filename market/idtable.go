package market

import (
	"hash/maphash"
	"math/bits"
	"slices"
	"unsafe"
)

// Order and fill IDs are CID strings on the wire; inside a Book each is
// hashed once, at the edge, to a 64-bit handle, and the book's tables are
// open-addressing arrays of handles probed linearly. A handle only finds
// candidates: every hit is confirmed by comparing the ID string itself, so
// two IDs sharing a handle are still told apart. The seed is per book and
// random, so nobody can aim IDs at one probe chain; no output of the book
// depends on the tables' layout, so books stay deterministic.

// idHash is an ID's handle.
func idHash(seed maphash.Seed, id string) uint64 { return maphash.String(seed, id) }

// liveTable indexes the resting orders by ID. Slots hold the handle and the
// entry (nil: empty); the load stays at most one half.
type liveTable struct {
	slots []liveSlot
	n     int
}

type liveSlot struct {
	h uint64
	e *entry
}

const minTableSlots = 64

func (t *liveTable) get(h uint64, id string) *entry {
	if t.slots == nil {
		return nil
	}
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.e == nil {
			return nil
		}
		if s.h == h && s.e.o.ID == id {
			return s.e
		}
	}
}

// put adds e, which must not be in the table, under handle h.
func (t *liveTable) put(h uint64, e *entry) {
	if 2*(t.n+1) > len(t.slots) {
		t.grow()
	}
	mask := uint64(len(t.slots) - 1)
	i := h & mask
	for t.slots[i].e != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = liveSlot{h, e}
	t.n++
}

func (t *liveTable) grow() {
	old := t.slots
	t.slots = hugeSlice[liveSlot](max(minTableSlots, 2*len(old)))
	mask := uint64(len(t.slots) - 1)
	for _, s := range old {
		if s.e == nil {
			continue
		}
		i := s.h & mask
		for t.slots[i].e != nil {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}

// line is the slot h's lookup starts on, for a prefetch; nil if the
// table has none yet.
func (t *liveTable) line(h uint64) unsafe.Pointer {
	if t.slots == nil {
		return nil
	}
	return unsafe.Pointer(&t.slots[h&uint64(len(t.slots)-1)])
}

// del removes e, held under handle h.
func (t *liveTable) del(h uint64, e *entry) {
	mask := uint64(len(t.slots) - 1)
	i := h & mask
	for t.slots[i].e != e {
		i = (i + 1) & mask
	}
	// Backward-shift deletion: pull each later member of the run whose
	// home lies at or before the hole into it, so no tombstones are left.
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		s := t.slots[j]
		if s.e == nil {
			break
		}
		if (j-s.h)&mask >= (j-i)&mask {
			t.slots[i] = s
			i = j
		}
	}
	t.slots[i] = liveSlot{}
	t.n--
}

// memory is the book's replay memory of one kind of ID (dead orders, or
// applied fills): records in a ring in arrival order, indexed by a table of
// buckets of handles, with a filter in front. Each event costs O(1): a look
// at one line of the filter, and if that does not rule the ID out at one
// bucket (one cache line), to look an ID up; an append, and at the cap
// dropping the oldest record, to remember one. A record is forgotten logically once its expiry
// is not after the book's sweep time (lookups skip it) and physically when
// it reaches the ring's head in a sweep or is dropped at the cap.
//
// Dropping a record costs no index access: a slot names its record by
// arrival number, and a slot naming a record outside the ring's window is
// stale, as good as empty to an insert and skipped by a lookup (and
// cleared, a bucket every few thousand inserts, long before its 32-bit
// arrival number could name a record again). An ID's slot lives in its
// home bucket, or, when that bucket is full of live slots, in the first
// later bucket with room; each bucket counts the live slots that passed
// over it, so a lookup moves on only past a bucket whose count is not
// zero, and stale slots never lengthen a lookup. The ring is allocated a
// block at a time as it fills; nothing is copied or rehashed in the
// steady state.
type memory[V any] struct {
	limit      int
	hash       func(string) uint64              // an ID's handle: for the records stored past home
	onFree     func(r *memRec[V], dropped bool) // called with each record as it is deleted (dropped false) or dropped undeleted
	blocks     [][]memRec[V]                    // the ring (limit records), allocated as used
	head, tail uint64                           // arrival numbers: oldest held, next
	hpos, tpos int                              // their positions in the ring
	live, gone int                              // records held and not deleted; deleted ones still in the ring
	swept      int64                            // records with exp <= swept are forgotten

	buckets []memBucket // a power of two of them, or none yet
	clean   int         // the next bucket to clear of stale slots
	// cleanMask: the cleaner clears a bucket when tail&cleanMask is 0,
	// cleanCycle/len(buckets) inserts apart (no division on the way).
	cleanMask uint64

	// filt is a filter in front of the index (see maybe): two
	// generations of word-sized Bloom filters, interleaved (generation
	// g's word w at 2w+g) so one line answers a lookup; fshift picks the
	// word. Generation fgen holds the slots of records arriving from
	// arrival number fstart on; the other, those of the previous limit
	// arrivals, so every record in the ring is in one of the two.
	filt   []uint64
	fshift uint8
	fgen   uint8
	fstart uint64

	// pend holds the slots of the last records put, not yet written to
	// the index: a record's slot is written memPend puts after it
	// arrived, when the index line its put asked for (lines) has long
	// arrived, instead of stalling on it at once. A ring of pn slots
	// from position pi; a slot of 0 is one deleted while pending.
	pend   [memPend]pendSlot
	pi, pn int
}

// pendSlot is a pending record's slot word (as in memBucket) and its
// arrival number.
type pendSlot struct{ word, seq uint64 }

// memPend is how many puts a record's slot waits before it is written
// to the index.
const memPend = 8

// pendBucket is the bucket find reports for a record whose slot is still
// pending (its slot number is then its position in pend).
const pendBucket = -2

// memBucket is one cache line of the index. Slots hold 0 (empty) or a slot
// word: the handle's tag (its high 32 bits, top bit set) << 32 | the
// record's arrival number mod 2^32; the tag's low bits pick the home
// bucket, so a slot can be moved without reading its record.
type memBucket struct {
	passed uint32 // live slots stored past this bucket, whose home is at or before it
	_      uint32
	s      [memSlots]uint64
}

const memSlots = 7

// memLoad is the most live slots per bucket, on average, before the index
// doubles: at 5 of 7 about one bucket in eight overflows into the next,
// after a doubling (2.5 of 7) hardly any.
const memLoad = 5

// memRec is one record of the ring: 24 bytes plus V (a dead order's
// record is 32 bytes, a fill's 24), so fewer fresh pages and lines to
// write per ID. It keeps no handle and no string header: the ID is its
// bytes' address (the caller's string, immutable, kept alive by this
// pointer) and its length, in meta; a hit is confirmed by the ID itself,
// and the few records stored past their home bucket hash their ID again
// when dropped, to find their slot. meta's low 16 bits are the memory's
// (the ID's length, whether the record is deleted, whether its slot is
// past its home bucket); the rest are its user's (see tombRec).
type memRec[V any] struct {
	v    V              // first: a zero-size V at the end would be padded
	id   unsafe.Pointer // the ID's bytes
	exp  int64
	meta uint64
}

const (
	metaIDLen  = 0xff   // the ID's length (MaxOrderIDLen fits)
	metaDead   = 1 << 8 // deleted
	metaPassed = 1 << 9 // the slot is past its home bucket
	metaMine   = 0xffff // the memory's bits; the rest are the user's
)

// ID returns the record's ID.
func (r *memRec[V]) ID() string { return unsafe.String((*byte)(r.id), int(r.meta&metaIDLen)) }

// idIs reports whether the record's ID is id.
func (r *memRec[V]) idIs(id string) bool {
	return int(r.meta&metaIDLen) == len(id) && unsafe.String((*byte)(r.id), len(id)) == id
}

func (r *memRec[V]) dead() bool { return r.meta&metaDead != 0 }

// passed reports whether r's slot is stored past its home bucket.
func (r *memRec[V]) passed() bool { return r.meta&metaPassed != 0 }

// setPassed notes whether a live record's slot is past its home bucket
// (dist buckets).
func (r *memRec[V]) setPassed(dist uint32) {
	r.meta &^= metaPassed
	if dist > 0 {
		r.meta |= metaPassed
	}
}

const (
	memBlockShift = 12
	memBlock      = 1 << memBlockShift
	// cleanCycle is how many inserts the cleaner takes to clear every
	// bucket of stale slots: a stale slot is cleared within 2^30 inserts
	// of going stale (and the ring holds at most 2^30 records), so its
	// 32-bit arrival number never comes round to name a record in the
	// ring. With 2^18 buckets (the default cap) that is one bucket every
	// 4096 inserts.
	cleanCycle = 1 << 30
)

func newMemory[V any](limit int, hash func(string) uint64, onFree func(*memRec[V], bool)) memory[V] {
	return memory[V]{limit: limit, hash: hash, onFree: onFree, swept: minTime, blocks: make([][]memRec[V], (limit+memBlock-1)/memBlock)}
}

func slotTag(h uint64) uint32 { return uint32(h>>32) | 1<<31 }

// rec is the record with arrival number seq.
func (m *memory[V]) rec(seq uint64) *memRec[V] {
	pos := int(seq % uint64(m.limit))
	return &m.blocks[pos>>memBlockShift][pos&(memBlock-1)]
}

// seqOf returns the arrival number slot word s names, ok false if stale.
func (m *memory[V]) seqOf(s uint64) (uint64, bool) {
	d := uint64(uint32(m.tail) - uint32(s))
	return m.tail - d, d >= 1 && d <= m.tail-m.head
}

// find returns the bucket and slot of id's record, live or expired, and
// its arrival number; bucket -1 if there is none, pendBucket if its slot
// is pending.
func (m *memory[V]) find(h uint64, id string) (int, int, uint64) {
	if m.buckets == nil || !m.maybe(h) {
		return -1, 0, 0
	}
	tag := slotTag(h)
	for k := range m.pend[:m.pn] {
		p := &m.pend[(m.pi+k)%memPend]
		if uint32(p.word>>32) == tag && p.seq >= m.head {
			if r := m.rec(p.seq); !r.dead() && r.idIs(id) {
				return pendBucket, (m.pi + k) % memPend, p.seq
			}
		}
	}
	mask := uint32(len(m.buckets) - 1)
	for i := tag & mask; ; i = (i + 1) & mask {
		bk := &m.buckets[i]
		for j, s := range &bk.s {
			if uint32(s>>32) != tag {
				continue
			}
			if seq, ok := m.seqOf(s); ok {
				if r := m.rec(seq); !r.dead() && r.idIs(id) {
					return int(i), j, seq
				}
			}
		}
		if bk.passed == 0 {
			return -1, 0, 0
		}
	}
}

// get returns id's record if it is remembered.
func (m *memory[V]) get(h uint64, id string) (*memRec[V], bool) {
	r, live := m.lookup(h, id)
	return r, live
}

// lookup returns id's record, nil if there is none, and whether it is
// remembered (not expired).
func (m *memory[V]) lookup(h uint64, id string) (*memRec[V], bool) {
	i, _, seq := m.find(h, id)
	if i == -1 {
		return nil, false
	}
	r := m.rec(seq)
	return r, r.exp > m.swept
}

// del forgets id.
func (m *memory[V]) del(h uint64, id string) {
	if i, j, seq := m.find(h, id); i != -1 {
		r := m.rec(seq)
		if i == pendBucket {
			m.pend[j].word = 0
		} else {
			m.unpass(r, seq) // first: its slot is searched for
			m.buckets[i].s[j] = 0
		}
		if m.onFree != nil {
			m.onFree(r, false)
		}
		r.meta |= metaDead
		m.live--
		m.gone++
	}
}

// unpass takes r's slot (record seq) off the counts of the buckets it
// passed. Only a record stored past its home bucket (~5% of them at the
// index's load) has any: its slot is searched for from home.
func (m *memory[V]) unpass(r *memRec[V], seq uint64) {
	if !r.passed() {
		return
	}
	tag := slotTag(m.hash(r.ID()))
	mask := uint32(len(m.buckets) - 1)
	i := tag & mask
	word := uint64(tag)<<32 | uint64(uint32(seq))
	for !slices.Contains(m.buckets[i].s[:], word) {
		m.buckets[i].passed--
		i = (i + 1) & mask
	}
}

// put remembers id until exp, replacing any record of it (fresh: the
// caller knows there is none, expired or not), and returns the record for
// the caller to fill in. At the limit the oldest record is dropped first.
func (m *memory[V]) put(h uint64, id string, exp int64, fresh bool) *memRec[V] {
	if !fresh {
		m.del(h, id)
	}
	if m.tail-m.head == uint64(m.limit) {
		m.popHead()
	}
	pos := m.tpos
	if m.tpos++; m.tpos == m.limit {
		m.tpos = 0
	}
	blk := &m.blocks[pos>>memBlockShift]
	if *blk == nil {
		*blk = populate(make([]memRec[V], min(memBlock, m.limit-pos)))
	}
	r := &(*blk)[pos&(memBlock-1)]
	if len(id) > metaIDLen {
		panic("market: replay memory: ID too long") // callers validate IDs first
	}
	r.id, r.exp, r.meta = unsafe.Pointer(unsafe.StringData(id)), exp, uint64(len(id))
	seq := m.tail
	if seq-m.fstart == uint64(m.limit) {
		m.rotate()
	}
	m.tail++
	m.live++
	if m.live > memLoad*len(m.buckets) {
		m.resize(m.grown())
	}
	m.mark(slotTag(h), m.fgen)
	if m.pn == memPend {
		m.flushOne()
	}
	m.pend[(m.pi+m.pn)%memPend] = pendSlot{uint64(slotTag(h)) << 32, seq}
	m.pn++
	if m.tail&m.cleanMask == 0 {
		m.cleanBucket()
	}
	return r
}

// flushOne writes the oldest pending slot to the index, unless its
// record was deleted or dropped meanwhile.
func (m *memory[V]) flushOne() {
	p := m.pend[m.pi]
	m.pi = (m.pi + 1) % memPend
	m.pn--
	if p.word != 0 && p.seq >= m.head {
		m.rec(p.seq).setPassed(m.index(p.word, p.seq))
	}
}

// grown is the index's next size: four times the present one, but no
// more than the limit can ever need. A resize moves every live slot into
// a new index, fresh memory: growing in fewer, larger steps moves a third
// fewer slots and allocates a third less on the way to the cap (1 1/3
// times the final index, against twice it when doubling), at the cost of
// an index up to four times larger than its load needs (never more than
// the cap's) between steps.
func (m *memory[V]) grown() int {
	most := 8
	for memLoad*most < m.limit {
		most *= 2
	}
	return max(min(4*len(m.buckets), most), 2*len(m.buckets), 8)
}

// cleanBucket empties the stale slots of the cleaner's next bucket.
func (m *memory[V]) cleanBucket() {
	bk := &m.buckets[m.clean&(len(m.buckets)-1)]
	m.clean++
	held, t32 := uint32(m.tail-m.head), uint32(m.tail)
	for j, s := range &bk.s {
		if s != 0 && t32-uint32(s)-1 >= held {
			bk.s[j] = 0
		}
	}
}

// popHead drops the oldest record (its slot goes stale by itself), telling
// onFree unless it had been deleted.
func (m *memory[V]) popHead() {
	r := &m.blocks[m.hpos>>memBlockShift][m.hpos&(memBlock-1)]
	if m.hpos++; m.hpos == m.limit {
		m.hpos = 0
	}
	m.head++
	if r.dead() {
		m.gone--
	} else {
		m.live--
		m.unpass(r, m.head-1)
		if m.onFree != nil {
			m.onFree(r, true)
		}
	}
	*r = memRec[V]{}
}

// sweep forgets records that expired by now, and drops the forgotten ones
// at the head of the ring.
func (m *memory[V]) sweep(now int64) {
	m.swept = max(m.swept, now)
	for m.head != m.tail {
		if r := m.rec(m.head); !r.dead() && r.exp > m.swept {
			return
		}
		m.popHead()
	}
}

// len is the number of records held, remembered or expired but not yet
// dropped.
func (m *memory[V]) len() int { return m.live }

// index puts the slot of record seq (handle h) in the first empty or stale
// slot of its home bucket or, if it has none, of the first later bucket
// that has one, and returns how many buckets it passed.
func (m *memory[V]) index(h uint64, seq uint64) uint32 {
	word := uint64(slotTag(h))<<32 | uint64(uint32(seq))
	mask := uint32(len(m.buckets) - 1)
	i := slotTag(h) & mask
	held, t32 := uint32(m.tail-m.head), uint32(m.tail)
	for dist := uint32(0); ; dist++ {
		bk := &m.buckets[i]
		for j, s := range &bk.s {
			// Live: 1 <= tail-seq <= held (mod 2^32); so free when
			// tail-seq-1 >= held, unsigned (an empty slot is too: the
			// ring never holds 2^32 records).
			if t32-uint32(s)-1 >= held || s == 0 {
				bk.s[j] = word
				return dist
			}
		}
		bk.passed++
		i = (i + 1) & mask
	}
}

// lines are the index line id's lookup or insert starts on (handle h)
// and the filter line its lookup reads, for a prefetch: a lookup the
// filter answers never reads the index line, and an insert later finds
// it loaded. Both nil if the memory has no index yet.
func (m *memory[V]) lines(h uint64) (index, filter unsafe.Pointer) {
	if m.buckets == nil {
		return nil, nil
	}
	tag := slotTag(h)
	pair, _ := m.filterPair(tag)
	return unsafe.Pointer(&m.buckets[tag&uint32(len(m.buckets)-1)]), unsafe.Pointer(pair)
}

// The filter. A record's slot sets two bits of one word, chosen from its
// tag (so a resize can rebuild the filter from the index alone), in the
// generation it arrived in. A lookup whose bits are not both set in
// either generation's word has no live slot: find stops there, without
// the index's line, which for a never-seen ID is a cache miss. Bits are
// never cleared one by one: deleted and dropped records leave theirs
// set, costing only false "maybe"s, until their generation is cleared
// whole, limit arrivals after it ended, when none of its records can be
// in the ring. Every "maybe" is settled by the index and the ID's bytes.

// filterWordsShift sets the filter's size: a 64-bit word per generation
// for every 1<<filterWordsShift buckets of the index. At the cap's load (4
// records a bucket) that is 4 bits a record, a false "maybe" for about one
// never-seen ID in five (TestReplayFilter), and at the default cap 512 KB
// a generation.
const filterWordsShift = 2

func filterMix(tag uint32) uint64 { return uint64(tag) * 0x9e3779b97f4a7c15 }

// filterBitsOf returns the word index (of fshift) and the two bits of tag.
func (m *memory[V]) filterBitsOf(tag uint32) (uint64, uint64) {
	x := filterMix(tag)
	return x >> m.fshift, 1<<(x&63) | 1<<(x>>6&63)
}

// filterPair returns the two generations' words tag's bits are in (one
// 16-byte pair, on one cache line: what a lookup reads and lines
// prefetches) and the bits.
func (m *memory[V]) filterPair(tag uint32) (*[2]uint64, uint64) {
	w, bits := m.filterBitsOf(tag)
	return (*[2]uint64)(m.filt[2*w : 2*w+2]), bits
}

// maybe reports whether the index may hold a live slot of handle h.
func (m *memory[V]) maybe(h uint64) bool {
	p, bits := m.filterPair(slotTag(h))
	return p[0]&bits == bits || p[1]&bits == bits
}

// mark sets tag's bits in generation g.
func (m *memory[V]) mark(tag uint32, g uint8) {
	p, bits := m.filterPair(tag)
	p[g] |= bits
}

// rotate starts a new generation at the present arrival number: the
// older one, whose records have all left the ring (it ended limit
// arrivals ago), is cleared and takes the new arrivals.
func (m *memory[V]) rotate() {
	m.fgen ^= 1
	m.fstart = m.tail
	for i := int(m.fgen); i < len(m.filt); i += 2 {
		m.filt[i] = 0
	}
}

// genOf is the filter generation record seq arrived in.
func (m *memory[V]) genOf(seq uint64) uint8 {
	if seq >= m.fstart {
		return m.fgen
	}
	return m.fgen ^ 1
}

// resize rebuilds the index with n buckets, leaving stale slots out, and
// notes in each live record whether its slot is now past home. It reads
// the old index in order and the ring only where that changed: rehashing
// from the records would cost a cache miss each.
func (m *memory[V]) resize(n int) {
	for m.pn > 0 && m.buckets != nil {
		m.flushOne()
	}
	old := m.buckets
	m.buckets = hugeSlice[memBucket](n)
	m.cleanMask = cleanCycle/uint64(n) - 1
	words := max(n>>filterWordsShift, 1)
	m.filt = hugeSlice[uint64](2 * words)
	m.fshift = uint8(64 - bits.TrailingZeros(uint(words)))
	oldMask := uint32(len(old) - 1)
	for i := range old {
		for _, s := range &old[i].s {
			if s == 0 {
				continue
			}
			seq, ok := m.seqOf(s)
			if !ok {
				continue
			}
			// The slot's tag is all index needs of the handle: the
			// record itself is read only if it moved to or from home.
			was := (uint32(i) - uint32(s>>32)) & oldMask
			if dist := m.index(s&^0xffffffff, seq); (dist > 0) != (was > 0) {
				m.rec(seq).setPassed(dist)
			}
			m.mark(uint32(s>>32), m.genOf(seq))
		}
	}
}
