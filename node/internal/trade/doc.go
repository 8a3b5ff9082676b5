// Package trade is the take protocol, both sides of it, apart from the
// node that wires it: the taker's loop over the orders one of its own
// crosses (Trader.TakeLoop), the maker's answer to a take
// (Trader.HandleTake) with its reservation of GPUs, the preemption of
// spot leases a take may need (and a buyer's side of a preemption
// notice), the explanation of orders passed over (PassedOver), and the
// state no peer may bend: which takes a maker answered and how (Answers),
// how many GPUs of an order takes in flight may still sell (Inflight), and
// which takes are fresh enough to answer at all (TakeFresh).
//
// What it needs of the node comes in through Config: the libp2p host, the
// key, the store, the books, the clock, the logger and the rejects
// metric, and the rest of the node behind one small interface (Node:
// offers, the provider's calendar and credit policy, the book's gossip,
// own orders, leases, resale), implemented in node/wire_trade.go. It
// imports nothing of package node.
//
// # The take protocol
//
// /suanli/trade/1.0.0 is one request and one answer on a stream: the
// taker sends a signed Take of one resting order, the maker answers with
// a signed Accept (the lease's terms; take and accept make the Fill both
// gossip), a signed Reject, or for a resale ask a ResaleReply (package
// resale). The maker's side, per take ID (the CID of the signed take):
//
//	state      message                               answer, effect                                    next
//	-          not a Take, or signer ≠ stream peer    none; rejects{take,bad-envelope}                  -
//	-          any take once Shut                     none                                              -
//	-          take created more than MaxTakeAge ago, signed Reject; rejects{take,stale}                -
//	           or more than the clock skew ahead
//	-          a new take, taker has MaxPerPeer       signed Reject; rejects{take,flood}                -
//	           answers in flight
//	new        fresh take, stored answer (restart)    the stored answer; rejects{take,replay}           accepted
//	new        fresh take of a resale ask             package resale answers it (its state table)      accepted/rejected
//	new        fresh take, checks fail                signed Reject; rejects{take,<why>}                rejected
//	new        fresh take, checks pass                GPUs held, lease + answer stored once (synced),   accepted
//	                                                  fill applied and gossiped; Accept
//	answering  the same take                          waits for the first answer; rejects{take,replay}  (same)
//	accepted   the same take (also after a restart)   the stored Accept; rejects{take,replay}           accepted
//	rejected   the same take (until stale)            the stored Reject; rejects{take,replay}           rejected
//
// Nothing but the first answer of a take holds GPUs, writes terms or makes
// a fill. Answers keeps the states new, answering, accepted and rejected
// in memory; an accept (and a resale's reply) is also kept durably, with
// the lease (or the sale), in one transaction that refuses a second
// (store.PutAcceptedTake, store.PutResoldTake), so a restarted maker
// answers it the same way. TestAnswersStateMachine drives each row of
// Answers; node's TestHostileTakeReplay and TestHostileTakeOutOfTurn
// drive each row against a real node.
//
// The maker's checks of a fresh take (answerTake): the taker's order is
// signed by the taker and of the take's market; the order taken is open
// and the maker's; its facts (offer, attestation) are gathered without a
// lock; then, under the trade lock, its quantity less the takes in flight
// covers the take, the price is the order's, the pair matches by the
// book's own rules, and an ask's GPUs are chosen (free ones, else spot
// leases to preempt, market.ChoosePreempted); after the lock the buyer's credit
// is checked and the GPUs are held in the store (synced); the accept is
// signed only within AcceptWindow of the take's arrival.
//
// The taker's side, per take it sends:
//
//	state    message                                           effect                                       next
//	sent     Accept signed by the maker, for this take ID,     fill applied, GPUs it chose held to the      filled
//	         its lease starting when the block says             lease's end, terms stored, fill gossiped
//	sent     Reject signed by the maker for this take ID       GPUs released                                refused
//	sent     ResaleReply                                       package resale checks it (new buyer's side)  filled/refused
//	sent     any other reply (another signer, another take,    GPUs released; the maker skipped             refused
//	         an accept that does not open)
//	sent     no reply within TakeTimeout                       in doubt: the hold lapses by itself a        in doubt
//	                                                           minute after the maker's window
//
// # Preemption
//
// A provider whose GPUs are all leased takes an on-demand or reserved
// trade (or a spot one paying the margin more) by
// interrupting the spot leases that lose it the least revenue
// (market.ChoosePreempted). Each victim is marked preempted once (while
// it runs and was not preempted before), its buyer gets a signed notice,
// retried until the notice runs out, and its workload SIGTERM with the
// notice as grace; the new lease starts when the last notice runs out. On
// the buyer's side a notice is checked against the lease's terms
// (market.CheckPreemption), recorded once, and the bid re-queued when it
// asked to be.
//
// # Locks
//
// The Trader's lock (mu) guards the choice of GPUs and the check of an
// order's quantity against the takes in flight. Held, it takes, in this
// order, the books lock (exchange.Books, to read an order with its count
// in flight), then Inflight's lock (a leaf); and, through Node, the
// store's reads of GPU holds and the leases lock then a lease's lock
// (Node.Preemptible). It is never held across the network, NVML, an
// executor, a store write or a signature check: the GPUs a take chose are
// kept from other takes between the choice and the store's hold by the
// Trader's choosing set, and the store's hold itself refuses a GPU
// another lease holds. Answers' and Inflight's locks are leaves.
// TestReserveTakeOutsideTheLock holds the maker to this.
package trade
