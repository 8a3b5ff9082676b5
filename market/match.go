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
	if err := b.admit(o, now); err != nil {
		return dst, err
	}
	want := o.Quantity
	if o.ID != "" {
		h := b.hash(o.ID)
		if e := b.orders.get(h, o.ID); e != nil {
			want = e.remaining
		} else if rec, ok := b.tombs.get(h, o.ID); ok {
			if recState(rec) != tombEarly {
				return dst, ErrDuplicate
			}
			if recSide(rec) == o.Side && recMaker(rec) == o.Maker {
				if recFilled(rec) >= want {
					return dst, ErrDuplicate
				}
				want -= recFilled(rec)
			}
		}
	}
	dst, _, err := b.match(dst, nil, false, o, want, now.UnixNano(), nil)
	return dst, err
}

// crosses reports whether a taker on side at price trades with a resting
// order at resting.
func crosses(side Side, price, resting int64) bool {
	if side == Bid {
		return price >= resting
	}
	return price <= resting
}

// match appends o's matches for up to want GPUs, and with track their
// resting entries to ents. used, when not nil, holds quantities of
// resting orders already promised to other proposals.
func (b *Book) match(dst []Match, ents []*entry, track bool, o *Order, want uint32, now int64, used map[*entry]uint32) ([]Match, []*entry, error) {
	start, estart := len(dst), len(ents)
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
			if track {
				ents = append(ents, e)
			}
			left -= q
		}
	}
	if o.AllOrNone && left > 0 {
		return dst[:start], ents[:estart], nil
	}
	if o.PostOnly && len(dst) > start {
		return dst[:start], ents[:estart], ErrWouldCross
	}
	return dst, ents, nil
}

// Take is what a replica does with its own new order o in one pass, the
// path of an order that trades at once: Match, then each proposal agreed
// and applied as a fill at now, then the remainder rested (standing order)
// or dropped (immediate-or-cancel). It validates o once and probes the
// book's memory once for it; the book is left as Match, ApplyFill of each
// agreed fill and Add of the remainder would leave it, except that a taker
// filled completely (or an IOC that traded) is remembered as filled until
// its expiry. The fills applied are appended to dst.
//
// agree is asked for each proposal in turn and returns the agreed fill's
// ID (the CID of the doubly-signed fill), or "" when the maker declines
// (the proposal is skipped and the quantity stays with the taker); it must
// not change the book. o must carry an ID. Take refuses what Match or Add would refuse before
// anything trades: o is invalid, for another book, resting, remembered
// (ErrDuplicate), its client key is taken, or it is post-only and would
// cross (ErrWouldCross). A fill ID already applied stops it there with
// ErrDuplicate: fills applied so far stand and nothing rests.
func (b *Book) Take(dst []Fill, o *Order, now time.Time, agree func(*Match) string) ([]Fill, error) {
	if o.ID == "" {
		return dst, fmt.Errorf("%w: no ID", ErrOrderSchema)
	}
	h := b.early(o)
	if err := b.admit(o, now); err != nil {
		return dst, err
	}
	prior, rec, err := b.prior(o, h)
	if err != nil {
		return dst, err
	}
	if prior >= o.Quantity {
		return dst, ErrDuplicate
	}
	if err := b.keyFree(o); err != nil {
		return dst, err
	}
	n := now.UnixNano()
	var took uint32
	ms, ents, err := b.match(b.matches[:0], b.takes[:0], true, o, o.Quantity-prior, n, nil)
	b.matches, b.takes = ms, ents
	if err != nil {
		return dst, err
	}
	for k := range ms {
		m := &ms[k]
		id := agree(m)
		if id == "" {
			continue
		}
		fh := b.hash(id)
		// Load the fill's index line and the resting order's tomb line
		// together, and check the fill while they come: the misses
		// overlap each other and the work.
		fi, ff := b.fills.lines(fh)
		ti, tf := b.tombs.lines(ents[k].h)
		prefetch4(fi, ff, ti, tf)
		f := m.Fill(o, now)
		f.ID = id
		if err := validateFill(&f); err != nil {
			return dst, err
		}
		r, ok := b.fills.lookup(fh, id)
		if ok {
			return dst, ErrDuplicate
		}
		b.reduce(ents[k], m.Quantity)
		b.record(fh, &f, r == nil)
		took += m.Quantity
		dst = append(dst, f)
	}
	clear(ents) // drop the pointers: the entries may be recycled
	switch filled := prior + took; {
	case filled == o.Quantity || (o.TimeInForce == IOC && took > 0):
		b.bury(o.ID, h, o.Expires.UnixNano(), rec == nil, tomb{state: tombFilled, side: o.Side, maker: o.Maker, key: o.ClientKey})
	case o.TimeInForce == GTC:
		if prior > 0 {
			b.tombs.del(h, o.ID)
			rec = nil
		}
		b.rest(o, h, filled, rec != nil)
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
				ms, ents, _ := b.match(nil, nil, true, &e.o, e.remaining, n, used)
				if len(ms) == 0 {
					continue
				}
				for k, m := range ms {
					used[ents[k]] += m.Quantity
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
	fh := b.hash(f.ID)
	r, ok := b.fills.lookup(fh, f.ID)
	if ok {
		return ErrDuplicate
	}
	bh, ah := b.hash(f.BidID), b.hash(f.AskID)
	bid, ask := b.orders.get(bh, f.BidID), b.orders.get(ah, f.AskID)
	if err := b.checkLeg(bid, bh, f.BidID, Bid, f.Buyer, f.Quantity); err != nil {
		return err
	}
	if err := b.checkLeg(ask, ah, f.AskID, Ask, f.Provider, f.Quantity); err != nil {
		return err
	}
	if bid != nil && f.Price > bid.o.Price {
		return fmt.Errorf("%w: price %d above bid %s at %d", ErrBadFill, f.Price, f.BidID, bid.o.Price)
	}
	if ask != nil && (f.Price < ask.o.Price || f.LeaseType != ask.o.LeaseType) {
		return fmt.Errorf("%w: %s at %d against ask %s, %s at %d", ErrBadFill, f.LeaseType, f.Price, f.AskID, ask.o.LeaseType, ask.o.Price)
	}
	b.applyLeg(bid, bh, f.BidID, Bid, f.Buyer, &f)
	b.applyLeg(ask, ah, f.AskID, Ask, f.Provider, &f)
	b.record(fh, &f, r == nil)
	return nil
}

// record remembers an applied fill (handle fh) and moves the spot price if
// it is the latest; fresh says the memory holds no record of its ID,
// expired or not.
func (b *Book) record(fh uint64, f *Fill, fresh bool) {
	b.fills.put(fh, f.ID, f.Time.UnixNano()+int64(fillMemory), fresh)
	if !b.hasLast || f.Time.After(b.last.Time) || (f.Time.Equal(b.last.Time) && f.ID > b.last.ID) {
		b.last, b.hasLast = *f, true
	}
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

func (b *Book) checkLeg(e *entry, h uint64, id string, side Side, maker string, q uint32) error {
	if e != nil {
		if e.o.Side != side || e.o.Maker != maker {
			return fmt.Errorf("%w: order %s is %s's %s", ErrBadFill, id, e.o.Maker, e.o.Side)
		}
		if q > e.remaining {
			return fmt.Errorf("%w: %d GPUs against %d left on %s", ErrOverfill, q, e.remaining, id)
		}
		return nil
	}
	rec, ok := b.tombs.get(h, id)
	if !ok {
		return nil
	}
	if s, m := recSide(rec), recMaker(rec); s != side || m != maker {
		return fmt.Errorf("%w: order %s is %s's %s", ErrBadFill, id, m, s)
	}
	switch recState(rec) {
	case tombFilled:
		return fmt.Errorf("%w: order %s is already filled", ErrOverfill, id)
	case tombEarly:
		if f := recFilled(rec); uint64(f)+uint64(q) > MaxOrderQuantity {
			return fmt.Errorf("%w: %d GPUs already filled on unseen order %s", ErrOverfill, f, id)
		}
	}
	return nil
}

func (b *Book) applyLeg(e *entry, h uint64, id string, side Side, maker string, f *Fill) {
	if e != nil {
		b.reduce(e, f.Quantity)
		return
	}
	rec, ok := b.tombs.get(h, id)
	if ok && recState(rec) != tombEarly {
		return // cancelled: the print stands, the book has nothing to reduce
	}
	if ok {
		addFilled(rec, f.Quantity)
		return
	}
	b.bury(id, h, f.Time.UnixNano()+int64(fillMemory), false, tomb{state: tombEarly, side: side, maker: maker, filled: f.Quantity})
}

// reduce takes q GPUs off resting order e, which leaves the book once filled.
func (b *Book) reduce(e *entry, q uint32) {
	e.remaining -= q
	e.lvl.qty -= uint64(q)
	if e.remaining == 0 {
		b.kill(e, tombFilled)
	}
}

// Spot returns the spot price: the price of the latest applied fill (by
// fill time, ties broken by the larger fill ID). ok is false before any.
func (b *Book) Spot() (price int64, ok bool) { return b.last.Price, b.hasLast }

// LastFill returns the fill that set the spot price.
func (b *Book) LastFill() (Fill, bool) { return b.last, b.hasLast }
