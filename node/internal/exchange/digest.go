package exchange

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"

	"github.com/suanli/suanli/market"
)

// Digest summarizes the replica of a market in a currency: the open
// orders with what remains of each, and the IDs of the recent fills,
// hashed, of the makers that anti-entropy carries (carry.go: with a
// stamp; an unstamped new maker's orders stay with the replicas gossip
// brought them to and are left out). Two replicas that converged have the
// same digest; orders and fills count what went into it. A replica that
// does not exist has the empty digest.
func (b *Books) Digest(mkt, cur string) (digest string, orders, fills int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.states[key(mkt, cur)]
	if !ok {
		return "", 0, 0
	}
	var lines []string
	for _, side := range []market.Side{market.Bid, market.Ask} {
		for o, rem := range s.Book.Orders(side) {
			if _, ok := b.carryLocked(o.Maker); ok {
				lines = append(lines, fmt.Sprintf("o %s %d", o.ID, rem))
			}
		}
	}
	orders = len(lines)
	for _, f := range s.fills {
		if _, ok := b.carryFillLocked([2]string{f.Fill.Buyer, f.Fill.Provider}); ok {
			lines = append(lines, "f "+f.Fill.ID)
		}
	}
	fills = len(lines) - orders
	slices.Sort(lines)
	h := sha256.New()
	for _, l := range lines {
		h.Write([]byte(l))
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil)), orders, fills
}

// Holds reports whether the replica of a market in a currency holds the
// open order id, without creating the replica.
func (b *Books) Holds(mkt, cur, id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.states[key(mkt, cur)]
	if !ok {
		return false
	}
	_, _, ok = s.Book.Lookup(id)
	return ok
}
