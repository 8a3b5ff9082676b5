package p2p

import (
	"bytes"
	"crypto/sha256"
	"sync"

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
