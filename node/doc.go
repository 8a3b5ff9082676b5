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
//     the settlement ledger.
//   - node/internal/lease: the running lease: the loop that meters, bills
//     and closes, the receipt protocol's and the exec stream's state
//     machines (their tables are its package doc), close notices, redials,
//     workloads and their logs, on an injected clock. It keeps what it
//     signs in leases; wire_lease.go wires it to the rest of the node.
//   - node/internal/trade: the take protocol, taker's and maker's sides:
//     the take loop, each take answered once (a replay gets the first
//     answer) and only while fresh, the reservation of GPUs, the GPUs of
//     own orders in takes in flight, spot preemption, and the
//     explanation of orders passed over.
//   - node/internal/orders: the node's own orders: built, signed,
//     placed (taking what they cross, then resting), their fills, views,
//     pages, cancels, and the re-queue of a preempted bid; its lock is a
//     leaf. Reached through orders.go.
//   - node/internal/resale: the resale of reserved time, holder's,
//     provider's and new buyer's sides, and its records.
//   - node/internal/provider: the provider's side: its offer (built from
//     the inventory, sealed, published and republished), the free
//     capacity and calendar it shows, and standing asks. Reached through
//     wire_provider.go.
//   - node/internal/credit: the credit policy, the most a buyer may owe
//     the provider unpaid, growing with what it paid.
//   - node/internal/history: the price history of the fills applied, the
//     GPUs' recent telemetry and the markets' summary the dashboard reads.
//   - node/internal/store: the Badger datastore and every key in it;
//     node/internal/repo: the repo directory, config.json and its edits
//     (InitRepo, LoadConfig, Config here are its names);
//     node/internal/repofile: the repo's files shared with node/client,
//     and its lock; node/internal/httpapi: the local API server;
//     node/internal/metrics: the Prometheus registry /metrics serves;
//     node/internal/view: the API's views of offers, inventories, books,
//     settlements and the status, pure functions.
//
// Concurrency: a Node's methods are safe for concurrent use. Each part of
// the node guards its own state with its own lock and holds none across a
// network, NVML or executor call; the clock is WithClock's everywhere a
// decision depends on time.
//
// The take protocol (/suanli/trade/1.0.0) and the resale are wired in
// wire_trade.go: every call they make on the rest of the node goes
// through the adapters there (trade.Node, resale.Node); the node's own
// orders are node/internal/orders, wired in orders.go. Their states,
// messages and transitions are written down in node/internal/trade,
// node/internal/resale and node/internal/orders. TestHostileTakeReplay and TestHostileTakeOutOfTurn
// drive each row of the take's against a real node.
//
// Lock order, for the locks one part of the trade takes while holding
// another (outermost first):
//
//	trade.Trader's lock → the books lock (exchange.Books) → orders.Own's lock, trade.Inflight
//	trade.Trader's lock → lease.Manager's lock → a lease's lock (Manager.Preemptible)
//	a lease's lock → resale's handover (store writes only)
//
// orders.Own's, Inflight's, Answers' and resale.Manager's locks are leaves:
// held, they call nothing and lock nothing. So are the provider's side's
// (its offer's, its standing asks', the credit policy's payment cache and
// the telemetry ring): each is taken and released without a call out, and
// the credit policy visits the leases, each under its own lock, with none
// of its own held. A provider's Publish runs one at a time (its publish
// lock) and holds it across the DHT, never with another lock. The trade
// lock is never held across the network, NVML, an executor, a store write
// or a signature check (TestReserveTakeOutsideTheLock). The books lock is
// never held across a store write (the price history is written after it,
// in filled). TestOrderViewWhileFillsApply and TestInflightEndsWithItsFill
// hold the order to this.
//
// The leases' locks are package lease's (its doc gives their order:
// Manager.mu → Run.mu → the logs' lock). Preemption, credit and resale
// reach a lease only through the Manager's methods, which take its locks
// in that order with none of theirs held but the trade lock.
package node
