// Package exchange holds a node's view of the markets: the replicas of
// the gossiped order books and the cache of providers' offers they are
// checked against.
//
// [Books] owns every market replica of one node: it joins a market's
// gossipsub topic, validates each book message (stateless checks in
// package p2p, then the replica's own: admission of makers it does not
// know at a bounded rate (admission.go: a Sybil's fresh keys stop at the
// first hop), duplicates, per-maker rate limits and caps, and, through a
// hook, whether an ask is backed by its provider's offer,
// which travels beside the ask and backs it for life, and which the
// provider refreshes when it republishes (refresh.go); an offer not known
// yet is retried, never refused for good), applies what is accepted, keeps cancels and fills as
// tombstones, answers and asks for the open orders of late joiners,
// reconciles each market's set of orders and tombstones with its peers
// (reconcile.go: periodically, on a peer's return, cost growing with the
// difference), sweeps expired orders on a ticker and tells its owner when
// one of its resting orders may have become crossable. It holds one lock,
// its own, and never across the network or a hook that may block on one.
//
// [Offers] owns the in-memory cache of validated offers (and their sealed
// form, handed on beside asks) and the DHT lookups that fill it, answering repeated lookups of a market from
// memory for a while and refreshing them in the background.
//
// Trading itself (takes, accepts, reservations of GPUs) and everything a
// fill starts (leases, receipts) belong to the node; they reach the
// exchange through its methods and are called back through [Hooks].
package exchange
