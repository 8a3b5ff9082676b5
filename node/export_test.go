package node

import "time"

// Test hooks for the external tests of package node.

// WithSweepInterval sets how often the replicas sweep expired orders.
func WithSweepInterval(d time.Duration) Option {
	return func(o *options) error { o.sweepEvery = d; return nil }
}

// KickMarket asks the cross loop to re-check a market, as a new order does.
func (n *Node) KickMarket(mkt string) { n.kickMarket(mkt) }
