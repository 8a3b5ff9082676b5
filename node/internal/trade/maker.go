package trade

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/internal/exchange"
	"github.com/suanli/suanli/node/internal/store"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// HandleTake is the maker's side of a trade: the take checked, answered
// once, then re-checked against the book, reserved and accepted
// (answerTake), or handed to the resale path (Node.ResaleTake). The
// states, messages and transitions are the package doc's.
//
// Every take, a resale's too, is answered inside the takes gate, which
// Shut closes before the node's store goes. A stale take is refused; a
// take already answered gets the same answer again.
func (t *Trader) HandleTake(ctx context.Context, from peer.ID, takeEnv []byte) *proto.TradeReply {
	take, signer, err := p2p.OpenWith[*proto.Take](t.Verified, takeEnv, proto.MaxBookMessageSize)
	if err != nil || signer != from || string(take.Taker) != string(signer) {
		t.reject("take", "bad-envelope")
		return nil // not worth a signed answer
	}
	if !t.takes.Enter() {
		return nil // closing
	}
	defer t.takes.Leave()
	takeID := proto.CIDOf(takeEnv).String()
	received := t.Now()
	created := time.UnixMilli(take.CreatedUnixMs)
	if why := TakeFresh(created, received); why != "" {
		t.reject("take", "stale")
		return t.rejectTake(from, take, takeID, why)
	}
	e, first, err := t.answers.Claim(takeID, from, created.Add(MaxTakeAge), received)
	if err != nil {
		t.reject("take", "flood")
		return t.rejectTake(from, take, takeID, err.Error())
	}
	if !first {
		// The same take again, while or after it is answered: the same
		// answer, nothing more.
		t.reject("take", "replay")
		return e.Wait(ctx)
	}
	var reply *proto.TradeReply
	defer func() { t.answers.Settle(e, reply) }()
	switch stored, err := t.StoredAnswer(takeID); {
	case err != nil:
		reply = t.rejectTake(from, take, takeID, "reading answers: "+err.Error())
		return reply
	case stored != nil: // answered before a restart
		t.reject("take", "replay")
		reply = stored
		return reply
	}
	if r, ok := t.Node.ResaleTake(ctx, from, take, takeEnv, takeID); ok {
		reply = r // a take of a resale ask
		return reply
	}
	reply = t.answerTake(ctx, from, take, takeEnv, takeID, received)
	return reply
}

// StoredAnswer is the answer this maker stored for take id, if any: an
// accept (store.PutAcceptedTake) or a resale's reply.
func (t *Trader) StoredAnswer(id string) (*proto.TradeReply, error) {
	b, err := t.Store.TakeAnswer(id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r proto.TradeReply
	if err := gproto.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%w: stored answer of take %s: %v", store.ErrCorrupt, id, err)
	}
	return &r, nil
}

// RejectTake is a signed reject of a take, for reason.
func (t *Trader) RejectTake(from peer.ID, take *proto.Take, takeID, reason string) *proto.TradeReply {
	return t.rejectTake(from, take, takeID, reason)
}

func (t *Trader) rejectTake(from peer.ID, take *proto.Take, takeID, reason string) *proto.TradeReply {
	t.Log.Info("take rejected", "from", short(from.String()), "order", take.MakerOrderId, "reason", reason)
	env, err := p2p.Seal(t.Key, &proto.Reject{Maker: []byte(t.Host.ID()), TakeId: takeID, Reason: reason}, proto.MaxBookMessageSize)
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
// ask) is gathered before the trade lock is taken; it is held only to
// check the order's quantity against the takes in flight and to choose
// the GPUs (reserveTake). The take's quantity then counts as in flight on
// the order until its fill is applied, so a concurrent take cannot
// overfill it.
func (t *Trader) answerTake(ctx context.Context, from peer.ID, take *proto.Take, takeEnv []byte, takeID string, received time.Time) *proto.TradeReply {
	reject := func(format string, args ...any) *proto.TradeReply {
		reason := fmt.Sprintf(format, args...)
		if label := takeRefusal(reason); label != "" {
			t.reject("take", label)
		}
		return t.rejectTake(from, take, takeID, reason)
	}
	now := received
	to, _, err := t.Verified.OpenOrder(take.TakerOrder, now)
	if err != nil {
		return reject("taker order: %v", err)
	}
	if to.Maker != from.String() || to.Market != take.Market || to.Currency != take.Currency {
		return reject("taker order does not belong to the take")
	}
	me := t.Host.ID().String()
	// lookup reads the order and the GPUs of it in takes in flight in one
	// step (see Inflight).
	lookup := func() (mine market.Order, remaining, taking uint32, err error) {
		var ok bool
		t.Books.With(take.Market, take.Currency, func(s *exchange.Replica) {
			mine, remaining, ok = s.Book.Lookup(take.MakerOrderId)
			taking = t.Inflight.Of(take.MakerOrderId)
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

	// Gather what needs the network or NVML, without the lock. Only a
	// taking ask has an offer: looking one up for a buyer's bid is a DHT
	// lookup that ends in not-found, a wait the trade has no use for.
	var takerOffer *proto.Offer
	if mine.Side == market.Ask {
		if err := t.Node.AskFacts(ctx, &mine, 0); err != nil {
			return reject("my offer: %v", err)
		}
	} else {
		if err := t.Node.AskFacts(ctx, to, 0); err != nil {
			return reject("taker's offer: %v", err)
		}
		if takerOffer, err = t.Node.OfferOf(ctx, from, 0); err != nil {
			return reject("%v", err)
		}
	}
	facts := mine.Facts

	lease, victims, hold, rej := t.reserveTake(take, takeID, to, facts, lookup, takerOffer, now)
	if rej != "" {
		return reject("%s", rej)
	}
	defer t.Inflight.Done(takeID) // unless its fill ended the count already

	if t.Now().Sub(received) > AcceptWindow {
		t.unreserve(lease.Gpus, takeID, victims)
		return reject("take took too long to process")
	}
	acc := &proto.Accept{Maker: []byte(t.Host.ID()), TakeId: takeID, Lease: lease, CreatedUnixMs: now.UnixMilli()}
	accEnv, err := p2p.SealWith(t.Verified, t.Key, acc, proto.MaxBookMessageSize)
	if err != nil {
		t.unreserve(lease.Gpus, takeID, victims)
		return reject("%v", err)
	}
	fill := &proto.Fill{Take: takeEnv, Accept: accEnv}
	ev, err := t.Verified.OpenFill(fill, now)
	if err != nil {
		t.unreserve(lease.Gpus, takeID, victims)
		return reject("fill: %v", err)
	}
	// The terms and the answer are stored (synced, once) before the
	// accept is sent.
	reply := &proto.TradeReply{Body: &proto.TradeReply_Accept{Accept: accEnv}}
	raw, err := gproto.Marshal(reply)
	if err == nil {
		err = t.Store.PutAcceptedTake(lease, raw, hold)
	}
	if err != nil {
		if !errors.Is(err, store.ErrAnswered) {
			t.Node.StoreFailed("lease terms", err, lease.Id)
			t.unreserve(lease.Gpus, takeID, victims)
		} // else the GPUs are the first answer's: leave them
		return reject("storing lease: %v", err)
	}
	t.Books.ApplyFill(ev)
	t.Node.StartLease(ev)
	t.preempt(victims, takeID, now)
	t.Node.CapacityChanged() // GPUs leased
	t.Node.Spawn(func() {
		pctx, cancel := context.WithTimeout(t.Node.Context(), 10*time.Second)
		defer cancel()
		if err := t.Node.PublishBook(pctx, take.Market, &proto.BookMessage{Body: &proto.BookMessage_Fill{Fill: fill}}, ev); err != nil {
			t.Log.Warn("publishing fill failed", "fill", ev.Fill.ID, "err", err)
		}
	})
	return reply
}

// reserveTake checks and reserves a take: under the trade lock
// (chooseTake) the order is looked up again and checked against the
// takes in flight, the pair re-matched, the lease's terms built and, for
// an ask, its GPUs chosen; then, without the lock, the buyer's credit is
// checked and the GPUs are held in the store, not yet synced: answerTake
// hands hold to PutAcceptedTake, which writes it again with the lease in
// one synced transaction before the accept goes out. On success the
// take's quantity counts as in flight on the order (its fill or
// answerTake ends that); rej says why not otherwise, and nothing is left
// held or counted.
//
// No GPU is sold twice: the GPUs chosen stay in the Trader's choosing set
// from their choice to their hold in the store, so no other take chooses
// them meanwhile, and the store's hold refuses GPUs another lease holds
// in the same transaction that writes it. No order is oversold: its
// quantity is checked and counted in flight in one step under the lock.
func (t *Trader) reserveTake(take *proto.Take, takeID string, to *market.Order, facts market.Facts,
	lookup func() (market.Order, uint32, uint32, error), takerOffer *proto.Offer, now time.Time) (lease *proto.Lease, victims []market.Preemptible, hold *store.BlockHold, rej string) {
	lease, victims, hold, rej = t.chooseTake(take, takeID, to, facts, lookup, takerOffer, now)
	if rej != "" || hold == nil {
		return lease, victims, hold, rej
	}
	defer t.drop(takeID, lease.Gpus)
	refuse := func(why string) (*proto.Lease, []market.Preemptible, *store.BlockHold, string) {
		t.Inflight.Done(takeID)
		return nil, nil, nil, why
	}
	if err := t.Node.CheckCredit(lease, now); err != nil {
		return refuse(err.Error())
	}
	// Not synced here: PutAcceptedTake writes the hold again with the
	// lease, synced, before the accept is sent.
	if err := t.Store.HoldUnsynced(*hold); err != nil {
		return refuse("reserving GPUs: " + err.Error())
	}
	if start := time.UnixMilli(lease.StartUnixMs); start.After(now) && len(victims) == 0 {
		// A block ahead: where a cluster's scheduler places the leases,
		// it holds the GPUs too, or the cluster's own users take them.
		ctx, cancel := context.WithTimeout(t.Node.Context(), 30*time.Second)
		err := t.Node.HoldBlock(ctx, lease.Id, lease.Gpus, start, market.LeaseEnd(lease))
		cancel()
		if err != nil {
			t.unreserve(lease.Gpus, takeID, victims)
			return refuse("the cluster's scheduler cannot hold the block: " + err.Error())
		}
	}
	return lease, victims, hold, ""
}

// chooseTake is the part of reserveTake under the trade lock. For an
// ask, hold is the store hold of the GPUs chosen, which the caller
// writes after the lock.
func (t *Trader) chooseTake(take *proto.Take, takeID string, to *market.Order, facts market.Facts,
	lookup func() (market.Order, uint32, uint32, error), takerOffer *proto.Offer, now time.Time) (lease *proto.Lease, victims []market.Preemptible, hold *store.BlockHold, rej string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	mine, remaining, taking, err := lookup()
	if err != nil {
		return nil, nil, nil, err.Error()
	}
	switch {
	case remaining < take.Quantity+taking:
		return nil, nil, nil, fmt.Sprintf("order has %d GPUs left (%d being taken), take wants %d", remaining, taking, take.Quantity)
	case take.PriceMicros != mine.Price:
		return nil, nil, nil, fmt.Sprintf("take price %d is not the order's %d", take.PriceMicros, mine.Price)
	}
	if mine.Side == market.Ask {
		mine.Facts = facts
	}
	// Re-run the book's own rules on just this pair: constraints, durations,
	// lease type, self-match, all-or-none.
	pair, err := market.NewBook(take.Market, take.Currency)
	if err != nil {
		return nil, nil, nil, err.Error()
	}
	resting := mine
	resting.Quantity = remaining
	resting.ClientKey = ""
	if err := pair.Add(&resting, now); err != nil {
		return nil, nil, nil, "order: " + err.Error()
	}
	incoming := *to
	incoming.Quantity, incoming.AllOrNone, incoming.PostOnly, incoming.TimeInForce, incoming.ClientKey = take.Quantity, false, false, market.IOC, ""
	ms, err := pair.Match(&incoming, now)
	if err != nil || len(ms) != 1 || ms[0].Quantity != take.Quantity {
		return nil, nil, nil, fmt.Sprintf("the orders do not match (%v)", err)
	}

	lease = &proto.Lease{
		Id: takeID, Market: take.Market, PriceMicros: take.PriceMicros, Currency: take.Currency,
		LeaseType: take.LeaseType, DurationS: take.DurationS, StartUnixMs: now.UnixMilli(),
		BillingIntervalS: int64(t.BillingInterval / time.Second),
	}
	if mine.Side != market.Ask {
		lease.Provider, lease.Buyer = []byte(take.Taker), []byte(t.Host.ID())
		lease.StartUnixMs = t.Node.LeaseStart(&mine, now).UnixMilli() // a forward block starts at its time
		if uint32(len(take.Gpus)) != take.Quantity {
			return nil, nil, nil, fmt.Sprintf("take names %d GPUs for %d", len(take.Gpus), take.Quantity)
		}
		for _, g := range take.Gpus {
			if !slices.ContainsFunc(takerOffer.Gpus, func(og *proto.GPU) bool { return og.Uuid == g && og.Market == take.Market }) {
				return nil, nil, nil, fmt.Sprintf("GPU %s is not in the provider's offer", g)
			}
		}
		lease.Gpus = take.Gpus
		lease.BillingIncrementS = takerOffer.GetTerms().GetChargeIncrementS()
		lease.Schedule, lease.UtcOffsetMinutes = takerOffer.GetPricing().GetSchedule(), takerOffer.GetPricing().GetUtcOffsetMinutes()
		if b := takerOffer.GetTerms().GetBillingIncrementS(); b > 0 {
			lease.BillingIntervalS = b
		}
		t.Inflight.Add(takeID, take.MakerOrderId, take.Quantity)
		return lease, nil, nil, ""
	}
	lease.Provider, lease.Buyer = []byte(t.Host.ID()), []byte(take.Taker)
	lease.LeaseType = p2p.LeaseTypeToProto(mine.LeaseType)
	if mine.LeaseType.Interruptible() {
		lease.PreemptionNoticeS = int64(t.PreemptNotice / time.Second)
	}
	lease.BillingIncrementS = int64(t.ChargeIncrement / time.Second)
	lease.Schedule, lease.UtcOffsetMinutes = t.Schedule, t.ScheduleOffset
	start := t.Node.LeaseStart(to, now)
	lease.StartUnixMs = start.UnixMilli()
	dur := time.Duration(take.DurationS) * time.Second
	free, err := t.freeLocked(take.Market, start, now, dur)
	if err != nil {
		return nil, nil, nil, err.Error()
	}
	gpus := free
	if uint32(len(free)) < take.Quantity && start.After(now) {
		return nil, nil, nil, fmt.Sprintf("only %d GPUs free for the block from %s", len(free), start.UTC().Format(time.RFC3339))
	}
	if uint32(len(free)) < take.Quantity {
		var ok bool
		victims, gpus, ok = market.ChoosePreempted(t.preemptibleLocked(take.Market), free, int(take.Quantity), mine.LeaseType, take.PriceMicros, t.PreemptMargin)
		if !ok {
			return nil, nil, nil, fmt.Sprintf("only %d GPUs free", len(free))
		}
		// The GPUs come free when the victims' notice runs out: the
		// lease starts then.
		lease.StartUnixMs = t.preemptionEnd(victims, now).UnixMilli()
	}
	lease.Gpus = gpus[:take.Quantity]
	end := time.UnixMilli(lease.StartUnixMs).Add(dur + time.Minute)
	if start.After(now) {
		end = start.Add(dur) // a block holds exactly its time
	}
	from, over := time.UnixMilli(lease.StartUnixMs), victimIDs(victims)
	t.holdLocked(takeID, lease.Gpus)
	t.Inflight.Add(takeID, take.MakerOrderId, take.Quantity)
	return lease, victims, &store.BlockHold{GPUs: lease.Gpus, Lease: takeID, From: from, End: end, Over: over}, ""
}

// preemptibleLocked is Node.Preemptible without the leases whose GPUs
// another take is choosing. Holds mu.
func (t *Trader) preemptibleLocked(mkt string) []market.Preemptible {
	var out []market.Preemptible
	for _, p := range t.Node.Preemptible(mkt) {
		if !slices.ContainsFunc(p.GPUs, func(g string) bool { _, busy := t.choosing[g]; return busy }) {
			out = append(out, p)
		}
	}
	return out
}

func victimIDs(vs []market.Preemptible) []string {
	var ids []string
	for _, v := range vs {
		ids = append(ids, v.ID)
	}
	return ids
}

// unreserve undoes a trade's GPU reservation after it failed: its GPUs
// go back to the victims it would have preempted, or come free.
func (t *Trader) unreserve(gpus []string, lease string, victims []market.Preemptible) {
	ctx, cancel := context.WithTimeout(t.Node.Context(), 30*time.Second)
	t.Node.ReleaseBlock(ctx, lease)
	cancel()
	if err := t.Store.ReleaseGPUs(gpus, lease); err != nil {
		t.Node.StoreFailed("GPU release", err, lease) // the hold lapses by itself
	}
	for _, v := range victims {
		if _, _, terms, ok := t.Node.LeaseOf(v.ID); ok {
			if err := t.Store.ReserveGPUs(v.GPUs, v.ID, market.LeaseEnd(terms).Add(time.Minute)); err != nil {
				t.Node.StoreFailed("GPU hold", err, v.ID)
			}
		}
	}
}
