package node

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// Order-book replica tuning.
const (
	// maxRecentFills is how many fills per market a node keeps in memory
	// for `trades`, the spot price and late joiners.
	maxRecentFills = 1000
	// orderRate and orderBurst bound how many book messages per second one
	// maker may get through this node's validator.
	orderRate  = 20
	orderBurst = 40
	// offerFetchTimeout bounds fetching an ask's offer while validating it.
	offerFetchTimeout = 5 * time.Second
	// syncPeers is how many peers a node asks for a market's open orders.
	syncPeers = 3
	// meshWait is how long after joining a topic a publication waits for
	// the first peer in it.
	meshWait = 2 * time.Second
)

// bookState is one market's replica in one currency.
type bookState struct {
	book  *market.Book
	index *market.Index
	// envs holds the sealed envelope of every open order, for late joiners.
	envs map[string][]byte
	// fills are the recent fills, oldest first.
	fills []tradeRecord
}

type tradeRecord struct {
	fill  market.Fill
	lease *proto.Lease
	raw   *proto.Fill
}

// books is a node's set of market replicas and their gossip subscriptions.
type books struct {
	mu       sync.Mutex
	states   map[string]*bookState // by market + "/" + currency
	topics   map[string]*pubsub.Topic
	joined   map[string]time.Time     // when each topic was joined
	limiters map[string]*rate.Limiter // by maker
	kick     chan string              // markets whose crossing to re-check
}

func newBooks() *books {
	return &books{
		states:   map[string]*bookState{},
		topics:   map[string]*pubsub.Topic{},
		joined:   map[string]time.Time{},
		limiters: map[string]*rate.Limiter{},
		kick:     make(chan string, 64),
	}
}

func bookKey(mkt, cur string) string { return mkt + "/" + cur }

// state returns the replica of a market in a currency, creating it.
// Callers hold b.mu.
func (b *books) state(mkt, cur string) (*bookState, error) {
	k := bookKey(mkt, cur)
	if s, ok := b.states[k]; ok {
		return s, nil
	}
	bk, err := market.NewBook(mkt, cur)
	if err != nil {
		return nil, err
	}
	ix, err := market.NewIndex(mkt, cur)
	if err != nil {
		return nil, err
	}
	s := &bookState{book: bk, index: ix, envs: map[string][]byte{}}
	b.states[k] = s
	return s, nil
}

func (b *books) allow(maker string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	l, ok := b.limiters[maker]
	if !ok {
		if len(b.limiters) > 100_000 {
			clear(b.limiters)
		}
		l = rate.NewLimiter(orderRate, orderBurst)
		b.limiters[maker] = l
	}
	return l.Allow()
}

// JoinMarket subscribes to a market's book topic, registers its validator,
// and fetches the open orders from a few peers. Joining twice is a no-op.
func (n *Node) JoinMarket(ctx context.Context, mkt string) error {
	if !market.ValidMarketKey(mkt) || mkt == "" {
		return api.BadRequest("market %q: want a key like nvidia-h100-sxm5-80gb", mkt)
	}
	n.books.mu.Lock()
	if _, ok := n.books.topics[mkt]; ok {
		n.books.mu.Unlock()
		return nil
	}
	name := p2p.BookTopic(mkt)
	if err := n.ps.RegisterTopicValidator(name, n.validateBook(mkt),
		pubsub.WithValidatorTimeout(offerFetchTimeout+time.Second), pubsub.WithValidatorConcurrency(64)); err != nil {
		n.books.mu.Unlock()
		return fmt.Errorf("node: book validator: %w", err)
	}
	t, err := n.ps.Join(name)
	if err != nil {
		n.books.mu.Unlock()
		return fmt.Errorf("node: join %s: %w", name, err)
	}
	if err := t.SetScoreParams(p2p.BookTopicScoreParams()); err != nil {
		n.log.Warn("book topic scoring", "err", err)
	}
	sub, err := t.Subscribe()
	if err != nil {
		n.books.mu.Unlock()
		return fmt.Errorf("node: subscribe %s: %w", name, err)
	}
	n.books.topics[mkt] = t
	n.books.joined[mkt] = time.Now()
	n.books.mu.Unlock()

	n.wg.Add(1)
	go n.readBook(mkt, sub)
	start := time.Now()
	if !n.syncBook(ctx, mkt) {
		// Nobody holding the book answered (a node that is still
		// bootstrapping knows no one): sync when the first peer joins.
		if evh, err := t.EventHandler(); err == nil {
			n.wg.Add(1)
			go n.syncOnPeer(mkt, evh)
		}
	}
	n.log.Info("joined market", "market", mkt, "sync", time.Since(start).Round(time.Millisecond))
	return nil
}

// readBook applies every accepted message of a market's topic.
func (n *Node) readBook(mkt string, sub *pubsub.Subscription) {
	defer n.wg.Done()
	defer sub.Cancel()
	for {
		msg, err := sub.Next(n.ctx)
		if err != nil {
			return
		}
		if ev, ok := msg.ValidatorData.(*p2p.BookEvent); ok {
			n.applyBook(mkt, ev)
		}
	}
}

// validateBook is the topic validator of one market: stateless checks in
// p2p.DecodeBook (Reject: the sender is penalized), then the replica's
// (duplicates and rate limits are Ignore; an ask its provider's offer does
// not cover is Reject).
func (n *Node) validateBook(mkt string) pubsub.ValidatorEx {
	return func(ctx context.Context, from peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
		if from == n.host.ID() && msg.ValidatorData != nil {
			return pubsub.ValidationAccept // our own, built and checked by us
		}
		ev, err := p2p.DecodeBook(msg.Data, mkt, n.now())
		if err != nil {
			n.metrics.rejects.WithLabelValues("book", p2p.BookReason(err)).Inc()
			n.log.Debug("book message rejected", "market", mkt, "from", from, "err", err)
			return pubsub.ValidationReject
		}
		res := n.checkBookEvent(ctx, ev)
		if res == pubsub.ValidationAccept {
			msg.ValidatorData = ev
		}
		return res
	}
}

// checkBookEvent is the stateful part of validation, shared by gossip and sync.
func (n *Node) checkBookEvent(ctx context.Context, ev *p2p.BookEvent) pubsub.ValidationResult {
	switch ev.Kind {
	case p2p.KindOrder:
		o := ev.Order
		if !n.books.allow(o.Maker) {
			n.metrics.rejects.WithLabelValues("book", "rate-limited").Inc()
			return pubsub.ValidationIgnore
		}
		n.books.mu.Lock()
		s, err := n.books.state(o.Market, o.Currency)
		if err == nil {
			_, _, held := s.book.Lookup(o.ID)
			if held {
				n.books.mu.Unlock()
				return pubsub.ValidationIgnore
			}
		}
		n.books.mu.Unlock()
		if o.Side == market.Ask {
			if err := n.askFactsOf(ctx, o, ev.OrderProto); err != nil {
				if errors.Is(err, errOfferUnknown) {
					n.metrics.rejects.WithLabelValues("book", "offer-unknown").Inc()
					return pubsub.ValidationIgnore
				}
				n.metrics.rejects.WithLabelValues("book", "offer-mismatch").Inc()
				n.log.Debug("ask refused", "order", o.ID, "err", err)
				return pubsub.ValidationReject
			}
		}
	case p2p.KindCancel:
		maker, _ := peer.IDFromBytes(ev.Cancel.Maker)
		if !n.books.allow(maker.String()) {
			n.metrics.rejects.WithLabelValues("book", "rate-limited").Inc()
			return pubsub.ValidationIgnore
		}
	}
	return pubsub.ValidationAccept
}

var errOfferUnknown = errors.New("node: provider's offer not found")

// askFacts checks that an ask is backed by its maker's current offer (its
// GPUs in this market cover the quantity, in the ask's currency) and fills
// the ask's facts from that offer.
func (n *Node) askFacts(ctx context.Context, o *market.Order, seq uint64) error {
	pid, err := peer.Decode(o.Maker)
	if err != nil {
		return err
	}
	offer, err := n.offerOf(ctx, pid, seq)
	if err != nil {
		return err
	}
	count := 0
	var mem uint64
	for _, g := range offer.Gpus {
		if g.Market == o.Market {
			count++
			mem = g.MemoryBytes
		}
	}
	switch {
	case offer.Seq < seq:
		return fmt.Errorf("%w: ask names offer seq %d, newest is %d", errOfferUnknown, seq, offer.Seq)
	case uint32(count) < o.Quantity:
		return fmt.Errorf("ask for %d GPUs, offer has %d in %s", o.Quantity, count, o.Market)
	case offer.GetPricing().GetCurrency() != o.Currency:
		return fmt.Errorf("ask in %s, offer in %s", o.Currency, offer.GetPricing().GetCurrency())
	}
	o.Facts = market.Facts{Region: offer.Region, Attestation: n.attestedLevel(ctx, pid, offer), MemoryBytes: mem}
	return nil
}

// offerOf returns a provider's offer, from this node itself, the in-memory
// cache, or the DHT (bounded by offerFetchTimeout).
func (n *Node) offerOf(ctx context.Context, p peer.ID, minSeq uint64) (*proto.Offer, error) {
	if p == n.host.ID() {
		if o := n.Published(); o != nil {
			return o, nil
		}
	}
	n.offerMu.Lock()
	o, ok := n.offerCache[p]
	n.offerMu.Unlock()
	if ok && o.Seq >= minSeq && time.UnixMilli(o.ExpiresUnixMs).After(n.now()) {
		return o, nil
	}
	ctx, cancel := context.WithTimeout(ctx, offerFetchTimeout)
	defer cancel()
	// The first valid record does unless it is older than the order needs.
	f, err := n.dht.FetchOfferFirst(ctx, p)
	if err != nil || f.Offer.Seq < minSeq {
		f, err = n.dht.FetchOffer(ctx, p)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errOfferUnknown, p, err)
	}
	n.rememberOffer(f.Provider, f.Offer)
	return f.Offer, nil
}

func (n *Node) rememberOffer(p peer.ID, o *proto.Offer) {
	n.offerMu.Lock()
	defer n.offerMu.Unlock()
	if cur, ok := n.offerCache[p]; !ok || cur.Seq < o.Seq {
		if len(n.offerCache) > 100_000 {
			clear(n.offerCache)
		}
		n.offerCache[p] = o
	}
}

// applyBook applies a verified book event to the replica.
func (n *Node) applyBook(mkt string, ev *p2p.BookEvent) {
	now := n.now()
	switch ev.Kind {
	case p2p.KindOrder:
		o := ev.Order
		n.books.mu.Lock()
		s, err := n.books.state(o.Market, o.Currency)
		if err == nil {
			err = s.book.Add(o, now)
		}
		if err == nil {
			s.envs[o.ID] = ev.Envelope
		}
		n.books.mu.Unlock()
		if err != nil {
			if !errors.Is(err, market.ErrDuplicate) {
				n.metrics.rejects.WithLabelValues("book", market.Reason(err)).Inc()
				n.log.Debug("order not added", "order", o.ID, "err", err)
			}
			return
		}
		n.metrics.orders.Inc()
		if o.Maker != n.host.ID().String() {
			n.kickMarket(mkt)
		}
	case p2p.KindCancel:
		maker, _ := peer.IDFromBytes(ev.Cancel.Maker)
		n.books.mu.Lock()
		for _, s := range n.books.states {
			if s.book.Market() != mkt {
				continue
			}
			if err := s.book.Cancel(ev.Cancel.OrderId, maker.String()); err == nil {
				delete(s.envs, ev.Cancel.OrderId)
			}
		}
		n.books.mu.Unlock()
		n.ownCancelled(ev.Cancel.OrderId)
	case p2p.KindFill:
		n.applyFill(ev)
	}
}

// applyFill applies a fill once: book, index, recent fills, Badger, and
// the node's own orders and leases when it is a party.
func (n *Node) applyFill(ev *p2p.BookEvent) {
	f := *ev.Fill
	now := n.now()
	n.books.mu.Lock()
	s, err := n.books.state(f.Market, f.Currency)
	if err != nil {
		n.books.mu.Unlock()
		return
	}
	err = s.book.ApplyFill(f)
	if err != nil {
		n.books.mu.Unlock()
		if !errors.Is(err, market.ErrDuplicate) {
			n.metrics.rejects.WithLabelValues("fill", market.Reason(err)).Inc()
			n.log.Warn("fill refused by the book", "fill", f.ID, "err", err)
		}
		if isFillEvidence(err) && ev.Raw != nil {
			if perr := n.putFillEvidence(f, ev.Raw, err, now); perr != nil {
				n.storeFailed(&storeError{what: "fill evidence", err: perr}, f.ID)
			}
		}
		return
	}
	if err := s.index.Add(f, now); err != nil {
		n.log.Debug("fill not indexed", "fill", f.ID, "err", err)
	}
	// Under the book lock, so whoever sees the spot move sees the history.
	index, _ := s.index.Value(now)
	n.recordHistory(f, index)
	for _, id := range []string{f.BidID, f.AskID} {
		if _, _, ok := s.book.Lookup(id); !ok {
			delete(s.envs, id)
		}
	}
	s.fills = append(s.fills, tradeRecord{fill: f, lease: ev.Lease, raw: ev.Raw})
	if len(s.fills) > maxRecentFills {
		s.fills = slices.Delete(s.fills, 0, len(s.fills)-maxRecentFills)
	}
	// Still under the book lock: whoever sees the book change also sees
	// the node's own order record it.
	if me := n.host.ID().String(); f.Buyer == me || f.Provider == me {
		n.ownFilled(f, ev.Lease)
	}
	n.books.mu.Unlock()
	if me := n.host.ID().String(); f.Buyer == me || f.Provider == me {
		n.leaseFromFill(ev)
	}
	n.metrics.fills.Inc()
	if err := n.store.PutFill(f.ID, f.Time, ev.Raw); err != nil {
		// The lease keeps the signed fill in its own record too.
		n.storeFailed(&storeError{what: "fill", err: err}, ev.Lease.Id)
	}
	n.recordHistory(f, index)
	n.log.Info("trade", "market", f.Market, "count", f.Quantity, "price", market.FormatMicros(f.Price, f.Currency),
		"currency", f.Currency, "buyer", short(f.Buyer), "provider", short(f.Provider), "lease", ev.Lease.Id)
}

// syncBook asks a few peers that hold the market's book — peers already
// in its topic, else the market's providers found in the DHT — for its open
// orders and recent fills, verifying each message as if it had been
// gossiped. Connecting to them also brings them into the topic's mesh.
// It reports whether any peer answered.
func (n *Node) syncBook(ctx context.Context, mkt string) (answered bool) {
	n.books.mu.Lock()
	t := n.books.topics[mkt]
	n.books.mu.Unlock()
	cands := t.ListPeers()
	if len(cands) < syncPeers {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		for _, ai := range n.dht.Providers(pctx, mkt, 2*syncPeers) {
			if !slices.Contains(cands, ai.ID) && n.host.Connect(pctx, ai) == nil {
				cands = append(cands, ai.ID)
			}
		}
		cancel()
	}
	rand.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	asked := 0
	for _, p := range cands {
		if asked == syncPeers {
			break
		}
		asked++
		answered = n.syncFrom(ctx, mkt, p) || answered
	}
	return answered
}

// syncFrom asks one peer for a market's open orders and recent fills and
// applies what validates.
func (n *Node) syncFrom(ctx context.Context, mkt string, p peer.ID) (answered bool) {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	msgs, err := p2p.RequestSync(sctx, n.host, p, mkt)
	cancel()
	if err != nil {
		n.log.Debug("book sync failed", "peer", p, "err", err)
	} else {
		answered = true
	}
	for _, data := range msgs {
		ev, err := p2p.DecodeBook(data, mkt, n.now())
		if err != nil {
			// A fill may outlive the orders it names; anything else
			// that fails is the peer's fault.
			n.metrics.rejects.WithLabelValues("sync", p2p.BookReason(err)).Inc()
			continue
		}
		if n.checkBookEvent(ctx, ev) == pubsub.ValidationAccept {
			n.applyBook(mkt, ev)
		}
	}
	return answered
}

// syncOnPeer syncs a market's book once the first peer joins its topic,
// and from each peer that joins later (rate-limited): after a partition
// heals, the orders gossiped on the other side are fetched.
func (n *Node) syncOnPeer(mkt string, evh *pubsub.TopicEventHandler) {
	defer n.wg.Done()
	defer evh.Cancel()
	synced := false
	limit := rate.NewLimiter(resyncRate, resyncBurst)
	for {
		ev, err := evh.NextPeerEvent(n.ctx)
		if err != nil {
			return
		}
		switch {
		case ev.Type != pubsub.PeerJoin:
		case !synced:
			synced = n.syncBook(n.ctx, mkt)
		case limit.Allow():
			// A peer that joins later may have been on the other side of
			// a partition: ask it what it holds.
			n.syncFrom(n.ctx, mkt, ev.Peer)
		}
	}
}

// resyncRate and resyncBurst bound the re-syncs from peers that join a
// market's topic after the first sync, per market.
const (
	resyncRate  = 1
	resyncBurst = 3
)

// syncAnswer lists a market's open orders and recent fills for a late
// joiner. An order that has expired is left out even before the sweep
// drops it from the book.
func (n *Node) syncAnswer(mkt string) []*proto.BookMessage {
	now := n.now()
	n.books.mu.Lock()
	defer n.books.mu.Unlock()
	var out []*proto.BookMessage
	for _, s := range n.books.states {
		if s.book.Market() != mkt {
			continue
		}
		for _, r := range s.fills {
			out = append(out, &proto.BookMessage{Body: &proto.BookMessage_Fill{Fill: r.raw}})
		}
		for id, env := range s.envs {
			if o, _, ok := s.book.Lookup(id); !ok || !o.Expires.After(now) {
				continue
			}
			out = append(out, &proto.BookMessage{Body: &proto.BookMessage_Order{Order: env}})
		}
	}
	return out
}

// publishBook gossips a book message. Right after joining a topic it waits
// briefly for a peer in it: a message published before the mesh forms can
// be lost (late joiners get it by sync anyway, so the wait is short).
func (n *Node) publishBook(ctx context.Context, mkt string, m *proto.BookMessage, ev *p2p.BookEvent) error {
	n.books.mu.Lock()
	t, joined := n.books.topics[mkt], n.books.joined[mkt]
	n.books.mu.Unlock()
	if t == nil {
		return fmt.Errorf("node: not in market %s", mkt)
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

func (n *Node) kickMarket(mkt string) {
	select {
	case n.books.kick <- mkt:
	default:
	}
}

// defaultSweepInterval is how often the replicas drop expired orders.
const defaultSweepInterval = 30 * time.Second

// crossLoop makes this node the taker whenever one of its resting orders
// becomes crossable (a new opposite order arrived at or through its
// price), and sweeps expired orders from the replicas every sweep
// interval. The sweep runs on a ticker, not a timer re-armed by each kick:
// steady traffic must not put it off forever.
func (n *Node) crossLoop(every time.Duration) {
	defer n.wg.Done()
	sweep := time.NewTicker(every)
	defer sweep.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case mkt := <-n.books.kick:
			n.takeCrossing(mkt)
		case <-sweep.C:
			n.sweepBooks()
		}
	}
}

func (n *Node) takeCrossing(mkt string) {
	me := n.host.ID().String()
	n.books.mu.Lock()
	var mine []market.Order
	for _, s := range n.books.states {
		if s.book.Market() != mkt {
			continue
		}
		for _, c := range s.book.Crossing(me, n.now()) {
			if o, _, ok := s.book.Lookup(c.OrderID); ok {
				mine = append(mine, o)
			}
		}
	}
	n.books.mu.Unlock()
	for _, o := range mine {
		env := n.ownEnvelope(o.ID)
		if env == nil {
			continue
		}
		n.takeLoop(n.ctx, &o, env)
	}
}

func (n *Node) sweepBooks() {
	now := n.now()
	n.books.mu.Lock()
	defer n.books.mu.Unlock()
	for _, s := range n.books.states {
		for _, id := range s.book.Sweep(now) {
			delete(s.envs, id)
		}
	}
}

// short abbreviates a peer ID string for logs.
func short(id string) string {
	if len(id) > 8 {
		return id[len(id)-8:]
	}
	return id
}
