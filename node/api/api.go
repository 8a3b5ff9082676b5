// Package api is the node's local API as data: the API interface that a
// running node implements in-process and node/client implements over
// HTTP, the request and view types both exchange as JSON, and the error
// codes that carry a failure's kind across the wire so that errors.Is
// gives the same answer on either side.
//
// It imports nothing but the standard library, so a program that only
// talks to a daemon (node/client) links neither libp2p, Badger nor NVML.
package api

import "context"

// Prefix is the path every API route is under.
const Prefix = "/api/v0"

// API is what a running node answers. node.Node implements it in-process and
// client.Client over the daemon's local HTTP API; one test suite checks both.
type API interface {
	// ID is the node's peer ID and listen addresses.
	ID(ctx context.Context) (IDInfo, error)
	// GPUs is the local inventory the node offers, with fresh telemetry.
	GPUs(ctx context.Context) (GPUReport, error)
	// Offers searches the network for offers passing the query.
	Offers(ctx context.Context, q OfferQuery) ([]OfferView, error)
	// Peers lists connected peers.
	Peers(ctx context.Context) ([]PeerView, error)

	// PlaceOrder signs and places a bid or ask, taking what it crosses.
	PlaceOrder(ctx context.Context, req OrderRequest) (OrderView, error)
	// Order is one of this node's orders and its fills.
	Order(ctx context.Context, id string) (OrderView, error)
	// Orders lists this node's orders, newest first.
	Orders(ctx context.Context) ([]OrderView, error)
	// CancelOrder withdraws one of this node's resting orders.
	CancelOrder(ctx context.Context, id string) (OrderView, error)
	// Book is a market's depth, spread, spot price and index in a currency.
	Book(ctx context.Context, market, currency string) (BookView, error)
	// Trades are a market's recent fills, newest first.
	Trades(ctx context.Context, market string) ([]TradeView, error)

	// Attest challenges a provider to prove its GPUs with fresh
	// confidential-computing evidence, and verifies the answer.
	Attest(ctx context.Context, provider string) (AttestReport, error)

	// Leases and settlement (see LeaseAPI).
	LeaseAPI
	// Price history, GPU telemetry over time, paged orders (see DashboardAPI).
	DashboardAPI
}

// LeaseAPI is what a running node answers about its leases and their
// settlement; part of API.
type LeaseAPI interface {
	// Leases lists the leases this node is party to, newest first.
	Leases(ctx context.Context) ([]LeaseView, error)
	// Lease is one of them.
	Lease(ctx context.Context, id string) (LeaseView, error)
	// CloseLease ends a lease early, as buyer-closed or provider-closed.
	CloseLease(ctx context.Context, id string) (LeaseView, error)
	// Logs is a lease's captured command output after seq after (buyer).
	Logs(ctx context.Context, id string, after uint64) (LogsView, error)
	// Receipts is a lease's stored receipt chain, signatures checked.
	Receipts(ctx context.Context, id string) ([]ReceiptView, error)
	// VerifyReceipts re-verifies every signature and link of a chain.
	VerifyReceipts(ctx context.Context, id string) (ChainReport, error)
	// ExportReceipts is a chain with its signed terms, for VerifyExport.
	ExportReceipts(ctx context.Context, id string) ([]byte, error)
	// Settle is the settlement with a peer, or every peer when "".
	Settle(ctx context.Context, peer string) ([]SettlementView, error)
	// AckPayment records (provider) that a buyer paid, and tells it.
	AckPayment(ctx context.Context, req PaymentRequest) (PaymentView, error)
	// Evidence is the signed misbehaviour this node keeps (equivocating
	// receipts, refused fills), of peer only when peer is not "".
	Evidence(ctx context.Context, peer string) ([]EvidenceView, error)
	// ExportEvidence is one piece of it, for VerifyEvidence.
	ExportEvidence(ctx context.Context, id string) ([]byte, error)
}

// DashboardAPI is what the dashboard reads beyond the CLI's views: price
// history from the node's own fills, GPU telemetry over time, and its
// orders a page at a time; part of API.
type DashboardAPI interface {
	// History is a market's fills in a currency as this node applied them,
	// with the index after each, oldest first: at most q.Limit points (the
	// newest ones) at or after q.Since. It survives restarts.
	History(ctx context.Context, market, currency string, q HistoryQuery) (HistoryView, error)
	// GPUHistory is each local GPU's recent telemetry and the lease that
	// holds it (providers).
	GPUHistory(ctx context.Context) (GPUHistoryView, error)
	// OrdersPage is a page of this node's orders, newest first, optionally
	// of one status.
	OrdersPage(ctx context.Context, q PageQuery) (OrdersPageView, error)
	// Markets are the markets this node has joined, one row per currency
	// its replica holds, by market key.
	Markets(ctx context.Context) ([]MarketSummary, error)
	// Status is the node at a glance: peers, markets, its offer, open
	// orders, running leases and what is owed.
	Status(ctx context.Context) (StatusView, error)
}
