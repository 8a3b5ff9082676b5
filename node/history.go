package node

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/suanli/suanli/gpu"
	"github.com/suanli/suanli/market"
)

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

var (
	_ DashboardAPI = (*Node)(nil)
	_ DashboardAPI = (*Client)(nil)
)

// History limits.
const (
	defaultHistoryPoints = 500
	maxHistoryPoints     = 5000
	// gpuHistorySamples is how many telemetry samples per GPU are kept in
	// memory (at the 5 s sampling interval, an hour).
	gpuHistorySamples = 720
	defaultPageSize   = 50
	maxPageSize       = 500
)

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

// GPUSeries is one GPU's samples, oldest first.
type GPUSeries struct {
	Index   int         `json:"index"`
	UUID    string      `json:"uuid"`
	Name    string      `json:"name"`
	Lease   string      `json:"lease,omitempty"`
	Samples []GPUSample `json:"samples"`
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

// PageQuery selects a page of a list.
type PageQuery struct {
	Offset int    `json:"offset,omitempty"`
	Limit  int    `json:"limit,omitempty"`
	Status string `json:"status,omitempty"` // resting, filled, cancelled, expired, done; "" all
}

// OrdersPageView is one page of orders and how many there are in all.
type OrdersPageView struct {
	Total  int         `json:"total"`
	Offset int         `json:"offset"`
	Orders []OrderView `json:"orders"`
}

// The price history is one point per applied fill, under
// store.HistKey (market, currency, time, fill).

// histPoint is the stored value: price, count, index (0: none).
type histPoint struct {
	price int64
	count uint32
	index int64
}

const histPointLen = 8 + 4 + 8

func (p histPoint) encode() []byte {
	b := binary.BigEndian.AppendUint64(nil, uint64(p.price))
	b = binary.BigEndian.AppendUint32(b, p.count)
	return binary.BigEndian.AppendUint64(b, uint64(p.index))
}

// errCorruptHistory is returned when a stored history point does not decode.
var errCorruptHistory = errors.New("node: corrupt price history entry")

func decodeHistPoint(b []byte) (histPoint, error) {
	if len(b) != histPointLen {
		return histPoint{}, fmt.Errorf("%w: %d bytes, want %d", errCorruptHistory, len(b), histPointLen)
	}
	p := histPoint{
		price: int64(binary.BigEndian.Uint64(b)),
		count: binary.BigEndian.Uint32(b[8:]),
		index: int64(binary.BigEndian.Uint64(b[12:])),
	}
	if p.price <= 0 || p.count == 0 || p.index < 0 {
		return histPoint{}, fmt.Errorf("%w: price %d, count %d, index %d", errCorruptHistory, p.price, p.count, p.index)
	}
	return p, nil
}

// recordHistory stores one applied fill and the index after it.
func (n *Node) recordHistory(f market.Fill, index int64) {
	p := histPoint{price: f.Price, count: f.Quantity, index: index}
	if err := n.store.PutHistory(f.Market, f.Currency, f.Time, f.ID, p.encode()); err != nil {
		n.log.Warn("storing price history failed", "fill", f.ID, "err", err)
	}
}

// History implements DashboardAPI.
func (n *Node) History(_ context.Context, mkt, currency string, q HistoryQuery) (HistoryView, error) {
	if !market.ValidMarketKey(mkt) {
		return HistoryView{}, badRequest("market %q: want a key like nvidia-h100-sxm5-80gb", mkt)
	}
	cur := cmpOr(currency, "USD")
	if _, err := market.LookupCurrency(cur); err != nil {
		return HistoryView{}, badRequest("currency: %v", err)
	}
	limit := q.Limit
	switch {
	case limit < 0:
		return HistoryView{}, badRequest("limit must not be negative")
	case limit == 0:
		limit = defaultHistoryPoints
	case limit > maxHistoryPoints:
		limit = maxHistoryPoints
	}
	v := HistoryView{Market: mkt, Currency: cur, Points: []PricePoint{}}
	err := n.store.History(mkt, cur, func(at time.Time, id string, b []byte, err error) bool {
		if err != nil {
			n.log.Warn("skipping history entry", "err", err)
			return true
		}
		if !q.Since.IsZero() && at.Before(q.Since) {
			return false
		}
		p, err := decodeHistPoint(b)
		if err != nil {
			n.log.Warn("skipping history entry", "err", err)
			return true
		}
		pp := PricePoint{Time: at, Fill: id, Price: market.FormatMicros(p.price, cur), PriceMicros: p.price, Count: p.count}
		if p.index > 0 {
			pp.Index, pp.IndexMicros = market.FormatMicros(p.index, cur), p.index
		}
		v.Points = append(v.Points, pp)
		return len(v.Points) < limit
	})
	if err != nil {
		return HistoryView{}, err
	}
	for i, j := 0, len(v.Points)-1; i < j; i, j = i+1, j-1 {
		v.Points[i], v.Points[j] = v.Points[j], v.Points[i]
	}
	return v, nil
}

// telemetryHistory is a ring of recent samples per GPU. The zero value is
// ready to use.
type telemetryHistory struct {
	mu    sync.Mutex
	order []string // UUIDs in inventory order
	by    map[string][]GPUSample
	// devices is the inventory's index, UUID and name of each GPU, read
	// once: a dashboard polling every few seconds need not re-read the
	// inventory (which, with confidential computing, makes fresh evidence).
	devices []GPUSeries
}

func (h *telemetryHistory) add(at time.Time, tel []gpu.Telemetry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.by == nil {
		h.by = map[string][]GPUSample{}
	}
	for _, t := range tel {
		s, ok := h.by[t.UUID]
		if !ok {
			h.order = append(h.order, t.UUID)
		}
		s = append(s, GPUSample{Time: at.UTC(), UtilizationPercent: t.UtilizationPercent, MemoryUsedBytes: t.MemoryUsedBytes,
			MemoryTotalBytes: t.MemoryTotalBytes, TemperatureC: t.TemperatureC, PowerMilliwatts: t.PowerMilliwatts})
		if len(s) > gpuHistorySamples {
			s = append(s[:0], s[len(s)-gpuHistorySamples:]...)
		}
		h.by[t.UUID] = s
	}
}

func (h *telemetryHistory) series(uuid string) []GPUSample {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]GPUSample{}, h.by[uuid]...)
}

// GPUHistory implements DashboardAPI.
func (n *Node) GPUHistory(ctx context.Context) (GPUHistoryView, error) {
	if n.gpus == nil {
		return GPUHistoryView{}, fmt.Errorf("%w: %v", ErrNoGPUs, n.noGPU)
	}
	n.telHist.mu.Lock()
	devices := n.telHist.devices
	n.telHist.mu.Unlock()
	if devices == nil {
		inv, err := n.gpus.Inventory()
		if err != nil {
			return GPUHistoryView{}, err
		}
		devices = []GPUSeries{}
		for _, d := range inv.Devices {
			devices = append(devices, GPUSeries{Index: d.Index, UUID: d.UUID, Name: d.Name})
		}
		n.telHist.mu.Lock()
		n.telHist.devices = devices
		n.telHist.mu.Unlock()
	}
	holder := map[string]LeaseView{}
	leases, _ := n.Leases(ctx)
	for _, l := range leases {
		if l.Role != "provider" || l.ClosedAt != nil || l.State == "closed" || l.State == "unpaid" {
			continue
		}
		for _, g := range l.GPUs {
			holder[g] = l
		}
	}
	v := GPUHistoryView{IntervalS: int(telemetryInterval / time.Second), GPUs: []GPUSeries{}}
	for _, d := range devices {
		s := GPUSeries{Index: d.Index, UUID: d.UUID, Name: d.Name, Samples: n.telHist.series(d.UUID)}
		if l, ok := holder[d.UUID]; ok {
			s.Lease = l.ID
			v.Holders = append(v.Holders, GPUHolding{UUID: d.UUID, Lease: l.ID, Buyer: l.Buyer})
		}
		v.GPUs = append(v.GPUs, s)
	}
	return v, nil
}

// Markets implements DashboardAPI.
func (n *Node) Markets(context.Context) ([]MarketSummary, error) {
	now := n.now()
	n.books.mu.Lock()
	out := []MarketSummary{}
	seen := map[string]bool{}
	for _, s := range n.books.states {
		cur := s.book.Currency()
		f := func(p int64) string { return market.FormatMicros(p, cur) }
		m := MarketSummary{Market: s.book.Market(), Currency: cur, Fills: len(s.fills)}
		seen[m.Market] = true
		bids, asks := s.book.Depth(0)
		for _, l := range bids {
			m.Bids += l.Orders
		}
		for _, l := range asks {
			m.Asks += l.Orders
		}
		if p, ok := s.book.BestBid(); ok {
			m.BestBid = f(p)
		}
		if p, ok := s.book.BestAsk(); ok {
			m.BestAsk = f(p)
		}
		if p, ok := s.book.Spot(); ok {
			m.Spot = f(p)
		}
		if p, ok := s.index.Value(now); ok {
			m.Index = f(p)
		}
		out = append(out, m)
	}
	for mkt := range n.books.topics {
		if !seen[mkt] {
			out = append(out, MarketSummary{Market: mkt})
		}
	}
	n.books.mu.Unlock()
	slices.SortFunc(out, func(a, b MarketSummary) int {
		if c := strings.Compare(a.Market, b.Market); c != 0 {
			return c
		}
		return strings.Compare(a.Currency, b.Currency)
	})
	return out, nil
}

// OrdersPage implements DashboardAPI.
func (n *Node) OrdersPage(ctx context.Context, q PageQuery) (OrdersPageView, error) {
	switch q.Status {
	case "", "resting", "filled", "cancelled", "expired", "done":
	default:
		return OrdersPageView{}, badRequest("status %q: want resting, filled, cancelled, expired or done", q.Status)
	}
	if q.Offset < 0 {
		return OrdersPageView{}, badRequest("offset must not be negative")
	}
	limit := q.Limit
	switch {
	case limit < 0:
		return OrdersPageView{}, badRequest("limit must not be negative")
	case limit == 0:
		limit = defaultPageSize
	case limit > maxPageSize:
		limit = maxPageSize
	}
	// Sort the records first and build views only for the page.
	n.ownMu.Lock()
	list := make([]*ownOrder, 0, len(n.own))
	for _, oo := range n.own {
		list = append(list, oo)
	}
	n.ownMu.Unlock()
	sortOwn(list)
	v := OrdersPageView{Offset: q.Offset, Orders: []OrderView{}}
	for _, oo := range list {
		if q.Status != "" {
			// Status may depend on the book (expired); views are cheap
			// enough for a filter over thousands.
			if n.orderView(oo).Status != q.Status {
				continue
			}
		}
		if v.Total >= q.Offset && len(v.Orders) < limit {
			v.Orders = append(v.Orders, n.orderView(oo))
		}
		v.Total++
	}
	return v, nil
}

// sortOwn orders records newest first, ties by ID, as Orders does.
func sortOwn(list []*ownOrder) {
	slices.SortFunc(list, func(a, b *ownOrder) int {
		if c := b.order.Created.Compare(a.order.Created); c != 0 {
			return c
		}
		return strings.Compare(a.order.ID, b.order.ID)
	})
}

// registerDashboardRoutes serves DashboardAPI and the dashboard's pages.
func registerDashboardRoutes(mux *http.ServeMux, s *apiServer, n *Node) {
	mux.HandleFunc("GET "+apiPrefix+"/history/{market}", s.auth(func(r *http.Request) (any, error) {
		v := r.URL.Query()
		var q HistoryQuery
		if t := v.Get("since"); t != "" {
			ts, err := time.Parse(time.RFC3339Nano, t)
			if err != nil {
				return nil, badRequest("since: want an RFC 3339 time: %v", err)
			}
			q.Since = ts
		}
		var err error
		if q.Limit, err = intParam(v, "limit"); err != nil {
			return nil, err
		}
		return n.History(r.Context(), r.PathValue("market"), v.Get("currency"), q)
	}))
	mux.HandleFunc("GET "+apiPrefix+"/markets", s.auth(func(r *http.Request) (any, error) { return n.Markets(r.Context()) }))
	mux.HandleFunc("GET "+apiPrefix+"/gpus/history", s.auth(func(r *http.Request) (any, error) { return n.GPUHistory(r.Context()) }))
	mux.HandleFunc("GET "+apiPrefix+"/orders-page", s.auth(func(r *http.Request) (any, error) {
		v := r.URL.Query()
		q := PageQuery{Status: v.Get("status")}
		var err error
		if q.Offset, err = intParam(v, "offset"); err != nil {
			return nil, err
		}
		if q.Limit, err = intParam(v, "limit"); err != nil {
			return nil, err
		}
		return n.OrdersPage(r.Context(), q)
	}))
	registerStatusRoute(mux, s, n)
	registerAccessRoute(mux, s)
	mountDashboard(mux)
}

func intParam(v url.Values, name string) (int, error) {
	s := v.Get(name)
	if s == "" {
		return 0, nil
	}
	i, err := strconv.Atoi(s)
	if err != nil {
		return 0, badRequest("%s: want an integer, got %q", name, s)
	}
	return i, nil
}

// History implements DashboardAPI.
func (c *Client) History(ctx context.Context, mkt, currency string, q HistoryQuery) (v HistoryView, err error) {
	p := url.Values{}
	if currency != "" {
		p.Set("currency", currency)
	}
	if !q.Since.IsZero() {
		p.Set("since", q.Since.Format(time.RFC3339Nano))
	}
	if q.Limit != 0 {
		p.Set("limit", strconv.Itoa(q.Limit))
	}
	return v, c.get(ctx, "/history/"+url.PathEscape(mkt), p, &v)
}

// GPUHistory implements DashboardAPI.
func (c *Client) GPUHistory(ctx context.Context) (v GPUHistoryView, err error) {
	return v, c.get(ctx, "/gpus/history", nil, &v)
}

// Markets implements DashboardAPI.
func (c *Client) Markets(ctx context.Context) (v []MarketSummary, err error) {
	return v, c.get(ctx, "/markets", nil, &v)
}

// OrdersPage implements DashboardAPI.
func (c *Client) OrdersPage(ctx context.Context, q PageQuery) (v OrdersPageView, err error) {
	p := url.Values{}
	if q.Offset != 0 {
		p.Set("offset", strconv.Itoa(q.Offset))
	}
	if q.Limit != 0 {
		p.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Status != "" {
		p.Set("status", q.Status)
	}
	return v, c.get(ctx, "/orders-page", p, &v)
}
