// Package node is one Suanli peer: it wires a libp2p host, the private
// Kademlia DHT of signed offers, the gossiped order books, trades agreed
// point to point, and leases settled by signed usage receipts, all kept
// in Badger in the node's repo. New and its Options build a Node; the
// Node is a provider when it has GPUs and a buyer always.
//
// A Node implements api.API in-process; the daemon serves the same API
// over local HTTP, and node/client implements it there. The packages
// around this one each own one job:
//
//   - node/api: the API interface, its request and view types and its
//     error codes (a leaf: standard library only).
//   - node/client: the HTTP client of a running daemon (no libp2p, Badger
//     or NVML).
//   - node/executor: what runs a lease's workload (reserve, process,
//     docker) and the workload spec a buyer sends, behind one contract;
//     the lease logic knows only that.
//   - node/keystore: the encrypted identity key.
//   - node/dashboard: the embedded web page served with the API.
//   - node/devnet and node/simnet: whole local markets on loopback, and on
//     a simulated east–west network, for tests, devnet and benchmarks.
//   - node/internal/exchange: the order-book replicas, their gossip,
//     sync and sweep, and the cache of validated offers. The node trades
//     against them and is called back when a fill concerns it.
//   - node/internal/attestor: attestation challenges, both sides, and
//     the verdicts that lift a provider's asks to cc-verified.
//   - node/internal/leases: the durable side of leases: their records,
//     receipt chains and their verification, evidence of misbehaviour and
//     the settlement ledger. The lease loop that meters, bills and runs a
//     workload stays in this package and keeps what it signs there.
//   - node/internal/store: the Badger datastore and every key in it;
//     node/internal/repofile: the repo's shared files and lock;
//     node/internal/httpapi: the local API server.
//
// Concurrency: a Node's methods are safe for concurrent use. Each part of
// the node guards its own state with its own lock and holds none across a
// network, NVML or executor call; the clock is WithClock's everywhere a
// decision depends on time.
//
// The take protocol (/suanli/trade/1.0.0, trade.go, takeanswer.go) is one
// request and one answer on a stream: the taker sends a signed Take of
// one resting order, the maker answers with a signed Accept (the lease's
// terms; the pair is the Fill both gossip), a signed Reject, or for a
// resale ask a ResaleReply. The maker's side, per take ID (the CID of the
// signed take), is this state machine:
//
//	state      message                               answer, effect                                    next
//	-          not a Take, or signer ≠ stream peer    none; rejects{take,bad-envelope}                  -
//	-          any take while closing                 none                                              -
//	-          take created > maxTakeAge ago or       signed Reject; rejects{take,stale}                -
//	           > market.MaxClockSkew ahead
//	-          a new take, taker has 64 in flight     signed Reject; rejects{take,flood}                -
//	new        fresh take, checks fail                signed Reject; rejects{take,<why>}                rejected
//	new        fresh take, checks pass                GPUs held, lease + answer stored once (synced),   accepted
//	                                                  fill applied and gossiped; Accept
//	answering  the same take                          waits for the first answer; rejects{take,replay}  (same)
//	accepted   the same take (also after a restart)   the stored Accept; rejects{take,replay}           accepted
//	rejected   the same take (in memory, until stale) the stored Reject; rejects{take,replay}           rejected
//
// Nothing but the first answer of a take holds GPUs, writes terms or makes
// a fill. The taker's side, per take it sends: an Accept that opens as the
// maker's, for this take ID and its terms, applies the fill and holds the
// GPUs it chose to the lease's end (filled); a Reject signed by the maker
// for this take ID releases them (refused); any other reply, signed by
// another key or for another take, is refused as invalid and releases
// them; no reply in takeTimeout leaves the trade in doubt, and the hold
// lapses by itself a minute after the maker's window. TestHostileTakeReplay
// and TestHostileTakeOutOfTurn drive each row against a real node.
//
// Lock order, for the locks one part of the trade takes while holding
// another (outermost first):
//
//	tradeMu → the books lock (exchange.Books) → ownMu, inflight.mu
//
// ownMu, inflight.mu and the takes' answers (answers.mu) are leaves: held,
// they call nothing and lock nothing. The books lock is never held across
// a store write (the price history is written after it, in filled).
// TestOrderViewWhileFillsApply and TestInflightEndsWithItsFill hold the
// order to this.
package node
