package node

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"

	"github.com/suanli/suanli/market"
)

// HoldsOrder reports whether this node's replica of a market in a currency
// holds the open order id. It is cheap (a map lookup under the books lock),
// for harnesses that watch an order spread through the network.
func (n *Node) HoldsOrder(mkt, cur, id string) bool {
	n.books.mu.Lock()
	defer n.books.mu.Unlock()
	s, ok := n.books.states[bookKey(mkt, cur)]
	if !ok {
		return false
	}
	_, _, ok = s.book.Lookup(id)
	return ok
}

// BookDigest summarizes this node's replica of a market: the open orders
// with what remains of each, and the IDs of the recent fills, hashed. Two
// replicas that converged have the same digest; orders and fills count
// what went into it.
func (n *Node) BookDigest(mkt, cur string) (digest string, orders, fills int) {
	n.books.mu.Lock()
	defer n.books.mu.Unlock()
	s, ok := n.books.states[bookKey(mkt, cur)]
	if !ok {
		return "", 0, 0
	}
	var lines []string
	for _, side := range []market.Side{market.Bid, market.Ask} {
		for o, rem := range s.book.Orders(side) {
			lines = append(lines, fmt.Sprintf("o %s %d", o.ID, rem))
		}
	}
	orders = len(lines)
	for _, f := range s.fills {
		lines = append(lines, "f "+f.fill.ID)
	}
	fills = len(s.fills)
	slices.Sort(lines)
	h := sha256.New()
	for _, l := range lines {
		h.Write([]byte(l))
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil)), orders, fills
}
