package exchange

import (
	"bytes"
	"context"
	"slices"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// A replica keeps beside each open ask the offer it travelled with, hands
// it on by sync and reconciliation, and answers discovery from the book
// with its providers' offers (Offers.FromBook). Offers live minutes and
// are republished; asks live longer. So that the book stays a current
// index of offers, a provider that republishes re-gossips one of its
// open asks in each market it serves with the new offer (Refresh): every
// replica pulls the new offer once, by digest, from the peer that relayed
// it, keeps it beside that ask, and a node that syncs later gets it.
//
// The same ask coming again is a refresh only when it brings a newer
// offer of its maker's than the one kept beside it: a replay of an older
// one, or a duplicate, is ignored and goes no further. Refreshes are
// limited per maker (refreshRate, past the maker's order rate that every
// book message of its spends), since a maker can sign new offers at will
// and each costs every replica a pull and a verify.

// keptOffer is the sealed offer kept beside an open ask and its seq (0
// when unknown). Reconciliation names an ask by both (elemID), so the
// replicas that missed a refresh on gossip get it from their peers: the
// first ask of a provider in an answer carries the offer, and the others
// take it from the cache (checkRefresh).
type keptOffer struct {
	env []byte
	seq uint64
}

// Refresh limits per maker: a provider republishes at a third of its
// offer's TTL and when its capacity changes.
const (
	refreshRate  = rate.Limit(1.0 / 5) // one per 5 s
	refreshBurst = 3
)

// Refresh re-gossips this node's newest open ask in each of mkts (a
// resale ask excepted: its offer is another provider's) with the offer
// Hooks.OfferFor gives now, unless that is the offer kept beside it
// already. A provider calls it after republishing its offer; a failure
// is logged (the next republish tries again).
func (b *Books) Refresh(ctx context.Context, mkts ...string) {
	for _, mkt := range mkts {
		if err := b.refresh(ctx, mkt); err != nil {
			b.cfg.Log.Warn("refreshing the book's offer failed", "market", mkt, "err", err)
		}
	}
}

func (b *Books) refresh(ctx context.Context, mkt string) error {
	if !b.Joined(mkt) || b.cfg.Hooks.OfferFor == nil {
		return nil
	}
	type own struct {
		created time.Time
		env     []byte
		kept    []byte
	}
	var mine []own
	b.Each(func(s *Replica) {
		if s.Book.Market() != mkt {
			return
		}
		for o := range s.Book.Orders(market.Ask) {
			if b.selfMaker(o.Maker) {
				mine = append(mine, own{o.Created, s.envs[o.ID], s.offers[o.ID].env})
			}
		}
	})
	slices.SortFunc(mine, func(a, b own) int { return b.created.Compare(a.created) })
	for _, o := range mine {
		m := &proto.BookMessage{Body: &proto.BookMessage_Order{Order: o.env}}
		data, err := p2p.MarshalBook(m)
		if err != nil {
			return err
		}
		ev, err := b.cfg.Offers.verified().DecodeBook(data, mkt, b.cfg.Now())
		if err != nil || len(ev.OrderProto.GetResell()) > 0 {
			continue // expired meanwhile, or a resale
		}
		if cur := b.cfg.Hooks.OfferFor(ev.OrderProto); cur == nil || bytes.Equal(cur, o.kept) {
			return nil
		}
		return b.Publish(ctx, mkt, m, ev)
	}
	return nil
}

// checkRefresh is the check of an ask this replica holds that came
// again: Accept (relay it) when it brings a newer offer of its maker's
// than the one kept beside it, which it then keeps; Ignore otherwise.
func (b *Books) checkRefresh(ctx context.Context, from peer.ID, ev *p2p.BookEvent) pubsub.ValidationResult {
	o := ev.Order
	if o.Side != market.Ask || len(ev.OrderProto.GetResell()) > 0 {
		return pubsub.ValidationIgnore
	}
	kept := b.kept(o)
	if ev.Offer == nil && len(ev.OfferDigest) == 0 {
		b.adoptCached(o)
		return pubsub.ValidationIgnore
	}
	if ev.Offer != nil && ev.Offer.Seq <= kept.seq {
		return pubsub.ValidationIgnore
	}
	if !b.pullOffer(ctx, ev, from) {
		b.reject("book", "bad-offer")
		return pubsub.ValidationReject
	}
	if ev.Offer == nil || ev.Offer.Seq <= kept.seq || ev.OfferExpired {
		return pubsub.ValidationIgnore // not pulled, or nothing new
	}
	// Charged once per offer, and only for a newer one: a relay replaying
	// the maker's old refreshes does not spend the maker's budget, nor do
	// its other asks brought up to the same offer.
	b.mu.Lock()
	allowed := ev.Offer.Seq <= b.refreshSeqs[o.Maker]
	if !allowed && p2p.AllowIn(b.refreshers, o.Maker, refreshRate, refreshBurst) {
		if len(b.refreshSeqs) > 100_000 {
			clear(b.refreshSeqs)
		}
		b.refreshSeqs[o.Maker], allowed = ev.Offer.Seq, true
	}
	b.mu.Unlock()
	if !allowed {
		b.reject("book", "refresh-rate-limited")
		return pubsub.ValidationIgnore
	}
	b.keepNewer(o, keptOffer{env: ev.OfferEnvelope, seq: ev.Offer.Seq})
	return pubsub.ValidationAccept
}

// adoptCached keeps beside ask o the newest unexpired offer of its maker
// that the cache holds, if newer than the one kept: an ask that came
// again without its offer, by reconciliation beside another ask of its
// provider's that carried the newer one.
func (b *Books) adoptCached(o *market.Order) { b.keepNewer(o, b.cachedFor(o)) }

// keepNewer keeps k beside ask o if o is still open and k is newer than
// the offer kept beside it.
func (b *Books) keepNewer(o *market.Order, k keptOffer) {
	if k.env == nil {
		return
	}
	b.With(o.Market, o.Currency, func(s *Replica) {
		if s.envs[o.ID] != nil && s.offers[o.ID].seq < k.seq {
			s.offers[o.ID] = k
		}
	})
}

// cachedFor is the cache's newest unexpired offer of ask o's maker, with
// its sealed form, or none.
func (b *Books) cachedFor(o *market.Order) keptOffer {
	p, err := peer.Decode(o.Maker)
	if err != nil || b.cfg.Offers == nil {
		return keptOffer{}
	}
	off, env := b.cfg.Offers.newestSealed(p)
	if off == nil {
		return keptOffer{}
	}
	return keptOffer{env: env, seq: off.Seq}
}

// newestSealed is the cached offer of p and its sealed form while it is
// unexpired and its sealed form known, or nils.
func (x *Offers) newestSealed(p peer.ID) (*proto.Offer, []byte) {
	x.mu.Lock()
	defer x.mu.Unlock()
	o, env := x.cache[p], x.envs[p]
	if o == nil || env == nil || !time.UnixMilli(o.ExpiresUnixMs).After(x.cfg.Now()) {
		return nil, nil
	}
	return o, env
}

// keptFor is the offer to keep beside the order of ev as it rests: the
// one it travelled with, or for an ask that came without (by sync or
// reconciliation, beside another ask of its provider's that carried it)
// the cache's newest of its maker, as adoptCached would take, so that a
// replica that synced names it as its peers do (elemID).
func (b *Books) keptFor(ev *p2p.BookEvent) keptOffer {
	switch {
	case ev.OfferEnvelope != nil:
		return keptOffer{env: ev.OfferEnvelope, seq: ev.Offer.GetSeq()}
	case ev.Order.Side != market.Ask || len(ev.OrderProto.GetResell()) > 0:
		return keptOffer{}
	}
	return b.cachedFor(ev.Order)
}

// kept is the offer kept beside open order o.
func (b *Books) kept(o *market.Order) (k keptOffer) {
	b.With(o.Market, o.Currency, func(s *Replica) { k = s.offers[o.ID] })
	return k
}
