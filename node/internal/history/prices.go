package history

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
)

// Price history limits.
const (
	DefaultPoints = 500
	MaxPoints     = 5000
)

// The price history is one point per applied fill, under
// store.HistKey (market, currency, time, fill).

// Point is the stored value: price, count, index (0: none), and the
// fill's lease type (0: unknown, a point stored before lease types were
// kept).
type Point struct {
	Price     int64
	Count     uint32
	Index     int64
	LeaseType market.LeaseType
}

// PointLen is a stored point without its lease type (the first format);
// PointTypedLen with it.
const (
	PointLen      = 8 + 4 + 8
	PointTypedLen = PointLen + 1
)

// Encode is the point as stored.
func (p Point) Encode() []byte {
	b := binary.BigEndian.AppendUint64(nil, uint64(p.Price))
	b = binary.BigEndian.AppendUint32(b, p.Count)
	b = binary.BigEndian.AppendUint64(b, uint64(p.Index))
	if p.LeaseType != 0 {
		b = append(b, byte(p.LeaseType))
	}
	return b
}

// ErrCorrupt is returned when a stored history point does not decode.
var ErrCorrupt = errors.New("node: corrupt price history entry")

// DecodePoint reads a stored point, either format.
func DecodePoint(b []byte) (Point, error) {
	if len(b) != PointLen && len(b) != PointTypedLen {
		return Point{}, fmt.Errorf("%w: %d bytes, want %d or %d", ErrCorrupt, len(b), PointLen, PointTypedLen)
	}
	p := Point{
		Price: int64(binary.BigEndian.Uint64(b)),
		Count: binary.BigEndian.Uint32(b[8:]),
		Index: int64(binary.BigEndian.Uint64(b[12:])),
	}
	if p.Price <= 0 || p.Count == 0 || p.Index < 0 {
		return Point{}, fmt.Errorf("%w: price %d, count %d, index %d", ErrCorrupt, p.Price, p.Count, p.Index)
	}
	if len(b) == PointTypedLen {
		p.LeaseType = market.LeaseType(b[PointLen])
		if _, err := market.ParseLeaseType(p.LeaseType.String()); err != nil {
			return Point{}, fmt.Errorf("%w: lease type %d", ErrCorrupt, b[PointLen])
		}
	}
	return p, nil
}

// Store keeps the points. *store.Store implements it.
type Store interface {
	PutHistory(mkt, cur string, at time.Time, fill string, point []byte) error
	History(mkt, cur string, fn func(at time.Time, fill string, point []byte, err error) bool) error
}

// Prices is the price history of the fills this node applied.
type Prices struct {
	Store Store
	Log   *slog.Logger
}

// Record stores one applied fill and the index after it. A failure is
// logged: the history is a record, not the books.
func (h Prices) Record(f market.Fill, index int64) {
	p := Point{Price: f.Price, Count: f.Quantity, Index: index, LeaseType: f.LeaseType}
	if err := h.Store.PutHistory(f.Market, f.Currency, f.Time, f.ID, p.Encode()); err != nil {
		h.Log.Warn("storing price history failed", "fill", f.ID, "err", err)
	}
}

// Query is the API's History: the newest points of mkt in currency ("":
// USD), oldest first, at most q.Limit (0: DefaultPoints; capped at
// MaxPoints), none before q.Since. Entries that do not decode are logged
// and skipped.
func (h Prices) Query(mkt, currency string, q api.HistoryQuery) (api.HistoryView, error) {
	if !market.ValidMarketKey(mkt) {
		return api.HistoryView{}, api.BadRequest("market %q: want a key like nvidia-h100-sxm5-80gb", mkt)
	}
	cur := currency
	if cur == "" {
		cur = "USD"
	}
	if _, err := market.LookupCurrency(cur); err != nil {
		return api.HistoryView{}, api.BadRequest("currency: %v", err)
	}
	limit := q.Limit
	switch {
	case limit < 0:
		return api.HistoryView{}, api.BadRequest("limit must not be negative")
	case limit == 0:
		limit = DefaultPoints
	case limit > MaxPoints:
		limit = MaxPoints
	}
	v := api.HistoryView{Market: mkt, Currency: cur, Points: []api.PricePoint{}}
	err := h.Store.History(mkt, cur, func(at time.Time, id string, b []byte, err error) bool {
		if err != nil {
			h.Log.Warn("skipping history entry", "err", err)
			return true
		}
		if !q.Since.IsZero() && at.Before(q.Since) {
			return false
		}
		p, err := DecodePoint(b)
		if err != nil {
			h.Log.Warn("skipping history entry", "err", err)
			return true
		}
		pp := api.PricePoint{Time: at, Fill: id, Price: market.FormatMicros(p.Price, cur), PriceMicros: p.Price, Count: p.Count}
		if p.LeaseType != 0 {
			pp.LeaseType = p.LeaseType.String()
		}
		if p.Index > 0 {
			pp.Index, pp.IndexMicros = market.FormatMicros(p.Index, cur), p.Index
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
