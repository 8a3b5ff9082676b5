package market

import (
	"errors"
	"fmt"
	"time"
)

// Matching and fill errors. Each is returned wrapped with detail (except
// ErrWouldCross, returned as is); Reason labels them.
var (
	// ErrWouldCross is returned by Match for a post-only order that would
	// trade; rest it with Add instead, or drop it.
	ErrWouldCross = errors.New("market: post-only order would trade")
	// ErrOverfill is returned when a fill is larger than an order's
	// remaining quantity, or touches an order already filled.
	ErrOverfill = errors.New("market: fill exceeds an order's remaining quantity")
	// ErrSelfMatch is returned when a fill's buyer is its provider.
	ErrSelfMatch = errors.New("market: buyer and provider are the same peer")
	// ErrBadFill is returned when a fill is malformed or contradicts the
	// orders it names (side, maker, price or lease type).
	ErrBadFill = errors.New("market: fill malformed or inconsistent with its orders")
)

// Match is one trade Match proposes against a resting order. The network
// layer agrees it with the maker point to point, then every replica applies
// the agreed Fill.
type Match struct {
	OrderID   string // the resting (maker) order
	Maker     string // its maker's peer ID
	Quantity  uint32
	Price     int64     // the resting order's price: the trade price
	LeaseType LeaseType // the ask's lease type
}

// Fill is a trade both parties signed. Every replica applies it to its book
// (ApplyFill) and its index (Index.Add).
type Fill struct {
	ID               string // CID of the doubly-signed fill
	Market, Currency string
	BidID, AskID     string
	Buyer, Provider  string // peer IDs
	Quantity         uint32
	Price            int64 // micro-units per GPU-hour
	LeaseType        LeaseType
	Time             time.Time
}

// Fill returns the fill m becomes once agreed, taken by taker at time at.
// The caller sets ID to the CID of the doubly-signed fill.
func (m Match) Fill(taker *Order, at time.Time) Fill {
	f := Fill{
		Market: taker.Market, Currency: taker.Currency,
		Quantity: m.Quantity, Price: m.Price, LeaseType: m.LeaseType, Time: at,
	}
	if taker.Side == Bid {
		f.BidID, f.Buyer, f.AskID, f.Provider = taker.ID, taker.Maker, m.OrderID, m.Maker
	} else {
		f.BidID, f.Buyer, f.AskID, f.Provider = m.OrderID, m.Maker, taker.ID, taker.Maker
	}
	return f
}

// Match proposes the trades the node's own order o would make against the
// resting opposite orders, in price-time priority, at each resting order's
// price. It does not change the book.
//
// A resting order is passed over when it has expired, belongs to o's maker
// (self-match prevention), fails the bid's constraints or duration, or is
// all-or-none and cannot be taken whole. An all-or-none o gets matches only
// if they fill it completely. A post-only o that would trade gets
// ErrWouldCross. If o itself rests in the book, only its remaining quantity
// is matched (ErrDuplicate once it is filled or cancelled). What Match does
// not fill is the caller's to rest with Add (standing orders) or drop (IOC).
func (b *Book) Match(o *Order, now time.Time) ([]Match, error) {
	return b.MatchAppend(nil, o, now)
}

// MatchAppend is Match appending to dst, for callers that reuse a buffer.
func (b *Book) MatchAppend(dst []Match, o *Order, now time.Time) ([]Match, error) {
	if o.Market != b.market || o.Currency != b.currency {
		return dst, fmt.Errorf("%w: order for %s in %s, book is %s in %s", ErrWrongBook, o.Market, o.Currency, b.market, b.currency)
	}
	if err := o.validate(now); err != nil {
		return dst, err
	}
	want := o.Quantity
	if e, ok := b.orders[o.ID]; ok && o.ID != "" {
		want = e.remaining
	} else if t, _, ok := b.tombs.get(o.ID); ok && o.ID != "" {
		if t.state != tombEarly {
			return dst, fmt.Errorf("%w: order %s was already filled or cancelled", ErrDuplicate, o.ID)
		}
		if t.side == o.Side && t.maker == o.Maker {
			if t.filled >= want {
				return dst, fmt.Errorf("%w: order %s is already filled", ErrDuplicate, o.ID)
			}
			want -= t.filled
		}
	}
	return b.match(dst, o, want, now.UnixNano(), nil)
}

// crosses reports whether a taker on side at price trades with a resting
// order at resting.
func crosses(side Side, price, resting int64) bool {
	if side == Bid {
		return price >= resting
	}
	return price <= resting
}

// match appends o's matches for up to want GPUs. used, when not nil, holds
// quantities of resting orders already promised to other proposals.
func (b *Book) match(dst []Match, o *Order, want uint32, now int64, used map[*entry]uint32) ([]Match, error) {
	start := len(dst)
	opp := b.sideOf(o.Side.Opposite())
	left := want
	var cur regionCursor
	for i := len(opp.levels) - 1; i >= 0 && left > 0; i-- {
		l := opp.levels[i]
		if !crosses(o.Side, o.Price, l.price) {
			break
		}
		// A bid constrained to regions visits only the asks in them.
		indexed := o.Side == Bid && len(o.Constraints.Regions) > 0 && cur.reset(l, o.Constraints.Regions)
		e := l.head
		if indexed {
			e = cur.next()
		}
		for ; e != nil && left > 0; e = nextOf(e, indexed, &cur) {
			if e.exp <= now || e.o.Maker == o.Maker {
				continue
			}
			avail := e.remaining
			if used != nil {
				avail -= used[e]
			}
			if avail == 0 || (e.o.AllOrNone && (avail != e.remaining || avail > left)) {
				continue
			}
			bid, ask := o, &e.o
			if o.Side == Ask {
				bid, ask = ask, bid
			}
			if !accepts(bid, ask) {
				continue
			}
			q := min(avail, left)
			dst = append(dst, Match{OrderID: e.o.ID, Maker: e.o.Maker, Quantity: q, Price: l.price, LeaseType: ask.LeaseType})
			left -= q
		}
	}
	if o.AllOrNone && left > 0 {
		return dst[:start], nil
	}
	if o.PostOnly && len(dst) > start {
		return dst[:start], ErrWouldCross
	}
	return dst, nil
}

// nextOf is the order after e: in its level's FIFO, or with indexed in the
// cursor over the accepted regions.
func nextOf(e *entry, indexed bool, cur *regionCursor) *entry {
	if indexed {
		return cur.next()
	}
	return e.next
}

// Cross is what one of a node's resting orders would take now.
type Cross struct {
	OrderID string // the node's resting order, the taker
	Matches []Match
}

// Crossing lists, for maker's resting orders that have become crossable (a
// new opposite order arrived at or through their price), the trades each
// would take, as Match proposes them. Proposals do not overlap: a resting
// order promised to one of maker's orders is not offered to the next.
// Post-only orders never take and are left out. Bids come first, then asks,
// each in priority order.
func (b *Book) Crossing(maker string, now time.Time) []Cross {
	n := now.UnixNano()
	var out []Cross
	var used map[*entry]uint32
	for _, side := range [2]Side{Bid, Ask} {
		own, opp := b.sideOf(side), b.sideOf(side.Opposite())
		oppBest, ok := opp.best()
		if !ok {
			continue
		}
		for i := len(own.levels) - 1; i >= 0; i-- {
			l := own.levels[i]
			if !crosses(side, l.price, oppBest) {
				break
			}
			for e := l.head; e != nil; e = e.next {
				if e.o.Maker != maker || e.o.PostOnly || e.exp <= n {
					continue
				}
				if used == nil {
					used = make(map[*entry]uint32)
				}
				ms, _ := b.match(nil, &e.o, e.remaining, n, used)
				if len(ms) == 0 {
					continue
				}
				for _, m := range ms {
					used[b.orders[m.OrderID]] += m.Quantity
				}
				out = append(out, Cross{OrderID: e.o.ID, Matches: ms})
			}
		}
	}
	return out
}

// ApplyFill applies an agreed fill: both orders lose the fill's quantity and
// leave the book once filled, and the spot price moves if this is the
// latest fill. Applying a fill ID again changes nothing and returns
// ErrDuplicate, which callers treat as a no-op.
//
// It refuses a fill larger than an order's remaining quantity or touching an
// order already filled (ErrOverfill), one whose side, maker, price (the ask
// price <= fill price <= the bid price) or lease type contradicts a known
// order (ErrBadFill), and a self-trade (ErrSelfMatch); a refused fill
// changes nothing. Orders this replica does not know are fine (a late
// joiner records the print): the quantity is remembered and deducted if the
// order arrives later. A fill for a cancelled order only records the print.
// All-or-none is not enforced here: it governs proposals, and a fill both
// parties signed is a fact.
func (b *Book) ApplyFill(f Fill) error {
	if f.Market != b.market || f.Currency != b.currency {
		return fmt.Errorf("%w: fill for %s in %s, book is %s in %s", ErrWrongBook, f.Market, f.Currency, b.market, b.currency)
	}
	if err := validateFill(&f); err != nil {
		return err
	}
	if _, _, ok := b.fills.get(f.ID); ok {
		return fmt.Errorf("%w: fill %s already applied", ErrDuplicate, f.ID)
	}
	bid, ask := b.orders[f.BidID], b.orders[f.AskID]
	if err := b.checkLeg(bid, f.BidID, Bid, f.Buyer, f.Quantity); err != nil {
		return err
	}
	if err := b.checkLeg(ask, f.AskID, Ask, f.Provider, f.Quantity); err != nil {
		return err
	}
	if bid != nil && f.Price > bid.o.Price {
		return fmt.Errorf("%w: price %d above bid %s at %d", ErrBadFill, f.Price, f.BidID, bid.o.Price)
	}
	if ask != nil && (f.Price < ask.o.Price || f.LeaseType != ask.o.LeaseType) {
		return fmt.Errorf("%w: %s at %d against ask %s, %s at %d", ErrBadFill, f.LeaseType, f.Price, f.AskID, ask.o.LeaseType, ask.o.Price)
	}
	b.applyLeg(bid, f.BidID, Bid, f.Buyer, &f)
	b.applyLeg(ask, f.AskID, Ask, f.Provider, &f)
	b.fills.put(f.ID, f.Time.UnixNano()+int64(fillMemory), struct{}{})
	b.shed(minTime)
	if !b.hasLast || f.Time.After(b.last.Time) || (f.Time.Equal(b.last.Time) && f.ID > b.last.ID) {
		b.last, b.hasLast = f, true
	}
	return nil
}

// validateFill checks a fill's own fields.
func validateFill(f *Fill) error {
	switch {
	case f.ID == "" || len(f.ID) > MaxOrderIDLen:
		return fmt.Errorf("%w: ID of %d bytes", ErrBadFill, len(f.ID))
	case f.BidID == "" || f.AskID == "" || f.BidID == f.AskID || len(f.BidID) > MaxOrderIDLen || len(f.AskID) > MaxOrderIDLen:
		return fmt.Errorf("%w: order IDs %q and %q", ErrBadFill, f.BidID, f.AskID)
	case f.Buyer == "" || f.Provider == "" || len(f.Buyer) > MaxMakerLen || len(f.Provider) > MaxMakerLen:
		return fmt.Errorf("%w: buyer %q, provider %q", ErrBadFill, f.Buyer, f.Provider)
	case f.Buyer == f.Provider:
		return fmt.Errorf("%w: %s", ErrSelfMatch, f.Buyer)
	case f.Quantity == 0 || f.Quantity > MaxOrderQuantity:
		return fmt.Errorf("%w: %d GPUs", ErrBadFill, f.Quantity)
	case f.Price <= 0 || f.Price > MaxPriceMicros:
		return fmt.Errorf("%w: price %d micros", ErrBadFill, f.Price)
	case !f.LeaseType.valid():
		return fmt.Errorf("%w: lease type %d", ErrBadFill, f.LeaseType)
	case f.Time.Unix() < 0 || f.Time.Unix() > 1<<33:
		return fmt.Errorf("%w: time %s", ErrBadFill, f.Time)
	}
	return nil
}

func (b *Book) checkLeg(e *entry, id string, side Side, maker string, q uint32) error {
	if e != nil {
		if e.o.Side != side || e.o.Maker != maker {
			return fmt.Errorf("%w: order %s is %s's %s", ErrBadFill, id, e.o.Maker, e.o.Side)
		}
		if q > e.remaining {
			return fmt.Errorf("%w: %d GPUs against %d left on %s", ErrOverfill, q, e.remaining, id)
		}
		return nil
	}
	t, _, ok := b.tombs.get(id)
	if !ok {
		return nil
	}
	if t.side != side || t.maker != maker {
		return fmt.Errorf("%w: order %s is %s's %s", ErrBadFill, id, t.maker, t.side)
	}
	switch t.state {
	case tombFilled:
		return fmt.Errorf("%w: order %s is already filled", ErrOverfill, id)
	case tombEarly:
		if uint64(t.filled)+uint64(q) > MaxOrderQuantity {
			return fmt.Errorf("%w: %d GPUs already filled on unseen order %s", ErrOverfill, t.filled, id)
		}
	}
	return nil
}

func (b *Book) applyLeg(e *entry, id string, side Side, maker string, f *Fill) {
	if e != nil {
		e.remaining -= f.Quantity
		e.lvl.qty -= uint64(f.Quantity)
		if e.remaining == 0 {
			b.kill(e, tombFilled)
		}
		return
	}
	t, exp, ok := b.tombs.get(id)
	if ok && t.state != tombEarly {
		return // cancelled: the print stands, the book has nothing to reduce
	}
	if !ok {
		t = tomb{state: tombEarly, side: side, maker: maker}
		exp = f.Time.UnixNano() + int64(fillMemory)
	}
	t.filled += f.Quantity
	b.tombs.put(id, exp, t)
}

// Spot returns the spot price: the price of the latest applied fill (by
// fill time, ties broken by the larger fill ID). ok is false before any.
func (b *Book) Spot() (price int64, ok bool) { return b.last.Price, b.hasLast }

// LastFill returns the fill that set the spot price.
func (b *Book) LastFill() (Fill, bool) { return b.last, b.hasLast }
