package p2p

import (
	"bytes"
	"crypto/sha256"
	"sync"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/proto"
)

// Opened offers are interned by content. The same sealed offer (up to
// 64 KiB with its GPUs' certificate chains) reaches a node many times:
// beside each ask of its provider, in sync and reconciliation answers,
// from the DHT; and in a simulation it reaches hundreds of nodes in one
// process. OpenOffer decodes each distinct envelope once and hands every
// caller the same decoded offer and the same bytes, so a replica keeps
// one copy of a provider's offer however many asks carry it, and one
// process running many nodes keeps one copy in all. Signatures are still
// checked per node (Verified), only the memory is shared. What OpenOffer
// returns is shared: callers must not modify it.

// maxInternedOfferBytes bounds the interned envelopes' bytes; past it the
// oldest are forgotten (their holders keep their copies).
const maxInternedOfferBytes = 64 << 20

type openedOffer struct {
	env    []byte
	offer  *proto.Offer
	signer peer.ID
}

var offerIntern = newInternTable[[sha256.Size]byte](maxInternedOfferBytes, func(e *openedOffer) int { return len(e.env) })

// internTable is a process-wide table of shared values by key, bounded by
// the values' total size: past max the oldest are forgotten (their
// holders keep them).
type internTable[K comparable, V any] struct {
	mu    sync.Mutex
	m     map[K]V
	order []K // oldest first
	bytes int
	max   int
	size  func(V) int
}

func newInternTable[K comparable, V any](max int, size func(V) int) *internTable[K, V] {
	return &internTable[K, V]{m: map[K]V{}, max: max, size: size}
}

// get is the value interned under k, if any.
func (t *internTable[K, V]) get(k K) (V, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, ok := t.m[k]
	return v, ok
}

// add interns v under k unless a value is there already, and returns
// what is interned under k.
func (t *internTable[K, V]) add(k K, v V) V {
	t.mu.Lock()
	defer t.mu.Unlock()
	if old, ok := t.m[k]; ok {
		return old // interned meanwhile by another caller
	}
	t.m[k] = v
	t.order = append(t.order, k)
	t.bytes += t.size(v)
	for t.bytes > t.max && len(t.order) > 1 {
		old := t.order[0]
		t.order = t.order[1:]
		t.bytes -= t.size(t.m[old])
		delete(t.m, old)
	}
	return v
}

// internedOffer is the opened offer sealed as b, if interned.
func internedOffer(key [sha256.Size]byte, b []byte) *openedOffer {
	e, _ := offerIntern.get(key)
	// The comparison of up to 64 KB runs outside the process-wide lock:
	// an interned envelope is never written after internOffer. At 1,000
	// simulated nodes, 250 asks opened by every replica queued ~50,000
	// goroutines on this lock while it was held for the compare.
	if e != nil && bytes.Equal(e.env, b) {
		return e
	}
	return nil
}

// internOffer remembers an opened offer (its own copy of the bytes) and
// returns what is interned for it.
func internOffer(key [sha256.Size]byte, b []byte, o *proto.Offer, signer peer.ID) *openedOffer {
	if e, ok := offerIntern.get(key); ok {
		return e // opened meanwhile by another caller
	}
	return offerIntern.add(key, &openedOffer{env: bytes.Clone(b), offer: o, signer: signer})
}

// Large gossiped payloads are shared the same way. An ask that carries
// its provider's sealed offer is up to ~70 KB, and gossipsub keeps each
// message it accepted in its message cache for a few heartbeats. A node
// receives every message once (its seen-cache drops duplicates), so one
// node gains nothing; but a simulation of N nodes in one process held N
// copies of each: at 1,000 nodes the 250 asks placed at once made ~16 GB
// of copies, the heap hit its limit and the process spent its time in
// the collector. ShareGossipData swaps an accepted message's payload for
// the copy interned under its ID (the SHA-256 of the payload, NewPubSub's
// message ID), so the receiver's own copy is garbage at once.

// minSharedGossip is the smallest payload worth sharing: an ask with an
// offer beside it. Orders, cancels and fills alone are well under it.
const minSharedGossip = 4 << 10

// maxSharedGossipBytes bounds the shared payloads' bytes; past it the
// oldest are forgotten (messages holding them keep them).
const maxSharedGossipBytes = 64 << 20

var gossipIntern = newInternTable[string](maxSharedGossipBytes, func(b []byte) int { return len(b) })

// ShareGossipData replaces msg's payload with the process's shared copy of
// the same bytes, interning it if it is the first. Call it only from a
// validator that accepts msg (the payload is then no attacker's junk),
// and with book topics' message IDs (NewPubSub), which are the payload's
// SHA-256. Payloads under 4 KiB are left alone. The shared bytes must
// never be written.
func ShareGossipData(msg *pubsub.Message) {
	if msg == nil || msg.Message == nil || len(msg.Data) < minSharedGossip || len(msg.ID) != sha256.Size {
		return
	}
	if shared, ok := gossipIntern.get(msg.ID); ok {
		// Outside the lock, as internedOffer: shared bytes are immutable.
		if bytes.Equal(shared, msg.Data) {
			msg.Data = shared
		}
		return
	}
	if sum := sha256.Sum256(msg.Data); string(sum[:]) != msg.ID {
		return // not a book topic's ID: nothing to key it by safely
	}
	msg.Data = gossipIntern.add(msg.ID, msg.Data) // if interned meanwhile: same hash, same bytes
}
