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

var offerIntern = struct {
	sync.Mutex
	m     map[[sha256.Size]byte]*openedOffer
	order [][sha256.Size]byte // oldest first
	bytes int
}{m: map[[sha256.Size]byte]*openedOffer{}}

// internedOffer is the opened offer sealed as b, if interned.
func internedOffer(key [sha256.Size]byte, b []byte) *openedOffer {
	offerIntern.Lock()
	e := offerIntern.m[key]
	offerIntern.Unlock()
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
	offerIntern.Lock()
	defer offerIntern.Unlock()
	if e := offerIntern.m[key]; e != nil {
		return e // opened meanwhile by another caller
	}
	e := &openedOffer{env: bytes.Clone(b), offer: o, signer: signer}
	offerIntern.m[key] = e
	offerIntern.order = append(offerIntern.order, key)
	offerIntern.bytes += len(b)
	for offerIntern.bytes > maxInternedOfferBytes && len(offerIntern.order) > 1 {
		old := offerIntern.order[0]
		offerIntern.order = offerIntern.order[1:]
		offerIntern.bytes -= len(offerIntern.m[old].env)
		delete(offerIntern.m, old)
	}
	return e
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

var gossipIntern = struct {
	sync.Mutex
	m     map[string][]byte
	order []string // oldest first
	bytes int
}{m: map[string][]byte{}}

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
	gossipIntern.Lock()
	shared, ok := gossipIntern.m[msg.ID]
	gossipIntern.Unlock()
	if ok {
		// Outside the lock, as internedOffer: shared bytes are immutable.
		if bytes.Equal(shared, msg.Data) {
			msg.Data = shared
		}
		return
	}
	if sum := sha256.Sum256(msg.Data); string(sum[:]) != msg.ID {
		return // not a book topic's ID: nothing to key it by safely
	}
	gossipIntern.Lock()
	defer gossipIntern.Unlock()
	if shared, ok := gossipIntern.m[msg.ID]; ok {
		msg.Data = shared // interned meanwhile; same hash, same bytes
		return
	}
	gossipIntern.m[msg.ID] = msg.Data
	gossipIntern.order = append(gossipIntern.order, msg.ID)
	gossipIntern.bytes += len(msg.Data)
	for gossipIntern.bytes > maxSharedGossipBytes && len(gossipIntern.order) > 1 {
		old := gossipIntern.order[0]
		gossipIntern.order = gossipIntern.order[1:]
		gossipIntern.bytes -= len(gossipIntern.m[old])
		delete(gossipIntern.m, old)
	}
}
