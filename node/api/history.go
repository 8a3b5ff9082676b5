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

// MarketSummary is one joined market in one currency. Currency is empty
// for a market joined but with no order or fill yet.
type MarketSummary struct {
	Market   string `json:"market"`
	Currency string `json:"currency,omitempty"`
	BestBid  string `json:"best_bid,omitempty"`
	BestAsk  string `json:"best_ask,omitempty"`
	Spot     string `json:"spot,omitempty"`
	Index    string `json:"index,omitempty"`
	Bids     int    `json:"bid_orders"`
	Asks     int    `json:"ask_orders"`
	Fills    int    `json:"recent_fills"`
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

// PricePoint is one fill: its price and count, and the market's index just
// after it was applied (empty when the index had no value).
type PricePoint struct {
	Time        time.Time `json:"time"`
	Fill        string    `json:"fill"`
	Price       string    `json:"price"`
	PriceMicros int64     `json:"price_micros"`
	Count       uint32    `json:"count"`
	Index       string    `json:"index,omitempty"`
	IndexMicros int64     `json:"index_micros,omitempty"`
}
