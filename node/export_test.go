package node

import (
	"strings"
	"time"
)

// Test hooks for the external tests of package node.

// WithSweepInterval sets how often the replicas sweep expired orders.
func WithSweepInterval(d time.Duration) Option {
	return func(o *options) error { o.sweepEvery = d; return nil }
}

// KickMarket asks the cross loop to re-check a market, as a new order does.
func (n *Node) KickMarket(mkt string) { n.books.Kick(mkt) }

// FailStoreWrites makes every later write to the node's store of a key
// under prefix fail with err (the keys are in internal/store/keys.go);
// an empty prefix with a nil err clears it.
func (n *Node) FailStoreWrites(prefix string, err error) {
	if err == nil {
		n.store.FailWrites(nil)
		return
	}
	n.store.FailWrites(func(k []byte) error {
		if strings.HasPrefix(string(k), prefix) {
			return err
		}
		return nil
	})
}

// JoinedMarkets lists the markets whose topics this node joined.
func (n *Node) JoinedMarkets() []string { return n.books.Markets() }

// HeldGPUs is how many of the node's GPUs a lease or take holds now.
func (n *Node) HeldGPUs() int {
	held, err := n.store.ReservedGPUs(n.now())
	if err != nil {
		panic(err)
	}
	return len(held)
}

// SetDiskFree makes the node's store see free bytes free on its
// filesystem (a full disk, say); 0 restores the real figure.
func (n *Node) SetDiskFree(free uint64) {
	if free == 0 {
		n.store.SetFreeBytes(nil)
		return
	}
	n.store.SetFreeBytes(func(string) (uint64, error) { return free, nil })
}

// Nodes of this package's tests grind stamps of 8 bits (256 hashes), not
// a real daemon's 2^24 at every start of a fresh repo.
func init() { defaultStampBits = 8 }

// MakerStamp is the stamp the node's orders travel with now, or nil.
func (n *Node) MakerStamp() []byte { return n.books.Stamp() }
