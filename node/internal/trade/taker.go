package trade

import (
	"context"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/internal/exchange"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// TakeLoop takes what o (one of this node's orders, signed as env)
// crosses, one maker at a time in priority order, skipping makers that
// refuse or do not answer. No lock is held while waiting for a maker: two
// nodes taking each other's orders at once cannot deadlock; one of them
// is refused. Each take runs inside the takes gate, as a take being
// answered does: Shut waits for it before the store goes, and once Shut
// no take starts.
func (t *Trader) TakeLoop(ctx context.Context, o *market.Order, env []byte) {
	skip := map[string]bool{}
	for range maxTakeRounds {
		if !t.takes.Enter() {
			return // closing: the store may be going
		}
		m, key := t.nextMatch(o, skip)
		if m == nil {
			t.takes.Leave()
			return
		}
		_, err := t.take(ctx, o, env, *m, key)
		t.Inflight.Done(key) // unless its fill ended the count already
		t.takes.Leave()
		if err != nil {
			t.Log.Info("take failed; trying the next order", "maker", short(m.Maker), "order", m.OrderID, "err", err)
			t.Node.OwnFailed(o.ID, err)
			skip[m.OrderID] = true
		}
	}
}

// nextMatch is the best match of what is left of o, not skipped, counted
// in flight under key; nil when there is none.
func (t *Trader) nextMatch(o *market.Order, skip map[string]bool) (*market.Match, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var ms []market.Match
	err := t.Books.With(o.Market, o.Currency, func(s *exchange.Replica) {
		want := *o
		if _, rem, ok := s.Book.Lookup(o.ID); ok {
			want.Quantity = rem
		} else {
			want.Quantity = o.Quantity - min(o.Quantity, t.Node.OwnFilled(o.ID))
		}
		want.Quantity -= min(want.Quantity, t.Inflight.Of(o.ID))
		switch {
		case want.Quantity == 0 || !o.Expires.After(t.Now()):
		case o.AllOrNone:
			// Whole from one maker, or not at all: never part-filled.
			if want.Quantity == o.Quantity {
				if w, ok := s.Book.MatchWhole(&want, t.Now(), func(id string) bool { return skip[id] }); ok {
					ms = []market.Match{w}
				}
			}
		default:
			ms, _ = s.Book.Match(&want, t.Now())
		}
	})
	if err != nil {
		return nil, ""
	}
	for i := range ms {
		if !skip[ms[i].OrderID] {
			key := fmt.Sprintf("taking/%d", t.seq.Add(1))
			t.Inflight.Add(key, o.ID, ms[i].Quantity)
			return &ms[i], key
		}
	}
	return nil, ""
}

// take agrees one match with its maker. It returns the quantity filled.
//
// key is the take's count in flight (Inflight), named with the take's ID
// once it has one, so that applying its fill ends the count.
func (t *Trader) take(ctx context.Context, o *market.Order, env []byte, m market.Match, key string) (uint32, error) {
	maker, err := peer.Decode(m.Maker)
	if err != nil {
		return 0, err
	}
	now := t.Now()
	blockStart := now // a forward block's start, for a provider taking a reserved bid
	take := &proto.Take{
		Taker: []byte(t.Host.ID()), Market: o.Market, MakerOrderId: m.OrderID, TakerOrder: env,
		Quantity: m.Quantity, PriceMicros: m.Price, Currency: o.Currency,
		LeaseType: p2p.LeaseTypeToProto(m.LeaseType), CreatedUnixMs: now.UnixMilli(),
	}
	if o.Side == market.Bid {
		take.DurationS = int64(o.Duration / time.Second)
	} else {
		// A provider taking a resting bid chooses the GPUs now.
		bid, _, ok := t.Books.Lookup(o.Market, o.Currency, m.OrderID)
		if !ok {
			return 0, fmt.Errorf("bid %s is gone", m.OrderID)
		}
		take.DurationS = int64(bid.Duration / time.Second)
		take.LeaseType = p2p.LeaseTypeToProto(o.LeaseType)
		blockStart = t.Node.LeaseStart(&bid, now)
		if err := t.Node.CheckBidCredit(m.OrderID, m.Maker, m.Quantity, m.Price, o.Currency, bid.Duration); err != nil {
			return 0, err
		}
	}
	var takeEnv []byte
	var takeID string
	if o.Side == market.Ask {
		// Choose the GPUs under the lock, hold them in the store after it.
		// If the maker does not answer the hold lapses on its own a little
		// after the maker's window: an accept signed in that window still
		// finds the GPUs held.
		if takeEnv, takeID, err = t.holdTaken(take, key, blockStart, now); err != nil {
			return 0, err
		}
	} else {
		if takeEnv, err = p2p.SealWith(t.Verified, t.Key, take, proto.MaxBookMessageSize); err != nil {
			return 0, err
		}
		takeID = proto.CIDOf(takeEnv).String()
		t.Inflight.Name(key, takeID)
	}
	// A resale's reply is checked against the ask as it was taken: the
	// fill's gossip can remove it from the book before the reply arrives.
	var askEnv []byte
	t.Books.With(o.Market, o.Currency, func(s *exchange.Replica) { askEnv = s.Envelope(m.OrderID) })
	tctx, cancel := context.WithTimeout(ctx, TakeTimeout)
	reply, err := p2p.SendTake(tctx, t.Host, maker, takeEnv)
	cancel()
	release := func() {
		if len(take.Gpus) > 0 {
			if err := t.Store.ReleaseGPUs(take.Gpus, takeID); err != nil {
				t.Node.StoreFailed("GPU release", err, takeID) // the hold lapses by itself
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
		return t.Node.TakeResale(o, m, takeEnv, askEnv, body.Resale)
	case *proto.TradeReply_Accept:
		fill := &proto.Fill{Take: takeEnv, Accept: body.Accept}
		ev, err := t.Verified.OpenFill(fill, t.Now())
		if err != nil || ev.Fill.Provider == ev.Fill.Buyer || (ev.Fill.Provider != m.Maker && ev.Fill.Buyer != m.Maker) {
			release()
			return 0, fmt.Errorf("maker sent an invalid accept: %v", err)
		}
		// A forward block starts when its bid said, not when the maker likes.
		if want := t.Node.WantStart(o, blockStart, now); !want.IsZero() && ev.Lease.StartUnixMs != want.UnixMilli() {
			release()
			return 0, fmt.Errorf("maker's lease starts %s, the block at %s", time.UnixMilli(ev.Lease.StartUnixMs).UTC().Format(time.RFC3339), want.UTC().Format(time.RFC3339))
		}
		if len(take.Gpus) > 0 && !blockStart.After(now) {
			end := time.UnixMilli(ev.Lease.StartUnixMs).Add(time.Duration(ev.Lease.DurationS)*time.Second + time.Minute)
			if err := t.Store.ReserveGPUs(take.Gpus, takeID, end); err != nil {
				t.Node.StoreFailed("GPU hold", err, ev.Lease.Id)
			}
		}
		// The maker accepted: the trade stands. Terms that cannot be
		// stored fail the lease, which could not be resumed.
		termsErr := t.Store.PutLease(ev.Lease)
		t.Books.ApplyFill(ev)
		t.Node.StartLease(ev)
		if termsErr != nil {
			t.Node.TermsFailed(ev.Lease.Id, termsErr)
		}
		t.Node.CapacityChanged() // GPUs leased
		// Both parties hold the fill now; its gossip (the maker's too, one
		// message: IDs are the payload's hash) need not hold up the order.
		t.Node.Spawn(func() {
			pctx, cancel := context.WithTimeout(t.Node.Context(), 10*time.Second)
			defer cancel()
			if err := t.Node.PublishBook(pctx, o.Market, &proto.BookMessage{Body: &proto.BookMessage_Fill{Fill: fill}}, ev); err != nil {
				t.Log.Warn("publishing fill failed", "fill", ev.Fill.ID, "err", err)
			}
		})
		return ev.Fill.Quantity, nil
	}
	release()
	return 0, p2p.ErrNoReply
}

// holdTaken chooses the GPUs a provider's take of a bid sells (under the
// trade lock), seals the take, and holds them in the store (after it):
// until the maker's answer for a take of now, for the block from
// blockStart for a forward one.
func (t *Trader) holdTaken(take *proto.Take, key string, blockStart, now time.Time) ([]byte, string, error) {
	dur := time.Duration(take.DurationS) * time.Second
	t.mu.Lock()
	free, err := t.freeLocked(take.Market, blockStart, now, dur)
	if err == nil && uint32(len(free)) < take.Quantity {
		err = fmt.Errorf("only %d GPUs free", len(free))
	}
	var takeEnv []byte
	var takeID string
	if err == nil {
		take.Gpus = free[:take.Quantity]
		takeEnv, err = p2p.SealWith(t.Verified, t.Key, take, proto.MaxBookMessageSize)
	}
	if err == nil {
		takeID = proto.CIDOf(takeEnv).String()
		t.Inflight.Name(key, takeID)
		t.holdLocked(takeID, take.Gpus)
	}
	t.mu.Unlock()
	if err != nil {
		return nil, "", err
	}
	defer t.drop(takeID, take.Gpus)
	if blockStart.After(now) {
		err = t.Store.ReserveBlock(take.Gpus, takeID, blockStart, blockStart.Add(dur))
	} else {
		err = t.Store.ReserveGPUs(take.Gpus, takeID, now.Add(TakeTimeout+time.Minute))
	}
	return takeEnv, takeID, err
}
