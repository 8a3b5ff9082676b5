package exchange

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// JoinMarket subscribes to a market's book topic, registers its
// validator, and fetches the open orders from a few peers (or, when none
// answers, from the first peer that joins the topic). Joining twice is a
// no-op. mkt must be a valid market key.
func (b *Books) JoinMarket(ctx context.Context, mkt string) error {
	b.mu.Lock()
	if _, ok := b.topics[mkt]; ok {
		b.mu.Unlock()
		return nil
	}
	name := p2p.BookTopic(mkt)
	ps := b.cfg.PubSub
	if err := ps.RegisterTopicValidator(name, b.validator(mkt),
		pubsub.WithValidatorTimeout(OfferFetchTimeout+time.Second), pubsub.WithValidatorConcurrency(64)); err != nil {
		b.mu.Unlock()
		return fmt.Errorf("exchange: book validator: %w", err)
	}
	t, err := ps.Join(name)
	if err != nil {
		b.mu.Unlock()
		return fmt.Errorf("exchange: join %s: %w", name, err)
	}
	if err := t.SetScoreParams(p2p.BookTopicScoreParams()); err != nil {
		b.cfg.Log.Warn("book topic scoring", "err", err)
	}
	sub, err := t.Subscribe()
	if err != nil {
		b.mu.Unlock()
		return fmt.Errorf("exchange: subscribe %s: %w", name, err)
	}
	b.topics[mkt] = t
	b.joined[mkt] = time.Now()
	b.mu.Unlock()

	b.wg.Add(1)
	go b.read(mkt, sub)
	start := time.Now()
	// Peers that join the topic from now on: the first sync if this one
	// finds nobody holding the book (a node that is still bootstrapping
	// knows no one), then a reconciliation with each (after a partition
	// heals, what either side did while cut off).
	evh, err := t.EventHandler()
	synced := b.sync(ctx, mkt)
	if err == nil {
		b.wg.Add(1)
		go b.syncOnPeer(mkt, evh, synced)
	}
	b.cfg.Log.Info("joined market", "market", mkt, "sync", time.Since(start).Round(time.Millisecond))
	return nil
}

// read applies every accepted message of a market's topic.
func (b *Books) read(mkt string, sub *pubsub.Subscription) {
	defer b.wg.Done()
	defer sub.Cancel()
	for {
		msg, err := sub.Next(b.ctx)
		if err != nil {
			return
		}
		if ev, ok := msg.ValidatorData.(*p2p.BookEvent); ok {
			b.Apply(mkt, ev)
		}
	}
}

// validator is the topic validator of one market: the author's rate
// limit (Ignore), stateless checks in p2p.DecodeBook and the author's
// right to publish the object (Reject: the sender is penalized), then the
// replica's (duplicates and rate limits are Ignore; an ask its provider's
// offer does not cover is Reject).
func (b *Books) validator(mkt string) pubsub.ValidatorEx {
	self := b.cfg.Host.ID()
	return func(ctx context.Context, from peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
		if from == self && msg.ValidatorData != nil {
			return pubsub.ValidationAccept // our own, built and checked by us
		}
		author := msg.GetFrom()
		if !b.allowAuthor(author) {
			b.reject("book", "author-rate-limited")
			return pubsub.ValidationIgnore
		}
		if why := b.RefuseEarly(msg.Data, author, from); why != "" {
			b.reject("book", why) // admission.go: before any verify
			return pubsub.ValidationIgnore
		}
		ev, err := b.cfg.Offers.verified().DecodeBook(msg.Data, mkt, b.cfg.Now())
		if err != nil {
			b.reject("book", p2p.BookReason(err))
			b.cfg.Log.Debug("book message rejected", "market", mkt, "from", from, "err", err)
			return pubsub.ValidationReject
		}
		if !AuthoredBy(ev, author) {
			b.reject("book", "not-author")
			b.cfg.Log.Debug("book message from another author", "market", mkt, "author", author, "kind", ev.Kind)
			return pubsub.ValidationReject
		}
		res, local := b.checkRelay(ctx, from, ev)
		if res == pubsub.ValidationAccept && local {
			// An unstamped maker's: kept here, not relayed, so a free
			// key costs the network its first hops only.
			b.Apply(mkt, ev)
			kind := "book"
			if ev.Kind == p2p.KindFill {
				kind = "fill"
			}
			b.reject(kind, "new-maker-not-relayed")
			return pubsub.ValidationIgnore
		}
		if res == pubsub.ValidationAccept {
			msg.ValidatorData = ev
			p2p.ShareGossipData(msg) // an ask's offer: one copy per process
		}
		return res
	}
}

// AuthoredBy reports whether author may publish ev on a book topic: an
// order or a cancel only its maker, a fill only its buyer or provider.
// Whoever relays a message, its author signed it (pubsub's StrictSign), so
// the limits per maker are limits per publishing identity too.
func AuthoredBy(ev *p2p.BookEvent, author peer.ID) bool {
	a := author.String()
	switch ev.Kind {
	case p2p.KindOrder:
		return ev.Order != nil && ev.Order.Maker == a
	case p2p.KindCancel:
		maker, err := peer.IDFromBytes(ev.Cancel.GetMaker())
		return err == nil && maker == author
	case p2p.KindFill:
		return ev.Fill != nil && (ev.Fill.Buyer == a || ev.Fill.Provider == a)
	}
	return false
}

// sync asks a few peers that hold the market's book — peers already in
// its topic, else the market's providers and the peers whose subscription
// to the topic arrives meanwhile — for its open orders and recent fills,
// verifying each message as if it had been gossiped. It asks each peer as
// soon as it is found, syncPeers of them at most, all at once, and stops
// looking once that many have been asked: a node that has just connected
// learns its peers' subscriptions a moment later and need not wait for a
// whole provider-record lookup. Connecting to providers also brings them
// into the topic's mesh. It reports whether any peer answered.
func (b *Books) sync(ctx context.Context, mkt string) (answered bool) {
	b.mu.Lock()
	t := b.topics[mkt]
	b.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	initial := t.ListPeers()
	rand.Shuffle(len(initial), func(i, j int) { initial[i], initial[j] = initial[j], initial[i] })
	found := make(chan peer.ID, 4*syncPeers)
	lookedUp := make(chan struct{})
	if len(initial) < syncPeers && b.cfg.Providers != nil {
		if evh, err := t.EventHandler(); err == nil {
			go func() {
				defer evh.Cancel()
				for {
					ev, err := evh.NextPeerEvent(ctx)
					if err != nil {
						return
					}
					if ev.Type == pubsub.PeerJoin {
						select {
						case found <- ev.Peer:
						case <-ctx.Done():
							return
						}
					}
				}
			}()
		}
		go func() {
			defer close(lookedUp)
			pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
			defer pcancel()
			for _, ai := range b.cfg.Providers(pctx, mkt, 2*syncPeers) {
				if slices.Contains(initial, ai.ID) || b.cfg.Host.Connect(pctx, ai) != nil {
					continue
				}
				select {
				case found <- ai.ID:
				case <-ctx.Done():
					return
				}
			}
		}()
	} else {
		close(lookedUp)
	}
	// The answers are applied as they come, under the Books' context: one
	// that comes after sync returned still counts.
	bg := b.ctx
	if bg == nil {
		bg = ctx
	}
	results := make(chan bool, syncPeers)
	seen := map[peer.ID]bool{}
	asked, pending := 0, 0
	ask := func(p peer.ID) {
		if seen[p] || asked == syncPeers {
			return
		}
		seen[p] = true
		asked++
		pending++
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			results <- b.syncFrom(bg, mkt, p)
		}()
	}
	for _, p := range initial {
		ask(p)
	}
	start := time.Now()
	looking := lookedUp
	var grace <-chan time.Time
	for pending > 0 || (asked < syncPeers && looking != nil) {
		select {
		case ok := <-results:
			pending--
			if ok && !answered {
				// One peer's book is here: wait a little for the others
				// (they could withhold orders), not for a slow lookup.
				answered = true
				grace = time.After(max(syncGrace, 2*time.Since(start)))
			}
		case p := <-found:
			ask(p)
		case <-looking:
			looking = nil
		case <-grace:
			return answered
		case <-ctx.Done():
			return answered
		}
	}
	return answered
}

// syncGrace is the least time sync waits for more peers' answers after
// the first (twice the first's time when that is longer).
const syncGrace = 250 * time.Millisecond

// syncFrom asks one peer for a market's open orders and recent fills and
// applies what validates.
func (b *Books) syncFrom(ctx context.Context, mkt string, p peer.ID) (answered bool) {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	msgs, err := p2p.RequestSync(sctx, b.cfg.Host, p, mkt)
	cancel()
	if err != nil {
		b.cfg.Log.Debug("book sync failed", "peer", p, "err", err)
	} else {
		answered = true
	}
	b.applyData(ctx, mkt, "sync", msgs)
	return answered
}

// applyItems applies the book messages a peer sent by sync or
// reconciliation (kind, for the rejects) as if they had been gossiped.
func (b *Books) applyItems(ctx context.Context, mkt, kind string, items []*proto.BookMessage) (changed int) {
	data := make([][]byte, 0, len(items))
	for _, m := range items {
		d, err := p2p.MarshalBook(m)
		if err != nil {
			b.reject(kind, "schema")
			continue
		}
		data = append(data, d)
	}
	return b.applyData(ctx, mkt, kind, data)
}

// applyData is applyItems for encoded messages; it returns how many
// changed the replica and were no longer in flight (settled).
func (b *Books) applyData(ctx context.Context, mkt, kind string, msgs [][]byte) (changed int) {
	for _, data := range msgs {
		if why := b.refuseUnstamped(data); why != "" {
			b.reject(kind, why) // carry.go: before any verify
			continue
		}
		ev, err := b.cfg.Offers.verified().DecodeBook(data, mkt, b.cfg.Now())
		if err != nil {
			// A fill may outlive the orders it names; anything else
			// that fails is the peer's fault.
			b.reject(kind, p2p.BookReason(err))
			continue
		}
		if b.check(ctx, ev) == pubsub.ValidationAccept && b.apply(mkt, ev) && settled(ev, b.cfg.Now()) {
			changed++
		}
	}
	return changed
}

// inFlight is how long after its creation a book message may still be on
// its way by gossip: one that arrives younger by sync or reconciliation
// is not news that needs spreading.
const inFlight = 5 * time.Second

// settled reports whether ev was made more than inFlight before now.
func settled(ev *p2p.BookEvent, now time.Time) bool {
	var at time.Time
	switch ev.Kind {
	case p2p.KindOrder:
		at = ev.Order.Created
	case p2p.KindCancel:
		at = time.UnixMilli(ev.Cancel.CreatedUnixMs)
	case p2p.KindFill:
		at = ev.Fill.Time
	}
	return now.Sub(at) > inFlight
}

// syncOnPeer syncs a market's book once the first peer joins its topic
// (unless synced already), and reconciles with each peer that comes back
// to the topic (rate-limited): after a partition heals, what was gossiped
// on the other side, cancels and fills included, is exchanged both ways.
func (b *Books) syncOnPeer(mkt string, evh *pubsub.TopicEventHandler, synced bool) {
	defer b.wg.Done()
	defer evh.Cancel()
	limit := rate.NewLimiter(resyncRate, resyncBurst)
	// Peers seen in the topic before: a peer that joins for the first time
	// is the topic forming (the sync covered it, or it syncs itself); one
	// that comes back was cut off, and what it did meanwhile is exchanged.
	seen := map[peer.ID]bool{}
	for {
		ev, err := evh.NextPeerEvent(b.ctx)
		if err != nil {
			return
		}
		if ev.Type != pubsub.PeerJoin {
			continue
		}
		back := seen[ev.Peer]
		if len(seen) > 100_000 {
			clear(seen)
		}
		seen[ev.Peer] = true
		switch {
		case !synced:
			synced = b.sync(b.ctx, mkt)
		case back && limit.Allow():
			// A peer that comes back may have been on the other side of
			// a partition: reconcile with it (what either lacks, both
			// ways, cancels and fills included).
			ctx, cancel := context.WithTimeout(b.ctx, p2p.ReconcileTimeout)
			st, err := b.ReconcileWith(ctx, mkt, ev.Peer)
			cancel()
			if err == nil && st.Changed > 0 {
				b.kickReconcile()
			}
		}
	}
}

// AnswerSync is SyncAnswer for a peer asking by p2p.HandleSync, at most
// syncAnswerBurst times at once and syncAnswerRate a second per peer: an
// answer can be a replica's whole book, and asking costs nothing.
func (b *Books) AnswerSync(from peer.ID, mkt string) ([]*proto.BookMessage, error) {
	b.mu.Lock()
	allowed := p2p.AllowIn(b.syncers, from, syncAnswerRate, syncAnswerBurst)
	b.mu.Unlock()
	if !allowed {
		b.reject("sync-request", "rate-limited")
		return nil, errSyncRate
	}
	return b.SyncAnswer(mkt), nil
}

var errSyncRate = errors.New("exchange: book sync asked too often")

// SyncAnswer lists a market's open orders, with the offer of each
// provider beside its first ask, the cancels and fills its replicas keep
// as tombstones, for a late joiner (p2p.HandleSync). An order that has
// expired is left out even before the sweep drops it from the book.
func (b *Books) SyncAnswer(mkt string) []*proto.BookMessage {
	set, _ := b.elements(mkt, true)
	return set.messages()
}

// Publish gossips a book message whose event ev this node built and
// checked itself. Right after joining a topic it waits briefly for a peer
// in it: a message published before the mesh forms can be lost (late
// joiners get it by sync anyway, so the wait is short).
func (b *Books) Publish(ctx context.Context, mkt string, m *proto.BookMessage, ev *p2p.BookEvent) error {
	b.mu.Lock()
	t, joined := b.topics[mkt], b.joined[mkt]
	b.mu.Unlock()
	if t == nil {
		return errNotJoined(mkt)
	}
	m = b.attach(m, ev)
	if st := b.Stamp(); st != nil && b.mine(ev) {
		m = &proto.BookMessage{Body: m.Body, Offer: m.Offer, OfferDigest: m.OfferDigest, CancelledOrder: m.CancelledOrder, MakerStamp: st}
	}
	data, err := p2p.MarshalBook(m)
	if err != nil {
		return err
	}
	if len(t.ListPeers()) == 0 && time.Since(joined) < meshWait {
		rctx, cancel := context.WithTimeout(ctx, meshWait-time.Since(joined))
		err := t.Publish(rctx, data, pubsub.WithValidatorData(ev), pubsub.WithReadiness(pubsub.MinTopicSize(1)))
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
	}
	return t.Publish(ctx, data, pubsub.WithValidatorData(ev))
}

// attach returns m with what travels beside it: an ask's offer (of
// Hooks.OfferFor's envelope, which the replica keeps to hand on by sync
// and answers pulls of), whole on the first ask of the market that it
// backs if it is no larger than Config.InlineOfferMax (0 by default:
// never), and by digest otherwise; a cancel's order, from
// its tombstone, whose sealed form it records. ev gets the envelope of a
// cancel, as DecodeBook would have set it.
func (b *Books) attach(m *proto.BookMessage, ev *p2p.BookEvent) *proto.BookMessage {
	switch {
	case ev.Kind == p2p.KindOrder && ev.Order.Side == market.Ask && m.Offer == nil && m.OfferDigest == nil && b.cfg.Hooks.OfferFor != nil:
		env := b.cfg.Hooks.OfferFor(ev.OrderProto)
		if env == nil {
			return m
		}
		o := ev.Order
		kept := keptOffer{env: env}
		if off, _, err := b.cfg.Offers.verified().OpenOffer(env, b.cfg.Now()); err == nil {
			kept.seq = off.Seq // as the replicas that get it keep it: reconciliation names asks by it
		}
		b.With(o.Market, o.Currency, func(s *Replica) {
			if _, _, ok := s.Book.Lookup(o.ID); ok {
				s.offers[o.ID] = kept
			}
		})
		d := p2p.OfferDigest(env) // OfferFor's envelopes are Offers' own or cached: Held answers pulls of it
		b.mu.Lock()
		first := b.inlined[o.Market] != d && len(env) <= b.cfg.InlineOfferMax
		if first {
			b.inlined[o.Market] = d
		}
		b.mu.Unlock()
		if first {
			return &proto.BookMessage{Body: m.Body, Offer: env}
		}
		return &proto.BookMessage{Body: m.Body, OfferDigest: d[:]}
	case ev.Kind == p2p.KindCancel && m.GetCancel() != nil:
		ev.Envelope = m.GetCancel()
		maker, err := peer.IDFromBytes(ev.Cancel.GetMaker())
		if err != nil {
			return m
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		c := b.tombsOf(ev.Cancel.Market).cancels[cancelKey{maker.String(), ev.Cancel.OrderId}]
		if c == nil || c.order == nil {
			return m
		}
		if c.env == nil {
			c.env = ev.Envelope
		}
		return &proto.BookMessage{Body: m.Body, CancelledOrder: c.order}
	}
	return m
}

// mine reports whether this node made ev: an order or a cancel of its
// own, a fill it is a party to. Its stamp travels beside it.
func (b *Books) mine(ev *p2p.BookEvent) bool {
	return slices.ContainsFunc(eventMakers(ev), b.selfMaker)
}

// Stamp is the maker stamp this node's orders travel with now, or nil
// (none configured, or still being ground).
func (b *Books) Stamp() []byte {
	if b.cfg.Stamp == nil {
		return nil
	}
	return b.cfg.Stamp()
}
