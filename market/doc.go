// Package market is Suanli's pure domain: money, offers and their filters,
// orders, the order book and matching, the spot price and index, and lease
// types. It does no I/O, starts no goroutines and reads no clock: callers
// pass `now`, so replaying the same inputs gives the same book.
//
// Files: money.go (integer micro-unit money and decimal parsing); offer.go
// (offer rules, search filters and sorting); order.go (orders, sides,
// flags, constraints, validation and reject reasons); book.go (the book:
// price levels with FIFO queues, cancel, expiry sweep); idtable.go (IDs
// hashed to handles at the book's edge: the resting orders' table and the
// replay memory of dead order and applied fill IDs, O(1) per event in
// bounded memory); match.go (matching proposals, crossing, fills, spot
// price, and Take: match, apply and rest a node's own order in one pass);
// explain.go (why a taker passes over crossing orders; whole-order
// matching for all-or-none takers);
// regionindex.go (each level's orders by region, so a region-constrained
// bid visits only matching asks); index.go (the
// manipulation-resistant price index); lease_type.go (spot, on-demand,
// reserved; reserved discounts); preempt.go (which spot leases a
// higher-priority trade interrupts, and checking a preemption notice); lease.go (the lease state
// machine: starting, running, ending, closed, with a reason); receipt.go
// (usage receipts: the billing rule and increments, chain checks,
// countersignatures, equivocation); schedule.go (time-of-day prices and
// the window grid they add); ledger.go (per-counterparty settlement from countersigned
// receipts and payment acknowledgements); capacity.go (free GPUs now and
// when leased ones free up); credit.go (a buyer's credit with a provider:
// what it owes and has in progress against the provider's limit).
package market
