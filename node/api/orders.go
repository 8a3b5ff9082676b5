package api

import "time"

// OrderRequest is a new bid or ask. Prices are decimals in Currency.
type OrderRequest struct {
	Side        string `json:"side"` // bid or ask
	Market      string `json:"market"`
	Count       uint32 `json:"count"`
	Price       string `json:"price"`
	Currency    string `json:"currency,omitempty"`     // default USD
	LeaseType   string `json:"lease_type,omitempty"`   // spot (default), on-demand, reserved
	Duration    string `json:"duration,omitempty"`     // bids: e.g. "1h"
	MinDuration string `json:"min_duration,omitempty"` // asks, default 1m
	MaxDuration string `json:"max_duration,omitempty"` // asks, default 720h
	Expires     string `json:"expires,omitempty"`      // rest this long, default 1h
	IOC         bool   `json:"ioc,omitempty"`
	PostOnly    bool   `json:"post_only,omitempty"`
	AllOrNone   bool   `json:"all_or_none,omitempty"`
	ClientKey   string `json:"client_key,omitempty"`
	// Start, for reserved time, is a forward block's start: RFC 3339, or
	// "+D" from now (e.g. "+5s"); empty: now. A bid's block is
	// [Start, Start+Duration); an ask sells blocks from Start on.
	Start string `json:"start,omitempty"`
	// Requeue, for a spot bid: when its lease is preempted, the bid goes
	// back on the book for the rest of its duration.
	Requeue bool `json:"requeue,omitempty"`
	// Resell, on an ask, names a reserved lease this node bought: the ask
	// sells the rest of its block.
	Resell string `json:"resell,omitempty"`
	// Bid constraints.
	Regions        []string `json:"regions,omitempty"`
	MinAttestation string   `json:"min_attestation,omitempty"`
	MinVRAMGiB     uint64   `json:"min_vram_gib,omitempty"`
	// Exec is a bid's command: run by the provider's process executor on
	// the leased GPUs, or with Image, the container's command.
	Exec []string `json:"exec,omitempty"`
	// Image is a bid's container image, run by the provider's docker
	// executor on exactly the leased GPUs; Ports are container TCP ports
	// to publish, SSHKey an authorized_keys line for root, WritableRoot a
	// writable root filesystem. All empty: the GPUs are only reserved.
	Image        string   `json:"image,omitempty"`
	Ports        []uint16 `json:"ports,omitempty"`
	SSHKey       string   `json:"ssh_key,omitempty"`
	WritableRoot bool     `json:"writable_root,omitempty"`
	// Replenish makes an ask a standing one: GPUs freed at the end of its
	// leases go back on the book (see replenish.go).
	Replenish bool `json:"replenish,omitempty"`
}

// OrderView is an order of this node and its trades.
type OrderView struct {
	ID        string      `json:"id"`
	Side      string      `json:"side"`
	Market    string      `json:"market"`
	Count     uint32      `json:"count"`
	Remaining uint32      `json:"remaining"`
	Price     string      `json:"price"`
	Currency  string      `json:"currency"`
	LeaseType string      `json:"lease_type"`
	Status    string      `json:"status"`
	Expires   time.Time   `json:"expires"`
	Fills     []TradeView `json:"fills"`
	Error     string      `json:"error,omitempty"`
	// PassedOver says, for an order that rests (or an IOC that did not
	// fill), why visible opposite orders at or better than its price were
	// not taken.
	PassedOver []PassView `json:"passed_over,omitempty"`
	// Standing is the standing ask (its first order's ID) this ask keeps
	// on the book, when it is one (see replenish.go).
	Standing string `json:"standing,omitempty"`
}

// TradeView is one fill.
type TradeView struct {
	ID       string `json:"id"`
	Market   string `json:"market"`
	Price    string `json:"price"`
	Currency string `json:"currency"`
	Count    uint32 `json:"count"`
	Buyer    string `json:"buyer"`
	Provider string `json:"provider"`
	// Reseller is the holder that resold the provider's reserved time to
	// the buyer (a resale), "" otherwise.
	Reseller  string    `json:"reseller,omitempty"`
	Lease     string    `json:"lease"`
	LeaseType string    `json:"lease_type"`
	GPUs      []string  `json:"gpus,omitempty"`
	Time      time.Time `json:"time"`
}

// PassView is one reason visible opposite orders at or better than an
// order's price were passed over: how many, and what one of them wanted.
type PassView struct {
	// Reason is min-duration, max-duration, lease-type, vram,
	// attestation, region, own-order or all-or-none.
	Reason string `json:"reason"`
	Orders int    `json:"orders"`
	GPUs   uint32 `json:"gpus"`
	Detail string `json:"detail"`
}

// BookView is one market's book as this node's replica holds it. Money is
// decimal strings beside the currency.
type BookView struct {
	Market   string      `json:"market"`
	Currency string      `json:"currency"`
	Bids     []LevelView `json:"bids"`
	Asks     []LevelView `json:"asks"`
	BestBid  string      `json:"best_bid,omitempty"`
	BestAsk  string      `json:"best_ask,omitempty"`
	Spread   string      `json:"spread,omitempty"`
	// Spot is the price of the last fill both parties signed.
	Spot string `json:"spot,omitempty"`
	// Index is the volume-weighted, one-print-per-provider average of the
	// last hour's fills.
	Index string `json:"index,omitempty"`
	// Blocks are the resting reserved orders for time ahead (a forward
	// start), apart from the depth of time now; they are in Bids and Asks
	// too, at their prices.
	Blocks []BlockView `json:"blocks,omitempty"`
}

// LevelView is one price level.
type LevelView struct {
	Price  string `json:"price"`
	Count  int    `json:"count"`
	Orders int    `json:"orders"`
}

// BlockView is a resting order for a forward block of reserved time.
type BlockView struct {
	Side  string    `json:"side"`
	Price string    `json:"price"`
	Count uint32    `json:"count"`
	Start time.Time `json:"start"`
	// Duration is a bid's block; MaxDuration the longest an ask sells.
	Duration    string `json:"duration,omitempty"`
	MaxDuration string `json:"max_duration,omitempty"`
}

// StandingAskView is one standing ask.
type StandingAskView struct {
	ID     string   `json:"id"`
	Market string   `json:"market"`
	Count  uint32   `json:"count"`
	Orders []string `json:"orders"`
	Error  string   `json:"error,omitempty"`
}

// Filled is how many GPUs of the order have traded.
func (v OrderView) Filled() uint32 {
	var sum uint32
	for _, f := range v.Fills {
		sum += f.Count
	}
	return sum
}
