package node

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/internal/exchange"
	"github.com/suanli/suanli/node/internal/store"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// Trade tuning.
const (
	// takeTimeout is how long a taker waits for a maker before skipping it.
	takeTimeout = 5 * time.Second
	// acceptWindow is how long after receiving a take a maker may still
	// accept it; shorter than takeTimeout so that an accept almost always
	// reaches a taker that is still waiting.
	acceptWindow = 3 * time.Second
	// maxTakeRounds bounds the takes one order makes in one pass.
	maxTakeRounds = 32
	// defaultOrderTTL is how long an order rests when not told.
	defaultOrderTTL = time.Hour
)

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
		avail := len(free)
		if !o.LeaseType.Interruptible() {
			// An on-demand or reserved ask may sell GPUs that spot leases
			// hold: a take of it preempts them (preempt.go).
			for _, p := range n.preemptible(o.Market) {
				if p.Type.Interruptible() {
					avail += len(p.GPUs)
				}
			}
		}
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
		return n.placeResale(ctx, req) // resale.go
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

// takeLoop takes what o crosses, one maker at a time in priority order,
// skipping makers that refuse or do not answer. No lock is held while
// waiting for a maker: two nodes taking each other's orders at once cannot
// deadlock; one of them is refused.
func (n *Node) takeLoop(ctx context.Context, o *market.Order, env []byte) {
	skip := map[string]bool{}
	for range maxTakeRounds {
		n.tradeMu.Lock()
		var ms []market.Match
		err := n.books.With(o.Market, o.Currency, func(s *exchange.Replica) {
			want := *o
			if _, rem, ok := s.Book.Lookup(o.ID); ok {
				want.Quantity = rem
			} else {
				want.Quantity = o.Quantity - n.filledLocked(o.ID)
			}
			want.Quantity -= min(want.Quantity, n.inflight.Of(o.ID))
			switch {
			case want.Quantity == 0 || !o.Expires.After(n.now()):
			case o.AllOrNone:
				// Whole from one maker, or not at all: never part-filled.
				if want.Quantity == o.Quantity {
					if w, ok := s.Book.MatchWhole(&want, n.now(), func(id string) bool { return skip[id] }); ok {
						ms = []market.Match{w}
					}
				}
			default:
				ms, _ = s.Book.Match(&want, n.now())
			}
		})
		if err != nil {
			n.tradeMu.Unlock()
			return
		}
		var m *market.Match
		for i := range ms {
			if !skip[ms[i].OrderID] {
				m = &ms[i]
				break
			}
		}
		if m == nil {
			n.tradeMu.Unlock()
			return
		}
		key := fmt.Sprintf("taking/%d", n.takeSeq.Add(1))
		n.inflight.Add(key, o.ID, m.Quantity)
		n.tradeMu.Unlock()

		_, err = n.take(ctx, o, env, *m, key)
		n.inflight.Done(key) // unless its fill ended the count already
		if err != nil {
			n.log.Info("take failed; trying the next order", "maker", short(m.Maker), "order", m.OrderID, "err", err)
			n.ownFailed(o.ID, err)
			skip[m.OrderID] = true
		}
	}
}

// filledLocked is how much of one of this node's orders has been filled.
func (n *Node) filledLocked(id string) uint32 {
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

// take agrees one match with its maker. It returns the quantity filled.
//
// key is the take's count in flight (inflight), named with the take's ID
// once it has one, so that applying its fill ends the count.
func (n *Node) take(ctx context.Context, o *market.Order, env []byte, m market.Match, key string) (uint32, error) {
	maker, err := peer.Decode(m.Maker)
	if err != nil {
		return 0, err
	}
	now := n.now()
	blockStart := now // a forward block's start, for a provider taking a reserved bid
	take := &proto.Take{
		Taker: []byte(n.host.ID()), Market: o.Market, MakerOrderId: m.OrderID, TakerOrder: env,
		Quantity: m.Quantity, PriceMicros: m.Price, Currency: o.Currency,
		LeaseType: p2p.LeaseTypeToProto(m.LeaseType), CreatedUnixMs: now.UnixMilli(),
	}
	if o.Side == market.Bid {
		take.DurationS = int64(o.Duration / time.Second)
	} else {
		// A provider taking a resting bid chooses the GPUs now.
		bid, _, ok := n.books.Lookup(o.Market, o.Currency, m.OrderID)
		if !ok {
			return 0, fmt.Errorf("bid %s is gone", m.OrderID)
		}
		take.DurationS = int64(bid.Duration / time.Second)
		take.LeaseType = p2p.LeaseTypeToProto(o.LeaseType)
		blockStart = leaseStartFor(&bid, now)
		if err := n.checkBidCredit(m.OrderID, m.Maker, m.Quantity, m.Price, o.Currency, bid.Duration); err != nil {
			return 0, err
		}
	}
	var takeEnv []byte
	var takeID string
	if o.Side == market.Ask {
		// Choose and hold the GPUs in one step. If the maker does not answer
		// the hold lapses on its own a little after the maker's window: an
		// accept signed in that window still finds the GPUs held.
		n.tradeMu.Lock()
		free, err := n.freeGPUs(o.Market)
		if blockStart.After(now) {
			free, err = n.freeGPUsFor(o.Market, blockStart, blockStart.Add(time.Duration(take.DurationS)*time.Second))
		}
		if err == nil && uint32(len(free)) < m.Quantity {
			err = fmt.Errorf("only %d GPUs free", len(free))
		}
		if err == nil {
			take.Gpus = free[:m.Quantity]
			takeEnv, err = p2p.Seal(n.key, take, proto.MaxBookMessageSize)
		}
		if err == nil {
			takeID = proto.CIDOf(takeEnv).String()
			n.inflight.Name(key, takeID)
			if blockStart.After(now) {
				err = n.store.ReserveBlock(take.Gpus, takeID, blockStart, blockStart.Add(time.Duration(take.DurationS)*time.Second))
			} else {
				err = n.store.ReserveGPUs(take.Gpus, takeID, now.Add(takeTimeout+time.Minute))
			}
		}
		n.tradeMu.Unlock()
		if err != nil {
			return 0, err
		}
	} else {
		var err error
		if takeEnv, err = p2p.Seal(n.key, take, proto.MaxBookMessageSize); err != nil {
			return 0, err
		}
		takeID = proto.CIDOf(takeEnv).String()
		n.inflight.Name(key, takeID)
	}
	// A resale's reply is checked against the ask as it was taken: the
	// fill's gossip can remove it from the book before the reply arrives.
	askEnv := n.bookEnv(o.Market, o.Currency, m.OrderID)
	tctx, cancel := context.WithTimeout(ctx, takeTimeout)
	reply, err := p2p.SendTake(tctx, n.host, maker, takeEnv)
	cancel()
	release := func() {
		if len(take.Gpus) > 0 {
			if err := n.store.ReleaseGPUs(take.Gpus, takeID); err != nil {
				n.storeFailed(&storeError{what: "GPU release", err: err}, takeID) // the hold lapses by itself
			}
		}
	}
	if err != nil {
		return 0, err // in doubt: the hold lapses by itself
	}
	switch body := reply.Body.(type) {
	case *proto.TradeReply_Reject:
		release()
		rj, signer, err := p2p.Open[*proto.Reject](body.Reject, proto.MaxBookMessageSize)
		if err != nil || signer != maker || rj.TakeId != takeID {
			return 0, fmt.Errorf("maker sent an invalid reject")
		}
		return 0, fmt.Errorf("maker rejected: %s", rj.Reason)
	case *proto.TradeReply_Resale:
		return n.takeResale(o, m, takeEnv, askEnv, body.Resale) // resale.go
	case *proto.TradeReply_Accept:
		fill := &proto.Fill{Take: takeEnv, Accept: body.Accept}
		ev, err := p2p.OpenFill(fill, n.now())
		if err != nil || ev.Fill.Provider == ev.Fill.Buyer || (ev.Fill.Provider != m.Maker && ev.Fill.Buyer != m.Maker) {
			release()
			return 0, fmt.Errorf("maker sent an invalid accept: %v", err)
		}
		// A forward block starts when its bid said, not when the maker likes.
		if want := wantStart(o, blockStart, now); !want.IsZero() && ev.Lease.StartUnixMs != want.UnixMilli() {
			release()
			return 0, fmt.Errorf("maker's lease starts %s, the block at %s", time.UnixMilli(ev.Lease.StartUnixMs).UTC().Format(time.RFC3339), want.UTC().Format(time.RFC3339))
		}
		if len(take.Gpus) > 0 && !blockStart.After(now) {
			end := time.UnixMilli(ev.Lease.StartUnixMs).Add(time.Duration(ev.Lease.DurationS)*time.Second + time.Minute)
			if err := n.store.ReserveGPUs(take.Gpus, takeID, end); err != nil {
				n.storeFailed(&storeError{what: "GPU hold", err: err}, ev.Lease.Id)
			}
		}
		// The maker accepted: the trade stands. Terms that cannot be
		// stored fail the lease, which could not be resumed.
		termsErr := n.store.PutLease(ev.Lease)
		n.books.ApplyFill(ev)
		if termsErr != nil {
			if r, err := n.leaseRun(ev.Lease.Id); err == nil {
				r.mu.Lock()
				n.failStoreLocked(r, "lease terms", termsErr)
				r.mu.Unlock()
			} else {
				n.storeFailed(&storeError{what: "lease terms", err: termsErr}, ev.Lease.Id)
			}
		}
		n.capacityChanged() // capacity.go: GPUs leased
		if err := n.publishBook(ctx, o.Market, &proto.BookMessage{Body: &proto.BookMessage_Fill{Fill: fill}}, ev); err != nil {
			n.log.Warn("publishing fill failed", "fill", ev.Fill.ID, "err", err)
		}
		return ev.Fill.Quantity, nil
	}
	release()
	return 0, p2p.ErrNoReply
}

// handleTake is the maker's side of a trade: the take checked, answered
// once, then re-checked against the book, reserved and accepted
// (answerTake), or handed to the resale path (resale.go).
//
// Every take, a resale's too, is answered inside the takes gate, which
// Close shuts before the store goes. A stale take is refused; a take
// already answered gets the same answer again (takeanswer.go).
func (n *Node) handleTake(ctx context.Context, from peer.ID, takeEnv []byte) *proto.TradeReply {
	take, signer, err := p2p.Open[*proto.Take](takeEnv, proto.MaxBookMessageSize)
	if err != nil || signer != from || string(take.Taker) != string(signer) {
		n.metrics.rejects.WithLabelValues("take", "bad-envelope").Inc()
		return nil // not worth a signed answer
	}
	if !n.takes.enter() {
		return nil // closing
	}
	defer n.takes.leave()
	takeID := proto.CIDOf(takeEnv).String()
	received := n.now()
	created := time.UnixMilli(take.CreatedUnixMs)
	if why := takeFresh(created, received); why != "" {
		n.metrics.rejects.WithLabelValues("take", "stale").Inc()
		return n.rejectTake(from, take, takeID, why)
	}
	e, first, err := n.answers.Claim(takeID, from, created.Add(maxTakeAge), received)
	if err != nil {
		n.metrics.rejects.WithLabelValues("take", "flood").Inc()
		return n.rejectTake(from, take, takeID, err.Error())
	}
	if !first {
		// The same take again, while or after it is answered: the same
		// answer, nothing more.
		n.metrics.rejects.WithLabelValues("take", "replay").Inc()
		return e.Wait(ctx)
	}
	var reply *proto.TradeReply
	defer func() { n.answers.Settle(e, reply) }()
	switch stored, err := n.storedAnswer(takeID); {
	case err != nil:
		reply = n.rejectTake(from, take, takeID, "reading answers: "+err.Error())
		return reply
	case stored != nil: // answered before a restart
		n.metrics.rejects.WithLabelValues("take", "replay").Inc()
		reply = stored
		return reply
	}
	if r, ok := n.handleResaleTake(ctx, from, take, takeEnv, takeID); ok {
		reply = r // a take of a resale ask (resale.go)
		return reply
	}
	reply = n.answerTake(ctx, from, take, takeEnv, takeID, received)
	return reply
}

// rejectTake is a signed reject of a take.
func (n *Node) rejectTake(from peer.ID, take *proto.Take, takeID, reason string) *proto.TradeReply {
	n.log.Info("take rejected", "from", short(from.String()), "order", take.MakerOrderId, "reason", reason)
	env, err := p2p.Seal(n.key, &proto.Reject{Maker: []byte(n.host.ID()), TakeId: takeID, Reason: reason}, proto.MaxBookMessageSize)
	if err != nil {
		return nil
	}
	return &proto.TradeReply{Body: &proto.TradeReply_Reject{Reject: env}}
}

// takeRefusals label, for suanli_validation_rejects_total{kind="take"},
// why answerTake refused a take, by the start of the reason it signs.
var takeRefusals = []struct{ has, label string }{
	{"taker order", "taker-order"},
	{"is not open", "not-open"},
	{"is not mine", "not-open"},
	{"offer", "offer"},
	{"GPUs left", "quantity"},
	{"take price", "price"},
	{"order: ", "no-match"},
	{"do not match", "no-match"},
	{"GPU", "gpus"},
	{"credit", ""}, // counted as credit-limit where checked
	{"took too long", "slow"},
	{"storing", "store"},
}

// takeRefusal is the metric label of a reason answerTake refuses a take
// with: the first of takeRefusals it contains, else "other".
func takeRefusal(reason string) string {
	for _, r := range takeRefusals {
		if strings.Contains(reason, r.has) {
			return r.label
		}
	}
	return "other"
}

// answerTake answers a fresh take of one of this node's orders, the first
// time it comes.
//
// What needs the network or NVML (the offers, the attestation level of an
// ask, which may check this provider's own GPUs for up to maxSelfAttest)
// is gathered before tradeMu is taken. tradeMu is held only to check the
// order's quantity against the takes in flight and to choose and reserve
// the GPUs; the take's quantity then counts as in flight on the order
// until its fill is applied, so a concurrent take cannot overfill it.
func (n *Node) answerTake(ctx context.Context, from peer.ID, take *proto.Take, takeEnv []byte, takeID string, received time.Time) *proto.TradeReply {
	reject := func(format string, args ...any) *proto.TradeReply {
		reason := fmt.Sprintf(format, args...)
		if label := takeRefusal(reason); label != "" {
			n.metrics.rejects.WithLabelValues("take", label).Inc()
		}
		return n.rejectTake(from, take, takeID, reason)
	}
	now := received
	to, _, err := p2p.OpenOrder(take.TakerOrder, now)
	if err != nil {
		return reject("taker order: %v", err)
	}
	if to.Maker != from.String() || to.Market != take.Market || to.Currency != take.Currency {
		return reject("taker order does not belong to the take")
	}
	me := n.host.ID().String()
	// lookup reads the order and the GPUs of it in takes in flight in one
	// step (see inflight).
	lookup := func() (mine market.Order, remaining, taking uint32, err error) {
		var ok bool
		n.books.With(take.Market, take.Currency, func(s *exchange.Replica) {
			mine, remaining, ok = s.Book.Lookup(take.MakerOrderId)
			taking = n.inflight.Of(take.MakerOrderId)
		})
		switch {
		case !ok:
			return market.Order{}, 0, 0, fmt.Errorf("order %s is not open", take.MakerOrderId)
		case mine.Maker != me:
			return market.Order{}, 0, 0, fmt.Errorf("order %s is not mine", take.MakerOrderId)
		}
		return mine, remaining, taking, nil
	}
	mine, _, _, err := lookup()
	if err != nil {
		return reject("%v", err)
	}

	// Gather what needs the network or NVML, without tradeMu. Only a
	// taking ask has an offer: looking one up for a buyer's bid is a DHT
	// lookup that ends in not-found, a wait the trade has no use for.
	var takerOffer *proto.Offer
	if mine.Side == market.Ask {
		if err := n.askFacts(ctx, &mine, 0); err != nil {
			return reject("my offer: %v", err)
		}
	} else {
		if err := n.askFacts(ctx, to, 0); err != nil {
			return reject("taker's offer: %v", err)
		}
		if takerOffer, err = n.offerOf(ctx, from, 0); err != nil {
			return reject("%v", err)
		}
	}
	facts := mine.Facts

	lease, victims, rej := n.reserveTake(take, takeID, to, facts, lookup, takerOffer, now)
	if rej != "" {
		return reject("%s", rej)
	}
	defer n.inflight.Done(takeID) // unless its fill ended the count already

	if n.now().Sub(received) > acceptWindow {
		n.unreserve(lease.Gpus, takeID, victims)
		return reject("take took too long to process")
	}
	acc := &proto.Accept{Maker: []byte(n.host.ID()), TakeId: takeID, Lease: lease, CreatedUnixMs: now.UnixMilli()}
	accEnv, err := p2p.Seal(n.key, acc, proto.MaxBookMessageSize)
	if err != nil {
		n.unreserve(lease.Gpus, takeID, victims)
		return reject("%v", err)
	}
	fill := &proto.Fill{Take: takeEnv, Accept: accEnv}
	ev, err := p2p.OpenFill(fill, now)
	if err != nil {
		n.unreserve(lease.Gpus, takeID, victims)
		return reject("fill: %v", err)
	}
	// The terms and the answer are stored (synced, once) before the
	// accept is sent.
	reply := &proto.TradeReply{Body: &proto.TradeReply_Accept{Accept: accEnv}}
	raw, err := gproto.Marshal(reply)
	if err == nil {
		err = n.store.PutAcceptedTake(lease, raw)
	}
	if err != nil {
		if !errors.Is(err, store.ErrAnswered) {
			n.storeFailed(&storeError{what: "lease terms", err: err}, lease.Id)
			n.unreserve(lease.Gpus, takeID, victims)
		} // else the GPUs are the first answer's: leave them
		return reject("storing lease: %v", err)
	}
	n.books.ApplyFill(ev)
	n.preempt(victims, takeID, now)
	n.capacityChanged() // capacity.go: GPUs leased
	n.spawn(func() {
		pctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
		defer cancel()
		if err := n.publishBook(pctx, take.Market, &proto.BookMessage{Body: &proto.BookMessage_Fill{Fill: fill}}, ev); err != nil {
			n.log.Warn("publishing fill failed", "fill", ev.Fill.ID, "err", err)
		}
	})
	return reply
}

// reserveTake is the part of handleTake under tradeMu: the order looked up
// again and checked against the takes in flight, the pair re-matched, the
// lease's terms built and, for an ask, its GPUs chosen and reserved. On
// success the take's quantity counts as in flight on the order (its fill
// or answerTake ends that); rej says why not otherwise. facts are the ask's facts,
// gathered before (askFacts); takerOffer is the taking provider's offer,
// for a bid.
func (n *Node) reserveTake(take *proto.Take, takeID string, to *market.Order, facts market.Facts,
	lookup func() (market.Order, uint32, uint32, error), takerOffer *proto.Offer, now time.Time) (lease *proto.Lease, victims []market.Preemptible, rej string) {
	n.tradeMu.Lock()
	defer n.tradeMu.Unlock()
	mine, remaining, taking, err := lookup()
	if err != nil {
		return nil, nil, err.Error()
	}
	switch {
	case remaining < take.Quantity+taking:
		return nil, nil, fmt.Sprintf("order has %d GPUs left (%d being taken), take wants %d", remaining, taking, take.Quantity)
	case take.PriceMicros != mine.Price:
		return nil, nil, fmt.Sprintf("take price %d is not the order's %d", take.PriceMicros, mine.Price)
	}
	if mine.Side == market.Ask {
		mine.Facts = facts
	}
	// Re-run the book's own rules on just this pair: constraints, durations,
	// lease type, self-match, all-or-none.
	pair, err := market.NewBook(take.Market, take.Currency)
	if err != nil {
		return nil, nil, err.Error()
	}
	resting := mine
	resting.Quantity = remaining
	resting.ClientKey = ""
	if err := pair.Add(&resting, now); err != nil {
		return nil, nil, "order: " + err.Error()
	}
	incoming := *to
	incoming.Quantity, incoming.AllOrNone, incoming.PostOnly, incoming.TimeInForce, incoming.ClientKey = take.Quantity, false, false, market.IOC, ""
	ms, err := pair.Match(&incoming, now)
	if err != nil || len(ms) != 1 || ms[0].Quantity != take.Quantity {
		return nil, nil, fmt.Sprintf("the orders do not match (%v)", err)
	}

	lease = &proto.Lease{
		Id: takeID, Market: take.Market, PriceMicros: take.PriceMicros, Currency: take.Currency,
		LeaseType: take.LeaseType, DurationS: take.DurationS, StartUnixMs: now.UnixMilli(),
		BillingIntervalS: int64(n.billingInterval / time.Second),
	}
	if mine.Side == market.Ask {
		lease.Provider, lease.Buyer = []byte(n.host.ID()), []byte(take.Taker)
		lease.LeaseType = p2p.LeaseTypeToProto(mine.LeaseType)
		if mine.LeaseType.Interruptible() {
			lease.PreemptionNoticeS = int64(n.preemptNotice / time.Second)
		}
		lease.BillingIncrementS = int64(n.chargeIncrement / time.Second)
		lease.Schedule, lease.UtcOffsetMinutes = n.schedule, n.scheduleOffset
		start := leaseStartFor(to, now)
		lease.StartUnixMs = start.UnixMilli()
		end := start.Add(time.Duration(take.DurationS) * time.Second)
		free, err := n.freeGPUs(take.Market)
		if start.After(now) {
			free, err = n.freeGPUsFor(take.Market, start, end)
		}
		if err != nil {
			return nil, nil, err.Error()
		}
		gpus := free
		if uint32(len(free)) < take.Quantity && start.After(now) {
			return nil, nil, fmt.Sprintf("only %d GPUs free for the block from %s", len(free), start.UTC().Format(time.RFC3339))
		}
		if uint32(len(free)) < take.Quantity {
			var ok bool
			victims, gpus, ok = market.ChoosePreempted(n.preemptible(take.Market), free, int(take.Quantity), mine.LeaseType, take.PriceMicros, n.preemptMargin)
			if !ok {
				return nil, nil, fmt.Sprintf("only %d GPUs free", len(free))
			}
			// The GPUs come free when the victims' notice runs out: the
			// lease starts then.
			lease.StartUnixMs = n.preemptionEnd(victims, now).UnixMilli()
		}
		lease.Gpus = gpus[:take.Quantity]
		if err := n.checkCredit(lease, now); err != nil {
			return nil, nil, err.Error()
		}
		end = time.UnixMilli(lease.StartUnixMs).Add(time.Duration(take.DurationS)*time.Second + time.Minute)
		if start.After(now) {
			end = start.Add(time.Duration(take.DurationS) * time.Second) // a block holds exactly its time
		}
		if err := n.store.ReserveBlock(lease.Gpus, takeID, time.UnixMilli(lease.StartUnixMs), end, victimIDs(victims)...); err != nil {
			return nil, nil, "reserving GPUs: " + err.Error()
		}
	} else {
		lease.Provider, lease.Buyer = []byte(take.Taker), []byte(n.host.ID())
		lease.StartUnixMs = leaseStartFor(&mine, now).UnixMilli() // a forward block starts at its time
		if uint32(len(take.Gpus)) != take.Quantity {
			return nil, nil, fmt.Sprintf("take names %d GPUs for %d", len(take.Gpus), take.Quantity)
		}
		for _, g := range take.Gpus {
			if !slices.ContainsFunc(takerOffer.Gpus, func(og *proto.GPU) bool { return og.Uuid == g && og.Market == take.Market }) {
				return nil, nil, fmt.Sprintf("GPU %s is not in the provider's offer", g)
			}
		}
		lease.Gpus = take.Gpus
		lease.BillingIncrementS = takerOffer.GetTerms().GetChargeIncrementS()
		lease.Schedule, lease.UtcOffsetMinutes = takerOffer.GetPricing().GetSchedule(), takerOffer.GetPricing().GetUtcOffsetMinutes()
		if t := takerOffer.GetTerms().GetBillingIncrementS(); t > 0 {
			lease.BillingIntervalS = t
		}
	}
	n.inflight.Add(takeID, take.MakerOrderId, take.Quantity)
	return lease, victims, ""
}

// freeGPUs lists this provider's GPUs in a market not reserved by a lease.
func (n *Node) freeGPUs(mkt string) ([]string, error) {
	offer := n.Published()
	if offer == nil {
		return nil, fmt.Errorf("%w: no published offer", api.ErrNoGPUs)
	}
	busy, err := n.store.ReservedGPUs(n.now())
	if err != nil {
		return nil, err
	}
	var free []string
	for _, g := range offer.Gpus {
		if g.Market == mkt && !busy[g.Uuid] {
			free = append(free, g.Uuid)
		}
	}
	return free, nil
}

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
