package exchange

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"time"
	"unsafe"

	"github.com/libp2p/go-libp2p/core/peer"
	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// Anti-entropy. Replicas of a market converge by reconciling their sets of
// elements with one peer at a time: every open order, every cancel and
// every fill a replica keeps as a tombstone (tombs.go), each named by the
// SHA-256 of its kind and bytes. Two replicas that hold the same elements
// hold the same book: the same open orders, each with the same fills
// deducted.
//
// The scheme is range-based set reconciliation (as Negentropy does it),
// over the element IDs: since they are hashes, the ID space splits evenly
// by prefix. A side sends, for a range of IDs (a prefix of 4-bit nibbles),
// either the IDs themselves when there are at most reconcileList of them,
// or their count and a fingerprint (SHA-256 of the sorted IDs). The other
// side compares: an equal fingerprint settles the range; a listed range
// settles it too (each side sends the elements the other lacks and asks
// for those it lacks); otherwise it answers with the range's 16
// sub-ranges. Replicas that agree settle in one round trip of one range;
// d differences cost O(d log16 n) ranges and the d elements, whatever the
// size n of the book. IBLTs would save the rounds, but need the size of
// the difference estimated first and fail to decode when it is wrong;
// a replica after a partition may differ in anything from one cancel to
// the whole book, so ranges that adapt round by round suit it better.
//
// When: every ReconcileEvery with a random peer of the topic; with a peer
// that comes back to the topic (a partition healed, a node restarted);
// and again within reconcileQuick while reconciliations change the
// replica, on either side, so that what one learns spreads in seconds.
const (
	// reconcileList is the most IDs a range lists instead of splitting.
	reconcileList = 16
	// reconcileFanout is how many sub-ranges a range splits into: one
	// per value of the next nibble.
	reconcileFanout = 16
	// maxPrefix is the longest prefix: every nibble of a SHA-256.
	maxPrefix = 2 * sha256.Size
	// maxReconcileRounds bounds the messages each side sends.
	maxReconcileRounds = 2*maxPrefix + 4
	// reconcileBudget bounds the elements one message carries, in bytes;
	// what does not fit is sent in the next reconciliation.
	reconcileBudget = 2 << 20
	// bounds on what one message may hold.
	maxRangesPerMessage = 4096
	maxIDsPerMessage    = 1 << 16
	// reconcileQuick is the mean wait before the next reconciliation while
	// they carry differences.
	reconcileQuick = time.Second
	// reconcileRate and reconcileBurst bound the reconciliations one peer
	// gets this node to answer.
	reconcileRate  = 1
	reconcileBurst = 10
)

// elemID names an element by its kind and bytes, and an ask also by the
// seq of the offer kept beside it (refresh.go): a replica that missed its
// provider's refresh differs from one that got it, and reconciliation
// hands it the newer offer.
type elemID = [sha256.Size]byte

// elem is what a peer that lacks an element is sent. Its message is
// built only when it is sent (a snapshot lists every element of the
// market; a reconciliation sends the few the peer lacks).
type elem struct {
	order     []byte // a sealed order
	cancel    []byte // a sealed cancel, and the order it withdraws
	cancelled []byte
	fill      *proto.Fill
	offer     []byte // an ask's offer, sent once per provider a message
	offerSeq  uint64 // the seq of the offer kept beside an ask (0: unknown)
	provider  string
	stamp     []byte // its maker's stamp, or a party's (carry.go)
}

// message is el's message, without an offer.
func (el elem) message() *proto.BookMessage {
	switch {
	case el.fill != nil:
		return &proto.BookMessage{Body: &proto.BookMessage_Fill{Fill: el.fill}, MakerStamp: el.stamp}
	case el.cancel != nil:
		return &proto.BookMessage{Body: &proto.BookMessage_Cancel{Cancel: el.cancel}, CancelledOrder: el.cancelled, MakerStamp: el.stamp}
	}
	return &proto.BookMessage{Body: &proto.BookMessage_Order{Order: el.order}, MakerStamp: el.stamp}
}

// elemSet is a snapshot of a market's elements, sorted by ID.
type elemSet struct {
	ids   []elemID
	elems map[elemID]*elem // into one slice: a map holds values this large one allocation each
}

const (
	kindOrder  = 'o'
	kindCancel = 'c'
	kindFill   = 'f'
)

func hashElem(kind byte, b []byte, offerSeq uint64) elemID {
	h := sha256.New()
	h.Write([]byte{kind})
	h.Write(b)
	if offerSeq != 0 {
		h.Write(binary.BigEndian.AppendUint64(nil, offerSeq))
	}
	var id elemID
	h.Sum(id[:0])
	return id
}

// elements snapshots the elements of mkt that have not expired by now and
// that anti-entropy carries (carry.go: those of stamped makers): for
// each, what a peer that lacks it is sent, its stamp beside it. Fills come first, then
// cancels, then orders, which is the order a sync answer lists them in;
// with byTime the fills and the orders are each oldest first (a sync
// answer), else in no order (a reconciliation sorts them by ID).
//
// Every reconciliation, started or answered, takes a snapshot, so its
// cost is kept to a pass over the market: an element's ID (a SHA-256 of
// its bytes) is computed once, when it first appears in a snapshot, and
// kept while the snapshots list it (elemIDs). The snapshot also reports
// the signature of the elements it lists (see snapSig).
func (b *Books) elements(mkt string, byTime bool) (*elemSet, snapSig) {
	type raw struct {
		kind byte
		key  []byte
		e    elem
		at   time.Time
	}
	var fills, cancels, orders []raw
	var unknownOffer []int // asks whose offer comes from the cache
	var sig snapSig
	b.mu.Lock()
	if t, ok := b.tombs[mkt]; ok {
		fills, cancels = make([]raw, 0, len(t.fills)), make([]raw, 0, len(t.cancels))
	}
	n := 0
	for _, s := range b.states {
		if s.Book.Market() == mkt {
			n += len(s.envs)
		}
	}
	orders = make([]raw, 0, n)
	b.eachElemLocked(mkt, b.cfg.Now(), func(kind byte, key []byte, e elem, at time.Time) {
		sig.add(kind, key, e)
		switch kind {
		case kindFill:
			fills = append(fills, raw{kind, key, e, at})
		case kindCancel:
			cancels = append(cancels, raw{kind, key, e, at})
		default:
			if e.provider != "" && e.offer == nil {
				unknownOffer = append(unknownOffer, len(orders))
			}
			orders = append(orders, raw{kind, key, e, at})
		}
	})
	b.mu.Unlock()
	if b.cfg.Offers != nil {
		for _, i := range unknownOffer {
			if p, err := peer.Decode(orders[i].e.provider); err == nil {
				orders[i].e.offer = b.cfg.Offers.Sealed(p)
			}
		}
	}
	if byTime {
		byAt := func(a, b raw) int {
			if c := a.at.Compare(b.at); c != 0 {
				return c
			}
			return bytes.Compare(a.key, b.key)
		}
		slices.SortFunc(fills, byAt)
		slices.SortFunc(orders, byAt)
	}
	n = len(fills) + len(cancels) + len(orders)
	set := &elemSet{elems: make(map[elemID]*elem, n), ids: make([]elemID, 0, n)}
	all := make([]elem, 0, n)
	b.idMu.Lock()
	defer b.idMu.Unlock()
	ids := make(map[elemKey]elemID, n)
	for _, group := range [][]raw{fills, cancels, orders} {
		for _, r := range group {
			k := elemKey{unsafe.SliceData(r.key), len(r.key), r.kind, r.e.offerSeq}
			id, ok := b.elemIDs[mkt][k]
			if !ok {
				id = hashElem(r.kind, r.key, r.e.offerSeq)
			}
			ids[k] = id
			if _, dup := set.elems[id]; !dup {
				set.ids = append(set.ids, id)
				all = append(all, r.e)
				set.elems[id] = &all[len(all)-1]
			}
		}
	}
	b.elemIDs[mkt] = ids
	return set, sig
}

// eachElemLocked calls fn for each element of mkt that anti-entropy
// carries and that has not expired by now, fills, then cancels, then
// orders: its kind, its bytes (what names it), what a peer that lacks it
// is sent (an ask's offer nil when the replica kept none beside it: the
// caller looks in the offer cache) and when it was made (fills and
// orders). Callers hold b.mu.
func (b *Books) eachElemLocked(mkt string, now time.Time, fn func(kind byte, key []byte, e elem, at time.Time)) {
	if t, ok := b.tombs[mkt]; ok {
		for _, f := range t.fills {
			if st, ok := b.carryFillLocked(f.parties); ok && f.expires.After(now) {
				fn(kindFill, f.raw, elem{fill: f.msg, stamp: st}, f.at)
			}
		}
		for k, c := range t.cancels {
			if st, ok := b.carryLocked(k.maker); ok && c.env != nil && c.expires.After(now) {
				fn(kindCancel, c.env, elem{cancel: c.env, cancelled: c.order, stamp: st}, time.Time{})
			}
		}
	}
	for _, s := range b.states {
		if s.Book.Market() != mkt {
			continue
		}
		for id, env := range s.envs {
			o, _, ok := s.Book.Lookup(id)
			if !ok || !o.Expires.After(now) {
				continue
			}
			st, carried := b.carryLocked(o.Maker)
			if !carried {
				continue
			}
			e := elem{order: env, stamp: st}
			if o.Side == market.Ask {
				k := s.offers[id]
				e.provider, e.offer, e.offerSeq = o.Maker, k.env, k.seq
			}
			fn(kindOrder, env, e, o.Created)
		}
	}
}

// snapSig sums what a snapshot lists: the count of its elements and a
// mix of the addresses of each one's bytes, stamp and offer. A replica
// never changes bytes it keeps, and a snapshot keeps alive what it lists,
// so while a snapshot is held the same signature means the same
// elements (but for a 2^-64 chance), whatever was added, removed or
// expired meanwhile; the offers an ask borrows from the offer cache are
// not in it (reconcileSet bounds their age instead).
type snapSig struct{ n, sum uint64 }

func (g *snapSig) add(kind byte, key []byte, e elem) {
	g.n++
	g.sum += mixAddr(unsafe.SliceData(key), uint64(len(key))<<8|uint64(kind))
	g.sum += mixAddr(unsafe.SliceData(e.stamp), 1) + mixAddr(unsafe.SliceData(e.offer), 2) + mixAddr(unsafe.SliceData(e.cancelled), 3)
	if e.fill != nil {
		g.sum += mixAddr((*byte)(unsafe.Pointer(e.fill)), 4)
	}
}

// mixAddr is splitmix64 of an address and a tag.
func mixAddr(p *byte, tag uint64) uint64 {
	x := uint64(uintptr(unsafe.Pointer(p))) ^ tag*0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// signature is snapSig of what elements(mkt) would list now, without
// building it: no allocation, a pass over the market under b.mu.
func (b *Books) signature(mkt string) snapSig {
	var sig snapSig
	b.mu.Lock()
	defer b.mu.Unlock()
	b.eachElemLocked(mkt, b.cfg.Now(), func(kind byte, key []byte, e elem, _ time.Time) { sig.add(kind, key, e) })
	return sig
}

// reconcileSet is the snapshot a reconciliation of mkt works on, sorted
// by element ID. Every reconciliation, started or answered, needs one,
// and at 1,000 nodes on one machine building them was a fifth of the
// process's CPU, most of it allocation; but a market mostly does not
// change between two reconciliations. So the last one is kept and handed
// out again (read-only: reconciliations only read it) while its
// signature still matches the market's and it is younger than
// snapMaxAge, the bound on how stale an offer taken from the offer cache
// may be.
func (b *Books) reconcileSet(mkt string) *elemSet {
	now := b.cfg.Now()
	sig := b.signature(mkt)
	b.snapMu.Lock()
	c, ok := b.snaps[mkt]
	b.snapMu.Unlock()
	if ok && c.sig == sig && now.Sub(c.built) < snapMaxAge {
		return c.set
	}
	set, sig := b.elements(mkt, false)
	set.sorted()
	b.snapMu.Lock()
	b.snaps[mkt] = snapCache{set: set, sig: sig, built: now}
	b.snapMu.Unlock()
	return set
}

// snapCache is a market's last reconciliation snapshot.
type snapCache struct {
	set   *elemSet
	sig   snapSig
	built time.Time
}

// snapMaxAge bounds how long a reconciliation snapshot is reused.
const snapMaxAge = 30 * time.Second

// elemKey names an element's bytes by where they are: the bytes a
// replica keeps for an element never change, and while elemIDs holds the
// key the bytes cannot be freed, so no other element can be given the
// same address.
type elemKey struct {
	p    *byte
	n    int
	kind byte
	seq  uint64
}

// messages lists the elements in the order elements made them, each ask's
// offer beside the first ask of its provider made on it.
func (e *elemSet) messages() []*proto.BookMessage {
	out := make([]*proto.BookMessage, 0, len(e.ids))
	sent := map[string][]byte{}
	for _, id := range e.ids {
		out = append(out, e.elems[id].with(sent))
	}
	return out
}

// with is the element's message, with its offer unless sent lists it as
// the last sent of its provider (which it then does): a provider's asks
// made on one offer take it once, and one made on the offer it
// republished takes that too, not only the offer of its first ask
// (interned, so the comparison is of one pointer).
func (el elem) with(sent map[string][]byte) *proto.BookMessage {
	m := el.message()
	if el.offer == nil || bytes.Equal(sent[el.provider], el.offer) {
		return m
	}
	sent[el.provider] = el.offer
	m.Offer = el.offer
	return m
}

// sorted returns the IDs sorted (elements keeps them in sending order).
func (e *elemSet) sorted() *elemSet {
	slices.SortFunc(e.ids, cmpID)
	return e
}

// cmpID orders element IDs by their bytes. IDs are hashes: their first
// eight bytes almost always decide.
func cmpID(a, b elemID) int {
	if x, y := binary.BigEndian.Uint64(a[:8]), binary.BigEndian.Uint64(b[:8]); x != y {
		return cmp.Compare(x, y)
	}
	return bytes.Compare(a[8:], b[8:])
}

func nibble(id *elemID, i int) byte {
	if i%2 == 0 {
		return id[i/2] >> 4
	}
	return id[i/2] & 0xf
}

// cmpPrefix compares id's first len(p) nibbles with p.
func cmpPrefix(id *elemID, p []byte) int {
	for i, n := range p {
		if x := nibble(id, i); x != n {
			return cmp.Compare(x, n)
		}
	}
	return 0
}

// span is the IDs that start with prefix p.
func (e *elemSet) span(p []byte) []elemID {
	lo := sort.Search(len(e.ids), func(i int) bool { return cmpPrefix(&e.ids[i], p) >= 0 })
	hi := lo + sort.Search(len(e.ids)-lo, func(i int) bool { return cmpPrefix(&e.ids[lo+i], p) > 0 })
	return e.ids[lo:hi]
}

func fingerprint(ids []elemID) []byte {
	h := sha256.New()
	for i := range ids {
		h.Write(ids[i][:])
	}
	return h.Sum(nil)[:16]
}

// rangeOf describes the IDs with prefix p: listed when few, else counted
// and fingerprinted.
func (e *elemSet) rangeOf(p []byte) *proto.ReconcileRange {
	ids := e.span(p)
	r := &proto.ReconcileRange{Prefix: p, Count: uint32(len(ids))}
	if len(ids) <= reconcileList || len(p) >= maxPrefix {
		r.Listed = true
		for _, id := range ids {
			r.Ids = append(r.Ids, slices.Clone(id[:]))
		}
		return r
	}
	r.Fingerprint = fingerprint(ids)
	return r
}

// errReconcileSchema: a reconcile message out of bounds.
var errReconcileSchema = errors.New("exchange: reconcile message malformed")

// checkReconcile bounds a received message before it is looked at.
func checkReconcile(m *proto.Reconcile) error {
	if len(m.Ranges) > maxRangesPerMessage || len(m.Want) > maxIDsPerMessage {
		return fmt.Errorf("%w: %d ranges, %d wants", errReconcileSchema, len(m.Ranges), len(m.Want))
	}
	ids := len(m.Want)
	for _, w := range m.Want {
		if len(w) != sha256.Size {
			return fmt.Errorf("%w: want of %d bytes", errReconcileSchema, len(w))
		}
	}
	for _, r := range m.Ranges {
		if len(r.Prefix) > maxPrefix {
			return fmt.Errorf("%w: prefix of %d nibbles", errReconcileSchema, len(r.Prefix))
		}
		for _, n := range r.Prefix {
			if n >= reconcileFanout {
				return fmt.Errorf("%w: nibble %d", errReconcileSchema, n)
			}
		}
		if ids += len(r.Ids); ids > maxIDsPerMessage {
			return fmt.Errorf("%w: too many IDs", errReconcileSchema)
		}
		for _, id := range r.Ids {
			if len(id) != sha256.Size {
				return fmt.Errorf("%w: ID of %d bytes", errReconcileSchema, len(id))
			}
		}
		if !r.Listed && len(r.Fingerprint) != 16 {
			return fmt.Errorf("%w: fingerprint of %d bytes", errReconcileSchema, len(r.Fingerprint))
		}
	}
	return nil
}

// respond is this side's answer to in (checked by checkReconcile): the
// elements in wants, for each listed range the elements the peer lacks
// and the IDs this side lacks, for each range that differs its listing or
// its sub-ranges. Elements stop at budget bytes.
func (e *elemSet) respond(in *proto.Reconcile, budget int) *proto.Reconcile {
	out := &proto.Reconcile{}
	size := 0
	sent := map[string][]byte{}
	push := func(id elemID) {
		el := e.elems[id]
		if el == nil || size > budget {
			return
		}
		m := el.with(sent)
		size += gproto.Size(m)
		out.Items = append(out.Items, m)
	}
	for _, w := range in.Want {
		push(elemID(w))
	}
	for _, r := range in.Ranges {
		mine := e.span(r.Prefix)
		if r.Listed {
			theirs := make(map[elemID]bool, len(r.Ids))
			for _, id := range r.Ids {
				theirs[elemID(id)] = true
			}
			for _, id := range mine {
				if !theirs[id] {
					push(id)
				}
			}
			for id := range theirs {
				if _, ok := slices.BinarySearchFunc(mine, id, cmpID); !ok {
					out.Want = append(out.Want, slices.Clone(id[:]))
				}
			}
			continue
		}
		if len(mine) == int(r.Count) && bytes.Equal(fingerprint(mine), r.Fingerprint) {
			continue
		}
		if len(mine) <= reconcileList || len(r.Prefix) >= maxPrefix-1 {
			out.Ranges = append(out.Ranges, e.rangeOf(r.Prefix))
			continue
		}
		for n := range byte(reconcileFanout) {
			out.Ranges = append(out.Ranges, e.rangeOf(append(slices.Clone(r.Prefix), n)))
		}
	}
	return out
}

// ReconcileStats is what one reconciliation cost and carried.
type ReconcileStats struct {
	// Rounds is the messages this side sent; Sent and Received the
	// elements; Changed how many received changed this replica; Bytes the
	// encoded size of every message both ways.
	Rounds, Sent, Received, Changed, Bytes int
}

// ReconcileWith reconciles this node's replica of mkt with peer p, both
// ways: when it returns without error, each holds what the other held
// (less what it refused, and what did not fit a message's budget).
func (b *Books) ReconcileWith(ctx context.Context, mkt string, p peer.ID) (ReconcileStats, error) {
	var st ReconcileStats
	c, err := p2p.OpenReconcile(ctx, b.cfg.Host, p)
	if err != nil {
		return st, err
	}
	defer c.Close()
	e := b.reconcileSet(mkt)
	first := &proto.Reconcile{Market: mkt, Ranges: []*proto.ReconcileRange{e.rangeOf(nil)}}
	if err := c.Send(first); err != nil {
		c.Reset()
		return st, err
	}
	st.Rounds++
	st.Bytes += gproto.Size(first)
	err = b.reconcileRounds(ctx, c, mkt, e, nil, &st)
	if err != nil {
		b.cfg.Log.Debug("reconcile failed", "market", mkt, "peer", p, "err", err)
	}
	return st, err
}

// answerReconcile is the responder's side of a reconciliation, for a
// joined market and at most reconcileRate a second per peer.
func (b *Books) answerReconcile(c *p2p.ReconcileConn) {
	b.mu.Lock()
	allowed := p2p.AllowIn(b.reconc, c.Peer(), reconcileRate, reconcileBurst)
	b.mu.Unlock()
	if !allowed {
		b.reject("reconcile-request", "rate-limited")
		c.Reset()
		return
	}
	in, err := c.Recv()
	if err != nil {
		c.Reset()
		return
	}
	if !market.ValidMarketKey(in.Market) || !b.Joined(in.Market) {
		b.reject("reconcile-request", "not-joined")
		c.Reset()
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, p2p.ReconcileTimeout)
	defer cancel()
	var st ReconcileStats
	if err := b.reconcileRounds(ctx, c, in.Market, b.reconcileSet(in.Market), in, &st); err != nil {
		b.cfg.Log.Debug("reconcile answer failed", "market", in.Market, "peer", c.Peer(), "err", err)
	}
	if st.Changed > 0 {
		b.kickReconcile() // what this replica learnt, it passes on
	}
}

// reconcileRounds runs the rounds from the first message received (in, or
// read from c) until a side is done.
func (b *Books) reconcileRounds(ctx context.Context, c *p2p.ReconcileConn, mkt string, e *elemSet, in *proto.Reconcile, st *ReconcileStats) error {
	for {
		if in == nil {
			var err error
			if in, err = c.Recv(); err != nil {
				c.Reset()
				return err
			}
		}
		st.Bytes += gproto.Size(in)
		if err := checkReconcile(in); err != nil {
			b.reject("reconcile", "schema")
			c.Reset()
			return err
		}
		st.Received += len(in.Items)
		st.Changed += b.applyItems(ctx, mkt, "reconcile", in.Items)
		if in.Done {
			return nil
		}
		if st.Rounds >= maxReconcileRounds {
			c.Reset()
			return fmt.Errorf("exchange: reconcile of %s: no end after %d rounds", mkt, st.Rounds)
		}
		out := e.respond(in, reconcileBudget)
		out.Done = len(out.Ranges) == 0 && len(out.Want) == 0
		if err := c.Send(out); err != nil {
			c.Reset()
			return err
		}
		st.Rounds++
		st.Sent += len(out.Items)
		st.Bytes += gproto.Size(out)
		if out.Done {
			return nil
		}
		in = nil
	}
}

// reconcileLoop reconciles each joined market with one random peer of
// its topic every ReconcileEvery or so (jittered, so that peers do not
// all ask at once). While reconciliations change the replica (after a
// partition heals, a replica that learnt something has more to pass on)
// the next one follows within reconcileQuick, until one changes nothing.
func (b *Books) reconcileLoop() {
	defer b.wg.Done()
	every := b.cfg.ReconcileEvery
	quick := false
	for {
		d := every/2 + rand.N(every)
		if quick {
			d = reconcileQuick/2 + rand.N(reconcileQuick)
		}
		t := time.NewTimer(d)
		select {
		case <-b.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-b.rkick:
			t.Stop()
		}
		quick = false
		for _, mkt := range b.Markets() {
			b.mu.Lock()
			top := b.topics[mkt]
			b.mu.Unlock()
			peers := top.ListPeers()
			if len(peers) == 0 {
				continue
			}
			ctx, cancel := context.WithTimeout(b.ctx, p2p.ReconcileTimeout)
			st, err := b.ReconcileWith(ctx, mkt, peers[rand.N(len(peers))])
			cancel()
			quick = quick || (err == nil && st.Changed > 0)
		}
	}
}

// kickReconcile asks the loop for a reconciliation soon: one just
// changed the replica.
func (b *Books) kickReconcile() {
	select {
	case b.rkick <- struct{}{}:
	default:
	}
}
