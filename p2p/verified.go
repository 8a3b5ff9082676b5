package p2p

import (
	"crypto/sha256"
	"fmt"
	"sync"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"

	"github.com/suanli/suanli/proto"
)

// DefaultVerifiedEntries is the size of a node's Verified cache: far more
// than the distinct envelopes a market keeps in flight (its open asks and
// their offers, recent fills), small per node (≈ 100 B an entry).
const DefaultVerifiedEntries = 4096

// Verified remembers the envelopes whose signature one node checked, by
// the SHA-256 of their exact bytes (and their domain): the same bytes
// again (an offer that travels with each of its provider's asks, the
// DHT's copy of it, a sync answer, the take and taker's order inside a
// fill) cost a hash, not an Ed25519 verify. Only the signature and the
// canonical encoding are remembered; everything that depends on the time
// or on state (expiry, the market's rules, who may sign what) is checked
// every time by the callers, as before.
//
// Each node has its own: a simulation of many nodes in one process must
// not let one node's verify stand for another's. A nil *Verified caches
// nothing. Its methods are safe for concurrent use.
type Verified struct {
	mu   sync.Mutex
	max  int
	seen map[verifiedKey]peer.ID // the signer
}

type verifiedKey struct {
	sum    [sha256.Size]byte
	domain string
}

// NewVerified returns an empty cache of up to max envelopes (at least 1);
// past it, it starts over.
func NewVerified(n int) *Verified {
	return &Verified{max: max(n, 1), seen: map[verifiedKey]peer.ID{}}
}

// Len is how many envelopes v remembers.
func (v *Verified) Len() int {
	if v == nil {
		return 0
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.seen)
}

func (v *Verified) lookup(k verifiedKey) (peer.ID, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	p, ok := v.seen[k]
	return p, ok
}

func (v *Verified) add(k verifiedKey, signer peer.ID) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.seen) >= v.max {
		clear(v.seen)
	}
	v.seen[k] = signer
}

// SealWith is Seal, remembering the envelope as verified: a node need not
// check its own signature when its object comes back (a fill carries the
// take a taker sealed and the accept a maker sealed).
func SealWith[M proto.Signed](v *Verified, key crypto.PrivKey, m M, limit int) ([]byte, error) {
	b, err := Seal(key, m, limit)
	if err != nil || v == nil {
		return b, err
	}
	signer, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return b, nil // not remembered; Open checks it
	}
	v.add(verifiedKey{sha256.Sum256(b), m.EnvelopeDomain()}, signer)
	return b, nil
}

// OpenWith is Open, with the signatures v already checked remembered: a
// hit skips the Ed25519 verify and the canonical-encoding check (both
// depend only on the bytes), a miss does both and remembers a success.
// The message is decoded from the bytes every time.
func OpenWith[M proto.Signed](v *Verified, b []byte, limit int) (M, peer.ID, error) {
	var zero M
	if v == nil || len(b) > limit {
		return Open[M](b, limit)
	}
	k := verifiedKey{sha256.Sum256(b), zero.EnvelopeDomain()}
	signer, ok := v.lookup(k)
	if !ok {
		m, signer, err := Open[M](b, limit)
		if err == nil {
			v.add(k, signer)
		}
		return m, signer, err
	}
	env, err := record.UnmarshalEnvelope(b)
	if err != nil {
		return zero, "", fmt.Errorf("%w: %v", ErrEnvelope, err)
	}
	rec, err := env.Record()
	if err != nil {
		return zero, "", fmt.Errorf("%w: %v", ErrEnvelope, err)
	}
	r, ok := rec.(*proto.Record[M])
	if !ok {
		return zero, "", fmt.Errorf("%w: payload is %T, want %s", ErrEnvelope, rec, zero.EnvelopeDomain())
	}
	return r.Msg, signer, nil
}
