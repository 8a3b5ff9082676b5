package api

import "time"

// GPUHistoryView is the local GPUs' telemetry over time.
type GPUHistoryView struct {
	IntervalS int          `json:"interval_s"`
	GPUs      []GPUSeries  `json:"gpus"`
	Holders   []GPUHolding `json:"holders,omitempty"`
}

// GPUHolding names the running lease that holds a GPU.
type GPUHolding struct {
	UUID  string `json:"uuid"`
	Lease string `json:"lease"`
	Buyer string `json:"buyer"`
}

// GPUSample is one telemetry sample.
type GPUSample struct {
	Time               time.Time `json:"time"`
	UtilizationPercent uint32    `json:"util_pct"`
	MemoryUsedBytes    uint64    `json:"mem_used_bytes"`
	MemoryTotalBytes   uint64    `json:"mem_total_bytes"`
	TemperatureC       uint32    `json:"temp_c"`
	PowerMilliwatts    uint32    `json:"power_mw"`
}

// GPUSeries is one GPU's samples, oldest first.
type GPUSeries struct {
	Index   int         `json:"index"`
	UUID    string      `json:"uuid"`
	Name    string      `json:"name"`
	Lease   string      `json:"lease,omitempty"`
	Samples []GPUSample `json:"samples"`
}

// HistoryQuery bounds a history. Zero fields take defaults.
type HistoryQuery struct {
	Since time.Time `json:"since,omitzero"`
	Limit int       `json:"limit,omitempty"`
}

// HistoryView is a market's price history in one currency.
type HistoryView struct {
	Market   string       `json:"market"`
	Currency string       `json:"currency"`
	Points   []PricePoint `json:"points"`
}

// MarketSummary is one market in one currency: a market this node joined
// (its book's best prices, spot, index and orders), or one known from
// providers' offers (Joined false: how many providers offer how many GPUs,
// from what on-demand list price per GPU-hour). Currency is empty for a
// market joined but with no order, fill or offer yet.
type MarketSummary struct {
	Market      string `json:"market"`
	Currency    string `json:"currency,omitempty"`
	Joined      bool   `json:"joined"`
	Providers   int    `json:"providers,omitempty"`
	OfferedGPUs int    `json:"offered_gpus,omitempty"`
	LowestOffer string `json:"lowest_offer,omitempty"`
	BestBid     string `json:"best_bid,omitempty"`
	BestAsk     string `json:"best_ask,omitempty"`
	Spot        string `json:"spot,omitempty"`
	Index       string `json:"index,omitempty"`
	Bids        int    `json:"bid_orders"`
	Asks        int    `json:"ask_orders"`
	Fills       int    `json:"recent_fills"`
}

// OrdersPageView is one page of orders and how many there are in all.
type OrdersPageView struct {
	Total  int         `json:"total"`
	Offset int         `json:"offset"`
	Orders []OrderView `json:"orders"`
}

// PageQuery selects a page of a list.
type PageQuery struct {
	Offset int    `json:"offset,omitempty"`
	Limit  int    `json:"limit,omitempty"`
	Status string `json:"status,omitempty"` // resting, filled, cancelled, expired, done; "" all
}

// PricePoint is one fill: its price, count and lease type (spot,
// on-demand or reserved; empty for a point stored before lease types were
// kept), and the market's index just after it was applied (empty when the
// index had no value). The fills are the market's, whoever traded: every
// fill this node saw applied to its replica of the book.
type PricePoint struct {
	Time        time.Time `json:"time"`
	Fill        string    `json:"fill"`
	Price       string    `json:"price"`
	PriceMicros int64     `json:"price_micros"`
	Count       uint32    `json:"count"`
	LeaseType   string    `json:"lease_type,omitempty"`
	Index       string    `json:"index,omitempty"`
	IndexMicros int64     `json:"index_micros,omitempty"`
}
