package node

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/internal/exchange"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// defaultOrderTTL is how long an order rests when not told.
const defaultOrderTTL = time.Hour

// ownOrder is one of this node's orders and what became of it.
type ownOrder struct {
	order    market.Order
	env      []byte
	status   string // resting, filled, cancelled, expired, done (IOC remainder dropped)
	fills    []api.TradeView
	err      string
	workload WorkloadSpec     // bids: what the buyer asks the provider to run
	req      api.OrderRequest // as placed, for re-queueing (bids asking for it)
	requeue  bool
	stand    string // the standing ask it was placed for (replenish.go)
}

func tradeView(f market.Fill, l *proto.Lease) api.TradeView {
	v := api.TradeView{
		ID: f.ID, Market: f.Market, Price: market.FormatMicros(f.Price, f.Currency), Currency: f.Currency,
		Count: f.Quantity, Buyer: f.Buyer, Provider: f.Provider, LeaseType: f.LeaseType.String(), Time: f.Time.UTC(),
	}
	if l != nil {
		v.Lease, v.GPUs = l.Id, l.Gpus
	}
	return v
}

// workloadOf is what the request asks the provider to run.
func workloadOf(req api.OrderRequest) WorkloadSpec {
	return WorkloadSpec{Command: req.Exec, Image: req.Image, Ports: req.Ports, SSHKey: req.SSHKey, WritableRoot: req.WritableRoot}
}

// buildOrder turns a request into a signed order of this node.
func (n *Node) buildOrder(req api.OrderRequest) (*market.Order, *proto.Order, error) {
	now := n.now()
	cur := cmpOr(req.Currency, "USD")
	if req.Price == "" && req.Side == "ask" && req.LeaseType == "reserved" {
		p, err := n.reservedAskPrice(req)
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
	lt, err := market.ParseLeaseType(cmpOr(req.LeaseType, "spot"))
	if err != nil {
		return nil, nil, api.BadRequest("%v", err)
	}
	dur := func(s, def string, what string) (time.Duration, error) {
		d, err := time.ParseDuration(cmpOr(s, def))
		if err != nil {
			return 0, api.BadRequest("%s: %v", what, err)
		}
		return d, nil
	}
	expires, err := dur(req.Expires, defaultOrderTTL.String(), "expires")
	if err != nil {
		return nil, nil, err
	}
	var nonce [8]byte
	rand.Read(nonce[:])
	po := &proto.Order{
		Maker:         []byte(n.host.ID()),
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
		start, err := parseStart(req.Start, now)
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
		offer := n.Published()
		if offer == nil {
			return nil, nil, fmt.Errorf("%w: an ask needs a published offer (%v)", api.ErrNoGPUs, n.noGPU)
		}
		po.OfferSeq = offer.Seq
		minD, err := dur(req.MinDuration, defaultMinLease.String(), "min-duration")
		if err != nil {
			return nil, nil, err
		}
		maxD, err := dur(req.MaxDuration, defaultMaxLease.String(), "max-duration")
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
		free, err := n.freeGPUs(o.Market)
		if !o.Start.IsZero() && o.Start.After(now) {
			free, err = n.freeGPUsFor(o.Market, o.Start, o.Start.Add(o.MinDuration))
		}
		if err != nil {
			return nil, nil, err
		}
		// An ask may sell GPUs that spot leases hold when a take of it
		// would preempt them (the candidates ChoosePreempted picks from).
		avail := len(free) + market.PreemptibleGPUs(n.leases.Preemptible(o.Market), o.LeaseType, o.Price, n.preemptMargin)
		if uint32(avail) < o.Quantity {
			return nil, nil, api.BadRequest("ask for %d GPUs in %s, %d free", o.Quantity, o.Market, avail)
		}
		if err := n.askFacts(context.Background(), o, po.OfferSeq); err != nil {
			return nil, nil, api.BadRequest("%v", err)
		}
	}
	return o, po, nil
}

// PlaceOrder signs and places a bid or ask: it joins the market, takes
// whatever the order crosses in this node's replica (agreeing each trade
// with its maker), and rests the rest on the book unless it is IOC.
func (n *Node) PlaceOrder(ctx context.Context, req api.OrderRequest) (_ api.OrderView, err error) {
	defer classified(&err)
	if req.Resell != "" {
		return n.placeResale(ctx, req) // package resale
	}
	if w := workloadOf(req); !w.Empty() {
		if req.Side != "bid" {
			return api.OrderView{}, api.BadRequest("a workload (exec, image, ports, ssh key) belongs on a bid")
		}
		if err := w.Validate(); err != nil {
			return api.OrderView{}, api.BadRequest("%v", err)
		}
	}
	if err := checkReplenish(req); err != nil {
		return api.OrderView{}, err
	}
	if err := n.JoinMarket(ctx, req.Market); err != nil {
		return api.OrderView{}, err
	}
	o, po, err := n.buildOrder(req)
	if err != nil {
		return api.OrderView{}, err
	}
	env, err := p2p.Seal(n.key, po, proto.MaxBookMessageSize)
	if err != nil {
		return api.OrderView{}, err
	}
	o.ID = proto.CIDOf(env).String()

	var retried string
	var crossErr error
	if err := n.books.With(o.Market, o.Currency, func(s *exchange.Replica) {
		if o.ClientKey != "" {
			if id, ok := s.Book.ClientKey(o.Maker, o.ClientKey); ok {
				retried = id
				return
			}
		}
		if _, err := s.Book.Match(o, n.now()); errors.Is(err, market.ErrWouldCross) {
			crossErr = err
		}
	}); err != nil {
		return api.OrderView{}, api.BadRequest("%v", err)
	}
	if retried != "" {
		return n.Order(ctx, retried) // a retried request: the first order stands
	}
	if crossErr != nil {
		return api.OrderView{}, api.BadRequest("post-only order would trade now: %v", crossErr)
	}

	n.ownMu.Lock()
	if o.ClientKey != "" {
		for _, oo := range n.own {
			if oo.order.ClientKey == o.ClientKey && oo.order.Market == o.Market && oo.order.Currency == o.Currency {
				n.ownMu.Unlock()
				return n.Order(ctx, oo.order.ID)
			}
		}
	}
	n.own[o.ID] = &ownOrder{order: *o, env: env, status: "taking", workload: workloadOf(req), req: req, requeue: req.Requeue}
	n.ownMu.Unlock()

	// Take what crosses first; only then rest the remainder, so no other
	// node can take this order while it is still taking.
	n.takeLoop(ctx, o, env)
	status := "done"
	if o.TimeInForce == market.GTC {
		var err error
		n.books.With(o.Market, o.Currency, func(s *exchange.Replica) {
			err = s.Rest(o, env, n.now()) // deducts the fills already applied
		})
		switch {
		case err == nil:
			status = "resting"
			ev := &p2p.BookEvent{Kind: p2p.KindOrder, Order: o, OrderProto: po, Envelope: env}
			if err := n.publishBook(ctx, o.Market, &proto.BookMessage{Body: &proto.BookMessage_Order{Order: env}}, ev); err != nil {
				n.log.Warn("publishing order failed", "order", o.ID, "err", err)
			}
			n.kickMarket(o.Market) // something may have arrived while taking
		case errors.Is(err, market.ErrDuplicate):
			status = "filled"
		default:
			return api.OrderView{}, api.BadRequest("%v", err)
		}
	}
	n.ownMu.Lock()
	if oo := n.own[o.ID]; oo.status == "taking" {
		oo.status = status
	}
	n.ownMu.Unlock()
	n.log.Info("order placed", "order", o.ID, "side", o.Side, "market", o.Market, "count", o.Quantity,
		"price", market.FormatMicros(o.Price, o.Currency))
	if req.Replenish {
		n.standAsk(o.ID, req) // replenish.go
	}
	return n.Order(ctx, o.ID)
}

// ownFilledQty is how much of one of this node's orders has been filled.
func (n *Node) ownFilledQty(id string) uint32 {
	n.ownMu.Lock()
	defer n.ownMu.Unlock()
	var sum uint32
	if oo := n.own[id]; oo != nil {
		for _, t := range oo.fills {
			sum += t.Count
		}
	}
	return sum
}

// freeGPUs lists this provider's GPUs in a market not reserved by a lease
// (provider.Provider.FreeGPUs).
func (n *Node) freeGPUs(mkt string) ([]string, error) { return n.prov.FreeGPUs(mkt) }

// ownFilled records a fill of one of this node's orders.
func (n *Node) ownFilled(f market.Fill, l *proto.Lease) {
	n.ownMu.Lock()
	defer n.ownMu.Unlock()
	for _, id := range []string{f.BidID, f.AskID} {
		oo := n.own[id]
		if oo == nil || slices.ContainsFunc(oo.fills, func(t api.TradeView) bool { return t.ID == f.ID }) {
			continue
		}
		oo.fills = append(oo.fills, tradeView(f, l))
		var sum uint32
		for _, t := range oo.fills {
			sum += t.Count
		}
		if sum >= oo.order.Quantity {
			oo.status = "filled"
		}
	}
}

func (n *Node) ownCancelled(id string) {
	n.ownMu.Lock()
	defer n.ownMu.Unlock()
	if oo := n.own[id]; oo != nil && oo.status == "resting" {
		oo.status = "cancelled"
	}
}

func (n *Node) ownEnvelope(id string) []byte {
	n.ownMu.Lock()
	defer n.ownMu.Unlock()
	if oo := n.own[id]; oo != nil {
		return oo.env
	}
	return nil
}

// Order returns one of this node's orders.
func (n *Node) Order(_ context.Context, id string) (_ api.OrderView, err error) {
	defer classified(&err)
	n.ownMu.Lock()
	oo := n.own[id]
	n.ownMu.Unlock()
	if oo == nil {
		return api.OrderView{}, fmt.Errorf("%w: %s", api.ErrUnknownOrder, id)
	}
	return n.orderView(oo), nil
}

// Orders lists this node's orders, newest first.
func (n *Node) Orders(context.Context) (_ []api.OrderView, err error) {
	defer classified(&err)
	n.ownMu.Lock()
	list := make([]*ownOrder, 0, len(n.own))
	for _, oo := range n.own {
		list = append(list, oo)
	}
	n.ownMu.Unlock()
	sort.Slice(list, func(i, j int) bool { return list[i].order.Created.After(list[j].order.Created) })
	out := make([]api.OrderView, 0, len(list))
	for _, oo := range list {
		out = append(out, n.orderView(oo))
	}
	return out, nil
}

func (n *Node) orderView(oo *ownOrder) api.OrderView {
	_, remaining, _ := n.books.Lookup(oo.order.Market, oo.order.Currency, oo.order.ID)
	// The own orders' lock is taken after the books lock (a fill records
	// itself here under it), never before: the order is read under it and
	// explained from the book after.
	n.ownMu.Lock()
	status := oo.status
	if status == "resting" && remaining == 0 && !oo.order.Expires.After(n.now()) {
		status = "expired"
	}
	o := oo.order
	v := api.OrderView{
		ID: o.ID, Side: o.Side.String(), Market: o.Market, Count: o.Quantity, Remaining: remaining,
		Price: market.FormatMicros(o.Price, o.Currency), Currency: o.Currency, LeaseType: o.LeaseType.String(),
		Status: status, Expires: o.Expires.UTC(), Fills: append([]api.TradeView{}, oo.fills...), Error: oo.err,
		Standing: oo.stand,
	}
	n.ownMu.Unlock()
	if status == "resting" || status == "done" && remaining == 0 && v.Filled() < o.Quantity {
		v.PassedOver = n.passedOver(o, v.Count-v.Filled())
	}
	return v
}

// CancelOrder withdraws one of this node's resting orders and gossips the
// signed cancel.
func (n *Node) CancelOrder(ctx context.Context, id string) (_ api.OrderView, err error) {
	defer classified(&err)
	n.ownMu.Lock()
	oo := n.own[id]
	n.ownMu.Unlock()
	if oo == nil {
		return api.OrderView{}, fmt.Errorf("%w: %s", api.ErrUnknownOrder, id)
	}
	me := n.host.ID().String()
	n.books.With(oo.order.Market, oo.order.Currency, func(s *exchange.Replica) { err = s.Cancel(id, me) })
	if err != nil {
		return api.OrderView{}, api.BadRequest("cannot cancel %s: %v", id, err)
	}
	n.ownCancelled(id)
	c := &proto.Cancel{Maker: []byte(n.host.ID()), OrderId: id, Market: oo.order.Market, CreatedUnixMs: n.now().UnixMilli()}
	env, err := p2p.Seal(n.key, c, proto.MaxBookMessageSize)
	if err != nil {
		return api.OrderView{}, err
	}
	ev := &p2p.BookEvent{Kind: p2p.KindCancel, Cancel: c}
	if err := n.publishBook(ctx, oo.order.Market, &proto.BookMessage{Body: &proto.BookMessage_Cancel{Cancel: env}}, ev); err != nil {
		n.log.Warn("publishing cancel failed", "order", id, "err", err)
	}
	return n.Order(ctx, id)
}

// requeue puts a preempted spot bid that asked for it back on the book
// for what was left of its lease.
func (n *Node) requeue(bidID string, gpus int, left time.Duration) {
	n.ownMu.Lock()
	oo := n.own[bidID]
	var req api.OrderRequest
	ok := oo != nil && oo.requeue
	if ok {
		req = oo.req
	}
	n.ownMu.Unlock()
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
	n.spawn(func() {
		ctx, cancel := context.WithTimeout(n.ctx, time.Minute)
		defer cancel()
		o, err := n.PlaceOrder(ctx, req)
		if err != nil && !errors.Is(err, context.Canceled) {
			n.log.Warn("re-queueing a preempted bid failed", "bid", bidID, "err", err)
			return
		}
		n.log.Info("preempted bid re-queued", "bid", bidID, "new", o.ID, "duration", req.Duration)
	})
}
