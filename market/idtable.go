package market

import "hash/maphash"

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
	t.slots = make([]liveSlot, max(minTableSlots, 2*len(old)))
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
// applied fills): records in a ring in arrival order, indexed by an
// open-addressing set of handles. Each event costs O(1): a probe to look an
// ID up; an append, and at the cap the eviction of the oldest record, to
// remember one. A record is forgotten logically once its expiry is not
// after the book's sweep time (lookups skip it) and physically when it
// reaches the ring's head in a sweep or is evicted by the cap; nothing is
// ever rehashed in the steady state.
type memory[V any] struct {
	limit      int
	ring       []memRec[V]
	head, n    int
	slots      []uint64 // 0, or the handle's high 32 bits << 32 | ring index + 1
	swept      int64    // records with exp <= swept are forgotten
	live, gone int      // records held and not deleted; deleted ones still in the ring
}

type memRec[V any] struct {
	id   string
	h    uint64
	exp  int64
	v    V
	dead bool // deleted (or replaced): kept in the ring until it reaches the head
}

func newMemory[V any](limit int) memory[V] {
	return memory[V]{limit: limit, swept: minTime}
}

// slotTag is the part of a handle a slot keeps; its low bits are also the
// slot's home, so a slot can be moved without reading its record.
func slotTag(h uint64) uint64 { return h >> 32 }

// find returns the ring index of id's record, live or not, or -1.
func (m *memory[V]) find(h uint64, id string) int {
	if m.slots == nil {
		return -1
	}
	mask := uint64(len(m.slots) - 1)
	tag := slotTag(h)
	for i := tag & mask; ; i = (i + 1) & mask {
		s := m.slots[i]
		if s == 0 {
			return -1
		}
		if s>>32 == tag {
			r := int(uint32(s)) - 1
			if rec := &m.ring[r]; rec.h == h && rec.id == id {
				return r
			}
		}
	}
}

// get returns id's record if it is remembered.
func (m *memory[V]) get(h uint64, id string) (*memRec[V], bool) {
	r := m.find(h, id)
	if r < 0 {
		return nil, false
	}
	rec := &m.ring[r]
	if rec.exp <= m.swept {
		return nil, false
	}
	return rec, true
}

// del forgets id.
func (m *memory[V]) del(h uint64, id string) {
	if r := m.find(h, id); r >= 0 {
		m.unindex(r)
		m.ring[r].dead = true
		m.live--
		m.gone++
	}
}

// put remembers id until exp, replacing any record of it. At the limit the
// oldest record is forgotten first: put returns it (ok) unless it had been
// deleted, so the caller can drop what refers to it.
func (m *memory[V]) put(h uint64, id string, exp int64, v V) (evicted memRec[V], ok bool) {
	m.del(h, id)
	if m.live+m.gone == len(m.ring) && len(m.ring) < m.limit {
		m.grow()
	}
	if m.live+m.gone == m.limit || m.live+m.gone == len(m.ring) {
		evicted, ok = m.popHead()
	}
	r := m.head + m.live + m.gone
	if r >= len(m.ring) {
		r -= len(m.ring)
	}
	m.ring[r] = memRec[V]{id: id, h: h, exp: exp, v: v}
	m.live++
	m.index(h, r)
	return evicted, ok
}

// popHead drops the oldest record and returns it; ok is false when it had
// been deleted.
func (m *memory[V]) popHead() (rec memRec[V], ok bool) {
	r := m.head
	rec = m.ring[r]
	if rec.dead {
		m.gone--
	} else {
		m.unindex(r)
		m.live--
	}
	m.ring[r] = memRec[V]{}
	if m.head++; m.head == len(m.ring) {
		m.head = 0
	}
	return rec, !rec.dead
}

// sweep forgets records that expired by now, and drops the forgotten ones
// at the head of the ring, calling drop for each that was not deleted.
func (m *memory[V]) sweep(now int64, drop func(*memRec[V])) {
	m.swept = max(m.swept, now)
	for m.live+m.gone > 0 {
		if rec := &m.ring[m.head]; !rec.dead && rec.exp > m.swept {
			return
		}
		if rec, ok := m.popHead(); ok && drop != nil {
			drop(&rec)
		}
	}
}

// len is the number of records held, remembered or expired but not yet
// dropped.
func (m *memory[V]) len() int { return m.live }

func (m *memory[V]) index(h uint64, r int) {
	mask := uint64(len(m.slots) - 1)
	tag := slotTag(h)
	i := tag & mask
	for m.slots[i] != 0 {
		i = (i + 1) & mask
	}
	m.slots[i] = tag<<32 | uint64(r+1)
}

func (m *memory[V]) unindex(r int) {
	mask := uint64(len(m.slots) - 1)
	tag := slotTag(m.ring[r].h)
	want := tag<<32 | uint64(r+1)
	i := tag & mask
	for m.slots[i] != want {
		i = (i + 1) & mask
	}
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		s := m.slots[j]
		if s == 0 {
			break
		}
		if (j-(s>>32))&mask >= (j-i)&mask {
			m.slots[i] = s
			i = j
		}
	}
	m.slots[i] = 0
}

// grow doubles the ring (up to the limit), moving its records to the front
// in arrival order, and rebuilds the index at twice the ring's size.
func (m *memory[V]) grow() {
	size := min(max(2*len(m.ring), 64), m.limit)
	ring := make([]memRec[V], size)
	held := m.live + m.gone
	for k := range held {
		r := m.head + k
		if r >= len(m.ring) {
			r -= len(m.ring)
		}
		ring[k] = m.ring[r]
	}
	m.ring, m.head = ring, 0
	slots := 64
	for slots < 2*size {
		slots *= 2
	}
	m.slots = make([]uint64, slots)
	for k := range held {
		if !ring[k].dead {
			m.index(ring[k].h, k)
		}
	}
}
