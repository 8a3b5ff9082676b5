package node

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/gpu"
	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/internal/exchange"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

var (
	_ api.DashboardAPI = (*Node)(nil)
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

// The price history is one point per applied fill, under
// store.HistKey (market, currency, time, fill).

// histPoint is the stored value: price, count, index (0: none), and the
// fill's lease type (0: unknown, a point stored before lease types were
// kept).
type histPoint struct {
	price     int64
	count     uint32
	index     int64
	leaseType market.LeaseType
}

// histPointLen is a stored point without its lease type (the first
// format); histPointTypedLen with it.
const (
	histPointLen      = 8 + 4 + 8
	histPointTypedLen = histPointLen + 1
)

func (p histPoint) encode() []byte {
	b := binary.BigEndian.AppendUint64(nil, uint64(p.price))
	b = binary.BigEndian.AppendUint32(b, p.count)
	b = binary.BigEndian.AppendUint64(b, uint64(p.index))
	if p.leaseType != 0 {
		b = append(b, byte(p.leaseType))
	}
	return b
}

// errCorruptHistory is returned when a stored history point does not decode.
var errCorruptHistory = errors.New("node: corrupt price history entry")

func decodeHistPoint(b []byte) (histPoint, error) {
	if len(b) != histPointLen && len(b) != histPointTypedLen {
		return histPoint{}, fmt.Errorf("%w: %d bytes, want %d or %d", errCorruptHistory, len(b), histPointLen, histPointTypedLen)
	}
	p := histPoint{
		price: int64(binary.BigEndian.Uint64(b)),
		count: binary.BigEndian.Uint32(b[8:]),
		index: int64(binary.BigEndian.Uint64(b[12:])),
	}
	if p.price <= 0 || p.count == 0 || p.index < 0 {
		return histPoint{}, fmt.Errorf("%w: price %d, count %d, index %d", errCorruptHistory, p.price, p.count, p.index)
	}
	if len(b) == histPointTypedLen {
		p.leaseType = market.LeaseType(b[histPointLen])
		if _, err := market.ParseLeaseType(p.leaseType.String()); err != nil {
			return histPoint{}, fmt.Errorf("%w: lease type %d", errCorruptHistory, b[histPointLen])
		}
	}
	return p, nil
}

// recordHistory stores one applied fill and the index after it.
func (n *Node) recordHistory(f market.Fill, index int64) {
	p := histPoint{price: f.Price, count: f.Quantity, index: index, leaseType: f.LeaseType}
	if err := n.store.PutHistory(f.Market, f.Currency, f.Time, f.ID, p.encode()); err != nil {
		n.log.Warn("storing price history failed", "fill", f.ID, "err", err)
	}
}

// History implements DashboardAPI.
func (n *Node) History(_ context.Context, mkt, currency string, q api.HistoryQuery) (_ api.HistoryView, err error) {
	defer classified(&err)
	if !market.ValidMarketKey(mkt) {
		return api.HistoryView{}, api.BadRequest("market %q: want a key like nvidia-h100-sxm5-80gb", mkt)
	}
	cur := cmpOr(currency, "USD")
	if _, err := market.LookupCurrency(cur); err != nil {
		return api.HistoryView{}, api.BadRequest("currency: %v", err)
	}
	limit := q.Limit
	switch {
	case limit < 0:
		return api.HistoryView{}, api.BadRequest("limit must not be negative")
	case limit == 0:
		limit = defaultHistoryPoints
	case limit > maxHistoryPoints:
		limit = maxHistoryPoints
	}
	v := api.HistoryView{Market: mkt, Currency: cur, Points: []api.PricePoint{}}
	err = n.store.History(mkt, cur, func(at time.Time, id string, b []byte, err error) bool {
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
		pp := api.PricePoint{Time: at, Fill: id, Price: market.FormatMicros(p.price, cur), PriceMicros: p.price, Count: p.count}
		if p.leaseType != 0 {
			pp.LeaseType = p.leaseType.String()
		}
		if p.index > 0 {
			pp.Index, pp.IndexMicros = market.FormatMicros(p.index, cur), p.index
		}
		v.Points = append(v.Points, pp)
		return len(v.Points) < limit
	})
	if err != nil {
		return api.HistoryView{}, err
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
	by    map[string][]api.GPUSample
	// devices is the inventory's index, UUID and name of each GPU, read
	// once: a dashboard polling every few seconds need not re-read the
	// inventory (which, with confidential computing, makes fresh evidence).
	devices []api.GPUSeries
}

func (h *telemetryHistory) add(at time.Time, tel []gpu.Telemetry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.by == nil {
		h.by = map[string][]api.GPUSample{}
	}
	for _, t := range tel {
		s, ok := h.by[t.UUID]
		if !ok {
			h.order = append(h.order, t.UUID)
		}
		s = append(s, api.GPUSample{Time: at.UTC(), UtilizationPercent: t.UtilizationPercent, MemoryUsedBytes: t.MemoryUsedBytes,
			MemoryTotalBytes: t.MemoryTotalBytes, TemperatureC: t.TemperatureC, PowerMilliwatts: t.PowerMilliwatts})
		if len(s) > gpuHistorySamples {
			s = append(s[:0], s[len(s)-gpuHistorySamples:]...)
		}
		h.by[t.UUID] = s
	}
}

func (h *telemetryHistory) series(uuid string) []api.GPUSample {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]api.GPUSample{}, h.by[uuid]...)
}

// GPUHistory implements DashboardAPI.
func (n *Node) GPUHistory(ctx context.Context) (_ api.GPUHistoryView, err error) {
	defer classified(&err)
	if n.gpus == nil {
		return api.GPUHistoryView{}, fmt.Errorf("%w: %v", api.ErrNoGPUs, n.noGPU)
	}
	n.telHist.mu.Lock()
	devices := n.telHist.devices
	n.telHist.mu.Unlock()
	if devices == nil {
		inv, err := n.gpus.Inventory()
		if err != nil {
			return api.GPUHistoryView{}, err
		}
		devices = []api.GPUSeries{}
		for _, d := range inv.Devices {
			devices = append(devices, api.GPUSeries{Index: d.Index, UUID: d.UUID, Name: d.Name})
		}
		n.telHist.mu.Lock()
		n.telHist.devices = devices
		n.telHist.mu.Unlock()
	}
	holder := map[string]api.LeaseView{}
	leases, _ := n.Leases(ctx)
	for _, l := range leases {
		if l.Role != "provider" || l.ClosedAt != nil || l.State == "closed" || l.State == "unpaid" {
			continue
		}
		for _, g := range l.GPUs {
			holder[g] = l
		}
	}
	v := api.GPUHistoryView{IntervalS: int(telemetryInterval / time.Second), GPUs: []api.GPUSeries{}}
	for _, d := range devices {
		s := api.GPUSeries{Index: d.Index, UUID: d.UUID, Name: d.Name, Samples: n.telHist.series(d.UUID)}
		if l, ok := holder[d.UUID]; ok {
			s.Lease = l.ID
			v.Holders = append(v.Holders, api.GPUHolding{UUID: d.UUID, Lease: l.ID, Buyer: l.Buyer})
		}
		v.GPUs = append(v.GPUs, s)
	}
	return v, nil
}

// marketsLookupTimeout bounds the DHT lookup Markets makes on a node that
// has not looked up offers in the last minute.
const marketsLookupTimeout = 5 * time.Second

// Markets implements DashboardAPI: the markets this node joined, with
// their books, and the markets known from providers' offers (the DHT's,
// through the node's offer cache), joined or not, with how many providers
// offer how many GPUs from what list price. A read-only request starts no
// lookup: it answers from the offers this node already stored.
func (n *Node) Markets(ctx context.Context) (_ []api.MarketSummary, err error) {
	defer classified(&err)
	now := n.now()
	type key struct{ market, currency string }
	rows := map[key]*api.MarketSummary{}
	joined := map[string]bool{}
	n.books.Each(func(s *exchange.Replica) {
		cur := s.Book.Currency()
		f := func(p int64) string { return market.FormatMicros(p, cur) }
		m := api.MarketSummary{Market: s.Book.Market(), Currency: cur, Joined: true, Fills: len(s.Fills())}
		joined[m.Market] = true
		bids, asks := s.Book.Depth(0)
		for _, l := range bids {
			m.Bids += l.Orders
		}
		for _, l := range asks {
			m.Asks += l.Orders
		}
		if p, ok := s.Book.BestBid(); ok {
			m.BestBid = f(p)
		}
		if p, ok := s.Book.BestAsk(); ok {
			m.BestAsk = f(p)
		}
		if p, ok := s.Book.Spot(); ok {
			m.Spot = f(p)
		}
		if p, ok := s.Index.Value(now); ok {
			m.Index = f(p)
		}
		rows[key{m.Market, cur}] = &m
	})
	joinedOnly := map[string]bool{}
	for _, mkt := range n.books.Markets() {
		if !joined[mkt] {
			joinedOnly[mkt] = true
		}
		joined[mkt] = true
	}
	// What providers offer, per market and currency.
	lowest := map[key]int64{}
	for _, o := range n.knownOffers(ctx, now) {
		cur := o.GetPricing().GetCurrency()
		if _, err := market.LookupCurrency(cur); err != nil {
			continue
		}
		counted := map[string]bool{}
		for _, g := range o.Gpus {
			if !market.ValidMarketKey(g.Market) {
				continue
			}
			k := key{g.Market, cur}
			m := rows[k]
			if m == nil {
				m = &api.MarketSummary{Market: g.Market, Currency: cur, Joined: joined[g.Market]}
				rows[k] = m
				delete(joinedOnly, g.Market)
			}
			m.OfferedGPUs++
			if !counted[g.Market] {
				counted[g.Market] = true
				m.Providers++
				if p := o.GetPricing().GetOnDemandMicros(); p > 0 && (lowest[k] == 0 || p < lowest[k]) {
					lowest[k] = p
					m.LowestOffer = market.FormatMicros(p, cur)
				}
			}
		}
	}
	out := make([]api.MarketSummary, 0, len(rows)+len(joinedOnly))
	for _, m := range rows {
		out = append(out, *m)
	}
	for mkt := range joinedOnly {
		out = append(out, api.MarketSummary{Market: mkt, Joined: true})
	}
	slices.SortFunc(out, func(a, b api.MarketSummary) int {
		if c := strings.Compare(a.Market, b.Market); c != 0 {
			return c
		}
		return strings.Compare(a.Currency, b.Currency)
	})
	return out, nil
}

// knownOffers are the unexpired offers of every market this node knows:
// its own, and the offer cache's from the last lookup of all markets (a
// new lookup, bounded by marketsLookupTimeout, when that one is more than
// a minute old). A read-only request, or a lookup that finds nothing, gets
// the offers stored in Badger.
func (n *Node) knownOffers(ctx context.Context, now time.Time) []*proto.Offer {
	offers, warm := map[peer.ID]*proto.Offer{}, true
	if !api.ReadOnly(ctx) {
		offers, warm = n.offers.Warm(p2p.AnyMarket)
	}
	if !warm {
		lctx, cancel := context.WithTimeout(ctx, marketsLookupTimeout)
		var err error
		offers, err = n.offers.Lookup(lctx, p2p.AnyMarket, false)
		cancel()
		if err != nil {
			n.log.Debug("some offers could not be fetched", "err", err)
		}
	}
	if len(offers) == 0 {
		n.offers.FromStore(offers)
	}
	if o := n.Published(); o != nil {
		offers[n.host.ID()] = o
	}
	out := make([]*proto.Offer, 0, len(offers))
	for _, o := range offers {
		if time.UnixMilli(o.ExpiresUnixMs).After(now) {
			out = append(out, o)
		}
	}
	return out
}

// OrdersPage implements DashboardAPI.
func (n *Node) OrdersPage(ctx context.Context, q api.PageQuery) (_ api.OrdersPageView, err error) {
	defer classified(&err)
	switch q.Status {
	case "", "resting", "filled", "cancelled", "expired", "done":
	default:
		return api.OrdersPageView{}, api.BadRequest("status %q: want resting, filled, cancelled, expired or done", q.Status)
	}
	if q.Offset < 0 {
		return api.OrdersPageView{}, api.BadRequest("offset must not be negative")
	}
	limit := q.Limit
	switch {
	case limit < 0:
		return api.OrdersPageView{}, api.BadRequest("limit must not be negative")
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
	v := api.OrdersPageView{Offset: q.Offset, Orders: []api.OrderView{}}
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
