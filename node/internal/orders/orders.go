// Package orders owns this node's own orders: it builds, signs and
// places them (taking what they cross first, through the take protocol,
// then resting the rest on the book and gossiping it), and keeps what
// became of each: its status, fills and last error. It answers the API's
// order methods (place, view, list, page, cancel) and re-queues a
// preempted spot bid that asked for it.
//
// Its lock (Own.mu) is a leaf: taken after the trade lock and the books
// lock (a fill records itself here from inside the books lock, Filled),
// it is held across no call out and takes no other lock. A view reads the
// order under it and explains it from the book after it is released
// (TestOrderViewWhileFillsApply in package node holds it to this).
//
// An order's status, as the API shows it:
//
//	status     meaning                                          next
//	taking     placed, taking what it crosses                   resting (GTC), done (IOC), filled
//	resting    on the book                                      filled, cancelled, expired (shown once
//	                                                            past its expiry with nothing left)
//	filled     its whole quantity filled                        -
//	cancelled  withdrawn by this node (Cancel)                  -
//	done       IOC: the remainder dropped after taking          -
package orders

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/executor"
	"github.com/suanli/suanli/node/internal/exchange"
	"github.com/suanli/suanli/node/internal/provider"
	"github.com/suanli/suanli/node/internal/trade"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// DefaultTTL is how long an order rests when not told.
const DefaultTTL = time.Hour

// Dashboard page sizes of Page.
const (
	DefaultPageSize = 50
	MaxPageSize     = 500
)

// Node is what the own orders need of the rest of the node.
type Node interface {
	// JoinMarket joins a market's book (its topic and open orders).
	JoinMarket(ctx context.Context, mkt string) error
	// TakeLoop takes what o, sealed in env, crosses (trade.Trader.TakeLoop).
	TakeLoop(ctx context.Context, o *market.Order, env []byte)
	// Published is the provider's current offer (nil: none); NoGPU why
	// this node has no GPUs.
	Published() *proto.Offer
	NoGPU() error
	// ReservedAskPrice is the price of a reserved ask with no price for
	// leases of at least minDuration.
	ReservedAskPrice(minDuration string) (string, error)
	// FreeGPUs and FreeGPUsFor list the provider's GPUs in mkt free now,
	// and free from from to end.
	FreeGPUs(mkt string) ([]string, error)
	FreeGPUsFor(mkt string, from, end time.Time) ([]string, error)
	// Preemptible lists the spot leases an ask in mkt may preempt.
	Preemptible(mkt string) []market.Preemptible
	// AskFacts checks an ask against its maker's offer seq and fills
	// its facts.
	AskFacts(ctx context.Context, o *market.Order, seq uint64) error
	// PlaceResale places an ask reselling a reserved lease (package resale).
	PlaceResale(ctx context.Context, req api.OrderRequest) (api.OrderView, error)
	// Stand keeps the ask id standing as req asks (provider.Standing).
	Stand(id string, req api.OrderRequest)
}

// Config is what Own is built from.
type Config struct {
	Self  peer.ID
	Key   crypto.PrivKey
	Books *exchange.Books
	Now   func() time.Time
	Log   *slog.Logger
	// Ctx ends with the node; Spawn runs work the node's Close waits for.
	Ctx   context.Context
	Spawn func(func()) bool
	// PreemptMargin is the basis points a spot trade must pay more to
	// preempt a running spot lease.
	PreemptMargin int64
	Node          Node
}

// Own is this node's own orders. Its methods are safe for concurrent use.
type Own struct {
	c  Config
	mu sync.Mutex // guards own and every order in it; a leaf
	// own are the orders by ID.
	own map[string]*order
}

// order is one of this node's orders and what became of it.
type order struct {
	order    market.Order
	env      []byte
	status   string // taking, resting, filled, cancelled, done
	fills    []api.TradeView
	err      string
	workload executor.Spec    // bids: what the buyer asks the provider to run
	req      api.OrderRequest // as placed, for re-queueing (bids asking for it)
	requeue  bool
	stand    string // the standing ask it was placed for
}

// New makes the node's own orders, none yet.
func New(c Config) *Own { return &Own{c: c, own: map[string]*order{}} }

// TradeView is what the API shows of a fill and its lease.
func TradeView(f market.Fill, l *proto.Lease) api.TradeView {
	v := api.TradeView{
		ID: f.ID, Market: f.Market, Price: market.FormatMicros(f.Price, f.Currency), Currency: f.Currency,
		Count: f.Quantity, Buyer: f.Buyer, Provider: f.Provider, LeaseType: f.LeaseType.String(), Time: f.Time.UTC(),
	}
	if l != nil {
		v.Lease, v.GPUs = l.Id, l.Gpus
		// A resale: the ask's maker holds the lease it resold; the new
		// lease is the provider's, as are its GPUs.
		if p, err := peer.IDFromBytes(l.Provider); err == nil && p.String() != f.Provider && f.Provider != "" {
			v.Provider, v.Reseller = p.String(), f.Provider
		}
	}
	return v
}

// Resales are this node's fills of resale asks, its own or taken, in a
// market: they are agreed between their three parties and not gossiped,
// so the replicas' trades lack them.
func (w *Own) Resales(mkt string) []api.TradeView {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []api.TradeView
	for _, oo := range w.own {
		for _, t := range oo.fills {
			if t.Reseller != "" && t.Market == mkt && !slices.ContainsFunc(out, func(u api.TradeView) bool { return u.ID == t.ID }) {
				out = append(out, t)
			}
		}
	}
	return out
}

// workloadOf is what the request asks the provider to run.
func workloadOf(req api.OrderRequest) executor.Spec {
	return executor.Spec{Command: req.Exec, Image: req.Image, Ports: req.Ports, SSHKey: req.SSHKey, WritableRoot: req.WritableRoot}
}

// build turns a request into a signed order of this node.
func (w *Own) build(req api.OrderRequest) (*market.Order, *proto.Order, error) {
	now := w.c.Now()
	cur := cmp.Or(req.Currency, "USD")
	if req.Price == "" && req.Side == "ask" && req.LeaseType == "reserved" {
		p, err := w.c.Node.ReservedAskPrice(req.MinDuration)
		if err != nil {
			return nil, nil, err
		}
		req.Price = p
	}
	price, err := market.ParseMoney(req.Price, cur)
	if err != nil {
		return nil, nil, api.BadRequest("price: %v", err)
	}
	side, err := market.ParseSide(req.Side)
	if err != nil {
		return nil, nil, api.BadRequest("%v", err)
	}
	lt, err := market.ParseLeaseType(cmp.Or(req.LeaseType, "spot"))
	if err != nil {
		return nil, nil, api.BadRequest("%v", err)
	}
	dur := func(s, def string, what string) (time.Duration, error) {
		d, err := time.ParseDuration(cmp.Or(s, def))
		if err != nil {
			return 0, api.BadRequest("%s: %v", what, err)
		}
		return d, nil
	}
	expires, err := dur(req.Expires, DefaultTTL.String(), "expires")
	if err != nil {
		return nil, nil, err
	}
	var nonce [8]byte
	rand.Read(nonce[:])
	po := &proto.Order{
		Maker:         []byte(w.c.Self),
		Market:        req.Market,
		Currency:      cur,
		Quantity:      req.Count,
		PriceMicros:   price.Micros,
		LeaseType:     p2p.LeaseTypeToProto(lt),
		CreatedUnixMs: now.UnixMilli(),
		ExpiresUnixMs: now.Add(expires).UnixMilli(),
		Nonce:         binary.BigEndian.Uint64(nonce[:]),
		PostOnly:      req.PostOnly,
		AllOrNone:     req.AllOrNone,
		ClientKey:     req.ClientKey,
	}
	if req.IOC {
		po.TimeInForce = proto.TimeInForce_TIME_IN_FORCE_IOC
	}
	if req.Start != "" {
		start, err := market.ParseStart(req.Start, now)
		if err != nil {
			return nil, nil, api.BadRequest("start: %v", err)
		}
		po.StartUnixMs = start.UnixMilli()
	}
	switch side {
	case market.Bid:
		po.Side = proto.Side_SIDE_BID
		d, err := dur(req.Duration, "", "duration")
		if err != nil {
			return nil, nil, err
		}
		po.DurationS = int64(d / time.Second)
		po.Constraints = &proto.Constraints{Regions: req.Regions, MinAttestation: req.MinAttestation, MinMemoryBytes: req.MinVRAMGiB << 30}
	case market.Ask:
		po.Side = proto.Side_SIDE_ASK
		offer := w.c.Node.Published()
		if offer == nil {
			return nil, nil, fmt.Errorf("%w: an ask needs a published offer (%v)", api.ErrNoGPUs, w.c.Node.NoGPU())
		}
		po.OfferSeq = offer.Seq
		minD, err := dur(req.MinDuration, provider.DefaultMinLease.String(), "min-duration")
		if err != nil {
			return nil, nil, err
		}
		maxD, err := dur(req.MaxDuration, provider.DefaultMaxLease.String(), "max-duration")
		if err != nil {
			return nil, nil, err
		}
		po.MinDurationS, po.MaxDurationS = int64(minD/time.Second), int64(maxD/time.Second)
	}
	o, err := p2p.OrderFromProto(po)
	if err != nil {
		return nil, nil, api.BadRequest("%v", err)
	}
	if err := o.Validate(now); err != nil {
		return nil, nil, api.BadRequest("%v", err)
	}
	if side == market.Ask {
		free, err := w.c.Node.FreeGPUs(o.Market)
		if !o.Start.IsZero() && o.Start.After(now) {
			free, err = w.c.Node.FreeGPUsFor(o.Market, o.Start, o.Start.Add(o.MinDuration))
		}
		if err != nil {
			return nil, nil, err
		}
		// An ask may sell GPUs that spot leases hold when a take of it
		// would preempt them (the candidates ChoosePreempted picks from).
		avail := len(free) + market.PreemptibleGPUs(w.c.Node.Preemptible(o.Market), o.LeaseType, o.Price, w.c.PreemptMargin)
		if uint32(avail) < o.Quantity {
			return nil, nil, api.BadRequest("ask for %d GPUs in %s, %d free", o.Quantity, o.Market, avail)
		}
		if err := w.c.Node.AskFacts(context.Background(), o, po.OfferSeq); err != nil {
			return nil, nil, api.BadRequest("%v", err)
		}
	}
	return o, po, nil
}

// Place signs and places a bid or ask: it joins the market, takes
// whatever the order crosses in this node's replica (agreeing each trade
// with its maker), and rests the rest on the book unless it is IOC.
func (w *Own) Place(ctx context.Context, req api.OrderRequest) (api.OrderView, error) {
	if req.Resell != "" {
		return w.c.Node.PlaceResale(ctx, req)
	}
	if wl := workloadOf(req); !wl.Empty() {
		if req.Side != "bid" {
			return api.OrderView{}, api.BadRequest("a workload (exec, image, ports, ssh key) belongs on a bid")
		}
		if err := wl.Validate(); err != nil {
			return api.OrderView{}, api.BadRequest("%v", err)
		}
	}
	if err := provider.CheckReplenish(req); err != nil {
		return api.OrderView{}, err
	}
	if err := w.c.Node.JoinMarket(ctx, req.Market); err != nil {
		return api.OrderView{}, err
	}
	o, po, err := w.build(req)
	if err != nil {
		return api.OrderView{}, err
	}
	env, err := p2p.Seal(w.c.Key, po, proto.MaxBookMessageSize)
	if err != nil {
		return api.OrderView{}, err
	}
	o.ID = proto.CIDOf(env).String()

	var retried string
	var crossErr error
	if err := w.c.Books.With(o.Market, o.Currency, func(s *exchange.Replica) {
		if o.ClientKey != "" {
			if id, ok := s.Book.ClientKey(o.Maker, o.ClientKey); ok {
				retried = id
				return
			}
		}
		if _, err := s.Book.Match(o, w.c.Now()); errors.Is(err, market.ErrWouldCross) {
			crossErr = err
		}
	}); err != nil {
		return api.OrderView{}, api.BadRequest("%v", err)
	}
	if retried != "" {
		return w.Order(retried) // a retried request: the first order stands
	}
	if crossErr != nil {
		return api.OrderView{}, api.BadRequest("post-only order would trade now: %v", crossErr)
	}

	w.mu.Lock()
	if o.ClientKey != "" {
		for _, oo := range w.own {
			if oo.order.ClientKey == o.ClientKey && oo.order.Market == o.Market && oo.order.Currency == o.Currency {
				w.mu.Unlock()
				return w.Order(oo.order.ID)
			}
		}
	}
	w.own[o.ID] = &order{order: *o, env: env, status: "taking", workload: workloadOf(req), req: req, requeue: req.Requeue}
	w.mu.Unlock()

	// Take what crosses first; only then rest the remainder, so no other
	// node can take this order while it is still taking.
	w.c.Node.TakeLoop(ctx, o, env)
	status := "done"
	if o.TimeInForce == market.GTC {
		var err error
		w.c.Books.With(o.Market, o.Currency, func(s *exchange.Replica) {
			err = s.Rest(o, env, w.c.Now()) // deducts the fills already applied
		})
		switch {
		case err == nil:
			status = "resting"
			ev := &p2p.BookEvent{Kind: p2p.KindOrder, Order: o, OrderProto: po, Envelope: env}
			if err := w.c.Books.Publish(ctx, o.Market, &proto.BookMessage{Body: &proto.BookMessage_Order{Order: env}}, ev); err != nil {
				w.c.Log.Warn("publishing order failed", "order", o.ID, "err", err)
			}
			w.c.Books.Kick(o.Market) // something may have arrived while taking
		case errors.Is(err, market.ErrDuplicate):
			status = "filled"
		default:
			return api.OrderView{}, api.BadRequest("%v", err)
		}
	}
	w.mu.Lock()
	if oo := w.own[o.ID]; oo.status == "taking" {
		oo.status = status
	}
	w.mu.Unlock()
	w.c.Log.Info("order placed", "order", o.ID, "side", o.Side, "market", o.Market, "count", o.Quantity,
		"price", market.FormatMicros(o.Price, o.Currency))
	if req.Replenish {
		w.c.Node.Stand(o.ID, req)
	}
	return w.Order(o.ID)
}

// FilledQty is how much of one of this node's orders has been filled.
func (w *Own) FilledQty(id string) uint32 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var sum uint32
	if oo := w.own[id]; oo != nil {
		for _, t := range oo.fills {
			sum += t.Count
		}
	}
	return sum
}

// Filled records a fill of one of this node's orders (once per fill).
// It is called under the books lock.
func (w *Own) Filled(f market.Fill, l *proto.Lease) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range []string{f.BidID, f.AskID} {
		oo := w.own[id]
		if oo == nil || slices.ContainsFunc(oo.fills, func(t api.TradeView) bool { return t.ID == f.ID }) {
			continue
		}
		oo.fills = append(oo.fills, TradeView(f, l))
		var sum uint32
		for _, t := range oo.fills {
			sum += t.Count
		}
		if sum >= oo.order.Quantity {
			oo.status = "filled"
		}
	}
}

// Cancelled records that resting order id left the book.
func (w *Own) Cancelled(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if oo := w.own[id]; oo != nil && oo.status == "resting" {
		oo.status = "cancelled"
	}
}

// Failed records why one of this node's orders failed to take a match.
func (w *Own) Failed(id string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if oo := w.own[id]; oo != nil {
		oo.err = err.Error()
	}
}

// Envelope is order id as sealed (nil: not this node's).
func (w *Own) Envelope(id string) []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	if oo := w.own[id]; oo != nil {
		return oo.env
	}
	return nil
}

// Workload is what bid asks the provider to run (ok false: not this
// node's bid).
func (w *Own) Workload(bid string) (executor.Spec, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if oo := w.own[bid]; oo != nil {
		return oo.workload, true
	}
	return executor.Spec{}, false
}

// ResaleOf is the lease order resells ("": none, or not this node's).
func (w *Own) ResaleOf(id string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if oo := w.own[id]; oo != nil {
		return oo.req.Resell
	}
	return ""
}

// Add records o, sealed in env and placed by req outside Place (a
// resale's ask), as resting.
func (w *Own) Add(o *market.Order, env []byte, req api.OrderRequest) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.own[o.ID] = &order{order: *o, env: env, status: "resting", req: req}
}

// MarkStanding records that order was placed for the standing ask standing.
func (w *Own) MarkStanding(id, standing string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if oo := w.own[id]; oo != nil {
		oo.stand = standing
	}
}

// RestingAsks counts the GPUs on this node's resting, unexpired asks in a
// market: already on the book.
func (w *Own) RestingAsks(mkt string, now time.Time) uint32 {
	type ref struct{ id, currency string }
	var refs []ref
	w.mu.Lock()
	for id, oo := range w.own {
		if oo.order.Side == market.Ask && oo.order.Market == mkt && (oo.status == "resting" || oo.status == "taking") && oo.order.Expires.After(now) {
			refs = append(refs, ref{id, oo.order.Currency})
		}
	}
	w.mu.Unlock()
	var sum uint32
	for _, r := range refs {
		if _, rem, ok := w.c.Books.Lookup(mkt, r.currency, r.id); ok {
			sum += rem
		}
	}
	return sum
}

// Order returns one of this node's orders.
func (w *Own) Order(id string) (api.OrderView, error) {
	w.mu.Lock()
	oo := w.own[id]
	w.mu.Unlock()
	if oo == nil {
		return api.OrderView{}, fmt.Errorf("%w: %s", api.ErrUnknownOrder, id)
	}
	return w.view(oo), nil
}

// sorted are the orders newest first, ties by ID.
func (w *Own) sorted() []*order {
	w.mu.Lock()
	list := make([]*order, 0, len(w.own))
	for _, oo := range w.own {
		list = append(list, oo)
	}
	w.mu.Unlock()
	slices.SortFunc(list, func(a, b *order) int {
		if c := b.order.Created.Compare(a.order.Created); c != 0 {
			return c
		}
		return strings.Compare(a.order.ID, b.order.ID)
	})
	return list
}

// List lists this node's orders, newest first.
func (w *Own) List() []api.OrderView {
	list := w.sorted()
	out := make([]api.OrderView, 0, len(list))
	for _, oo := range list {
		out = append(out, w.view(oo))
	}
	return out
}

// Page is one page of List, of the orders in status q.Status (all: "").
func (w *Own) Page(q api.PageQuery) (api.OrdersPageView, error) {
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
		limit = DefaultPageSize
	case limit > MaxPageSize:
		limit = MaxPageSize
	}
	// Sort the records first and build views only for the page.
	v := api.OrdersPageView{Offset: q.Offset, Orders: []api.OrderView{}}
	for _, oo := range w.sorted() {
		if q.Status != "" {
			// Status may depend on the book (expired); views are cheap
			// enough for a filter over thousands.
			if w.view(oo).Status != q.Status {
				continue
			}
		}
		if v.Total >= q.Offset && len(v.Orders) < limit {
			v.Orders = append(v.Orders, w.view(oo))
		}
		v.Total++
	}
	return v, nil
}

func (w *Own) view(oo *order) api.OrderView {
	_, remaining, _ := w.c.Books.Lookup(oo.order.Market, oo.order.Currency, oo.order.ID)
	// The own orders' lock is taken after the books lock (a fill records
	// itself here under it), never before: the order is read under it and
	// explained from the book after.
	w.mu.Lock()
	status := oo.status
	if status == "resting" && remaining == 0 && !oo.order.Expires.After(w.c.Now()) {
		status = "expired"
	}
	o := oo.order
	v := api.OrderView{
		ID: o.ID, Side: o.Side.String(), Market: o.Market, Count: o.Quantity, Remaining: remaining,
		Price: market.FormatMicros(o.Price, o.Currency), Currency: o.Currency, LeaseType: o.LeaseType.String(),
		Status: status, Expires: o.Expires.UTC(), Fills: append([]api.TradeView{}, oo.fills...), Error: oo.err,
		Standing: oo.stand,
	}
	w.mu.Unlock()
	if status == "resting" || status == "done" && remaining == 0 && v.Filled() < o.Quantity {
		v.PassedOver = trade.PassedOver(w.c.Books, o, v.Count-v.Filled(), w.c.Now())
	}
	return v
}

// Cancel withdraws one of this node's resting orders and gossips the
// signed cancel.
func (w *Own) Cancel(ctx context.Context, id string) (api.OrderView, error) {
	w.mu.Lock()
	oo := w.own[id]
	w.mu.Unlock()
	if oo == nil {
		return api.OrderView{}, fmt.Errorf("%w: %s", api.ErrUnknownOrder, id)
	}
	me := w.c.Self.String()
	var err error
	w.c.Books.With(oo.order.Market, oo.order.Currency, func(s *exchange.Replica) { err = s.Cancel(id, me) })
	if err != nil {
		return api.OrderView{}, api.BadRequest("cannot cancel %s: %v", id, err)
	}
	w.Cancelled(id)
	c := &proto.Cancel{Maker: []byte(w.c.Self), OrderId: id, Market: oo.order.Market, CreatedUnixMs: w.c.Now().UnixMilli()}
	env, err := p2p.Seal(w.c.Key, c, proto.MaxBookMessageSize)
	if err != nil {
		return api.OrderView{}, err
	}
	ev := &p2p.BookEvent{Kind: p2p.KindCancel, Cancel: c}
	if err := w.c.Books.Publish(ctx, oo.order.Market, &proto.BookMessage{Body: &proto.BookMessage_Cancel{Cancel: env}}, ev); err != nil {
		w.c.Log.Warn("publishing cancel failed", "order", id, "err", err)
	}
	return w.Order(id)
}

// Requeue puts a preempted spot bid that asked for it back on the book
// for what was left of its lease.
func (w *Own) Requeue(bidID string, gpus int, left time.Duration) {
	w.mu.Lock()
	oo := w.own[bidID]
	var req api.OrderRequest
	ok := oo != nil && oo.requeue
	if ok {
		req = oo.req
	}
	w.mu.Unlock()
	left = left.Truncate(time.Second)
	if !ok || left < time.Second {
		return
	}
	req.Duration, req.ClientKey, req.IOC = left.String(), "", false
	if gpus > 0 && uint32(gpus) < req.Count {
		// The bid lost this lease's GPUs, not all it asked for: the
		// rest of it still runs elsewhere, or never filled.
		req.Count = uint32(gpus)
	}
	w.c.Spawn(func() {
		ctx, cancel := context.WithTimeout(w.c.Ctx, time.Minute)
		defer cancel()
		o, err := w.Place(ctx, req)
		if err != nil && !errors.Is(err, context.Canceled) {
			w.c.Log.Warn("re-queueing a preempted bid failed", "bid", bidID, "err", err)
			return
		}
		w.c.Log.Info("preempted bid re-queued", "bid", bidID, "new", o.ID, "duration", req.Duration)
	})
}
