// Package trade is the state of the take protocol that no peer may bend,
// apart from the node that wires it to streams, keys, the store and the
// books: which takes a maker answered and how (Answers), how many GPUs of
// an order takes in flight may still sell (Inflight), and which takes are
// fresh enough to answer at all (Fresh).
//
// The take protocol (/suanli/trade/1.0.0) is one request and one answer
// on a stream: the taker sends a signed Take of one resting order, the
// maker answers with a signed Accept (the lease's terms; take and accept
// make the Fill both gossip), a signed Reject, or for a resale ask a
// ResaleReply. The maker's side, per take ID (the CID of the signed take):
//
//	state      message                               answer, effect                                    next
//	-          not a Take, or signer ≠ stream peer    none; rejects{take,bad-envelope}                  -
//	-          any take while closing                 none                                              -
//	-          take created more than MaxAge ago, or  signed Reject; rejects{take,stale}                -
//	           more than the clock skew ahead
//	-          a new take, taker has MaxPerPeer       signed Reject; rejects{take,flood}                -
//	           answers in flight
//	new        fresh take, checks fail                signed Reject; rejects{take,<why>}                rejected
//	new        fresh take, checks pass                GPUs held, lease + answer stored once (synced),   accepted
//	                                                  fill applied and gossiped; Accept
//	answering  the same take                          waits for the first answer; rejects{take,replay}  (same)
//	accepted   the same take (also after a restart)   the stored Accept; rejects{take,replay}           accepted
//	rejected   the same take (until stale)            the stored Reject; rejects{take,replay}           rejected
//
// Nothing but the first answer of a take holds GPUs, writes terms or makes
// a fill. Answers keeps the states new, answering, accepted and rejected
// in memory; an accept is also kept durably by the node, with the lease, in
// one transaction that refuses a second (store.PutAcceptedTake), so a
// restarted maker answers it the same way.
//
// The taker's side, per take it sends: an Accept that opens as the
// maker's, for this take ID and its terms, applies the fill and holds the
// GPUs it chose to the lease's end (filled); a Reject signed by the maker
// for this take ID releases them (refused); any other reply, signed by
// another key or for another take, is refused as invalid and releases
// them; no reply in the take timeout leaves the trade in doubt, and the
// hold lapses by itself a minute after the maker's window.
//
// Locks: Answers' and Inflight's are leaves; Inflight's is taken inside
// the books lock (the node reads an order and its count in one step).
package trade
