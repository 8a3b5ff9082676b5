// Package provider is the provider's side of a node: what it offers and
// the asks that keep selling it.
//
// [Provider] owns the offer: built from the GPU inventory (with the
// GPUs' evidence on a confidential-computing machine), every GPU held by
// a lease marked with the lease's end, sealed with the node's key, stored
// and published to the DHT; republished at a third of its TTL, at once
// when capacity changes (CapacityChanged), and after a failure with a
// doubling backoff a new peer cuts short. The first offer published joins
// the markets it serves. It reads the calendar (forward blocks, kept in
// the store) to say which GPUs are free over a span, and prices reserved
// asks from its offer. The rules it applies (capacity, calendar, reserved
// prices) are package market's.
//
// [Standing] owns the standing asks: an ask placed with Replenish keeps
// selling its count of GPUs. Each is standing until a pass finds one of
// its orders cancelled, then ended; a pass (on a Poke, when a lease ends,
// or every ReplenishEvery) places a new ask for what it has neither
// resting nor leased out, as far as GPUs are free and not on another of
// the node's asks, and keeps why the last try failed.
//
// Dependencies are injected: the store, the DHT, the GPU backend, the
// key, a Clock (offer times and every wait), a logger, a counter, and
// Hooks and Orders, the funcs it needs of the rest of the node. It
// imports no node package above it.
//
// Locks: Provider's publish lock (one Publish at a time) is held across
// the inventory, the store and the DHT, and is taken before its offer
// lock, a leaf guarding the last offer published. Standing's lock is a
// leaf: Orders is called with it released. Hooks are called with no lock
// of the package held, but JoinMarket runs under the publish lock.
package provider
