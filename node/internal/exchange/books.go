package exchange

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// Replica tuning.
const (
	// MaxRecentFills is how many fills per market a replica keeps in
	// memory for `trades`, the spot price and late joiners.
	MaxRecentFills = 1000
	// orderRate and orderBurst bound how many book messages per second one
	// maker may get through this node's validator.
	orderRate  = 20
	orderBurst = 40
	// authorRate and authorBurst bound how many book messages of any kind
	// per second one gossip author may get through: its orders, cancels
	// and the fills it is a party to.
	authorRate  = 2 * orderRate
	authorBurst = 2 * orderBurst
	// MaxOrdersPerMaker caps the orders one maker rests in a replica: a
	// flood of valid orders from a few keys fills a replica only up to this
	// per key (and is not relayed beyond it); past it the maker's smallest
	// order IDs stay, the same on every replica.
	MaxOrdersPerMaker = 100
	// OfferFetchTimeout bounds fetching an ask's offer while validating it.
	OfferFetchTimeout = 5 * time.Second
	// syncPeers is how many peers a node asks for a market's open orders.
	syncPeers = 3
	// meshWait is how long after joining a topic a publication waits for
	// the first peer in it.
	meshWait = 2 * time.Second
	// DefaultSweepInterval is how often the replicas drop expired orders.
	DefaultSweepInterval = 30 * time.Second
	// DefaultReconcileInterval is how often a replica reconciles a market
	// with one random peer of its topic.
	DefaultReconcileInterval = 10 * time.Second
	// resyncRate and resyncBurst bound the re-syncs from peers that join a
	// market's topic after the first sync, per market.
	resyncRate  = 1
	resyncBurst = 3
	// syncAnswerRate and syncAnswerBurst bound the sync answers one peer
	// gets from this node: a joining node asks each peer once per market,
	// and again when a peer joins later (resyncRate).
	syncAnswerRate  = 0.5
	syncAnswerBurst = 8
)

// ErrOfferUnknown is what a [Hooks.CheckAsk] returns when the ask's
// provider's offer cannot be found (yet): the message is ignored, not
// held against its sender.
var ErrOfferUnknown = errors.New("exchange: provider's offer not found")

// Trade is one recent fill as a replica keeps it.
type Trade struct {
	Fill  market.Fill
	Lease *proto.Lease
	Raw   *proto.Fill
}

// Replica is one market's book in one currency, with the sealed envelope
// of every open order (for late joiners) and the recent fills. It is only
// reached inside [Books.With] or [Books.Each], under the Books lock.
type Replica struct {
	// Book is the replica's order book; Index its spot-price index.
	Book   *market.Book
	Index  *market.Index
	envs   map[string][]byte
	offers map[string]keptOffer       // the sealed offer an open ask travelled with, or its provider's newer (refresh.go)
	maker  map[string]string          // the maker of each open order, by ID
	count  map[string]map[string]bool // the open orders of each maker
	fills  []Trade
	tombs  *tombs // the market's, shared by its replicas in every currency
}

// Rest adds an order to the book and keeps its envelope for late joiners.
// An order its maker cancelled (a tombstone this replica keeps until the
// order's expiry) is refused as a duplicate.
func (s *Replica) Rest(o *market.Order, env []byte, now time.Time) error {
	if s.tombs.cancelled(o, env) {
		return fmt.Errorf("%w: order %s was cancelled", market.ErrDuplicate, o.ID)
	}
	if err := s.Book.Add(o, now); err != nil {
		return err
	}
	s.envs[o.ID] = env
	s.maker[o.ID] = o.Maker
	if s.count[o.Maker] == nil {
		s.count[o.Maker] = map[string]bool{}
	}
	s.count[o.Maker][o.ID] = true
	return nil
}

// Cancel withdraws maker's order id from the book and keeps a tombstone
// of it until the order's expiry, so that a sync or reconciliation that
// brings the order again does not rest it.
func (s *Replica) Cancel(id, maker string) error {
	o, _, ok := s.Book.Lookup(id)
	if err := s.Book.Cancel(id, maker); err != nil {
		return err
	}
	if ok {
		s.tombs.addCancel(id, maker, nil, s.envs[id], o.Expires)
	}
	s.drop(id)
	return nil
}

// drop forgets the envelope and offer of an order that left the book.
func (s *Replica) drop(id string) {
	delete(s.envs, id)
	delete(s.offers, id)
	if m, ok := s.maker[id]; ok {
		delete(s.maker, id)
		if delete(s.count[m], id); len(s.count[m]) == 0 {
			delete(s.count, m)
		}
	}
}

// Fills are the replica's recent fills, oldest first. The slice is the
// replica's own: read it only inside With or Each.
func (s *Replica) Fills() []Trade { return s.fills }

// Hooks are the node's part in applying book messages. Each is called
// without the Books lock unless it says otherwise; every hook is optional.
type Hooks struct {
	// CheckAsk fills an ask's facts from its provider's offer, or says
	// why the offer does not back it: an error wrapping ErrOfferUnknown
	// ignores the message, any other rejects it.
	CheckAsk func(ctx context.Context, o *market.Order, po *proto.Order) error
	// Cancelled is told of every cancel applied.
	Cancelled func(orderID string)
	// FillLocked is called under the Books lock for each fill applied,
	// with the spot index after it and whether this node is a party:
	// whoever sees the replica change also sees what it records.
	FillLocked func(ev *p2p.BookEvent, index int64, party bool)
	// Filled is called after the lock for each fill applied.
	Filled func(ev *p2p.BookEvent, index int64, party bool)
	// FillRefused is called for a fill the book refused with an error
	// other than a duplicate.
	FillRefused func(ev *p2p.BookEvent, err error)
	// Crossable is called from the Books' loop when one of this node's
	// resting orders in mkt may cross a new opposite order.
	Crossable func(mkt string)
	// OfferFor is the sealed offer that backs an ask this node publishes
	// (its own, or for a resale ask the lease's provider's), or nil: it
	// travels with the ask.
	OfferFor func(po *proto.Order) []byte
}

// Config is what Books needs from its node.
type Config struct {
	Host   host.Host
	PubSub *pubsub.PubSub
	// Providers lists up to max providers of a market (the DHT), for a
	// sync when the topic has too few peers.
	Providers func(ctx context.Context, mkt string, max int) []peer.AddrInfo
	// Offers is the node's offer cache: an offer that travels with an ask
	// is remembered there before the ask is checked (so CheckAsk finds it
	// without the DHT), and the offers of the asks a replica hands on come
	// from there. Optional.
	Offers *Offers
	Now    func() time.Time
	Log    *slog.Logger
	// Rejects counts refused messages by kind ("book", "fill", "sync") and
	// reason; Orders and Fills count what was applied. All optional.
	Rejects       *prometheus.CounterVec
	Orders, Fills prometheus.Counter
	// SweepEvery is how often expired orders leave the replicas (default
	// DefaultSweepInterval).
	SweepEvery time.Duration
	// MaxResting caps the orders of other makers one replica keeps
	// resting; beyond it market.Evictee says which goes (default
	// market.MaxRestingOrders). The node's own orders are never evicted.
	MaxResting int
	// ReconcileEvery is how often a replica reconciles each joined market
	// with one random peer of its topic (default DefaultReconcileInterval;
	// negative: never, only on reconnect).
	ReconcileEvery time.Duration
	// InlineOfferMax is the largest offer (sealed, in bytes) that the
	// first ask it backs carries whole; a larger one travels by digest
	// from the first ask on. 0 (the default): every ask carries the
	// digest (see pull.go for why).
	InlineOfferMax int
	// Admission tunes how fast makers this node does not know yet are
	// admitted (admission.go); the zero value is the defaults.
	Admission AdmissionConfig
	// Stamp is this node's maker stamp (p2p.GrindStamp), or nil while it
	// has none (it is being ground): it travels beside each order this
	// node publishes. Optional.
	Stamp func() []byte
	Hooks Hooks
}

// Books is a node's set of market replicas and their gossip. Its methods
// are safe for concurrent use.
type Books struct {
	cfg Config
	ctx context.Context
	wg  sync.WaitGroup

	mu       sync.Mutex
	states   map[string]*Replica       // by market + "/" + currency
	tombs    map[string]*tombs         // by market
	retries  map[string]*retry         // asks whose offer was not found yet, by order ID
	retryNew chan struct{}             // wakes retryLoop when retries gets its first ask
	reconc   map[peer.ID]*rate.Limiter // by peer asking to reconcile
	rkick    chan struct{}             // a reconciliation is due soon
	topics   map[string]*pubsub.Topic
	joined   map[string]time.Time // when each topic was joined
	// inlined is, by market, the digest of the last offer an ask of this
	// node carried whole (attach).
	inlined     map[string][p2p.OfferDigestSize]byte
	limiters    map[string]*rate.Limiter  // by maker
	refreshers  map[string]*rate.Limiter  // offer refreshes, by maker (refresh.go)
	refreshSeqs map[string]uint64         // the newest offer seq charged to each maker (refresh.go)
	authors     map[peer.ID]*rate.Limiter // by gossip author, under authorsMu
	// authorsMu guards authors alone: every gossiped message's first
	// check must not queue behind the replicas' lock (at 1,000 simulated
	// nodes 1,628 validators waited on b.mu here).
	authorsMu sync.Mutex
	syncers   map[peer.ID]*rate.Limiter // by peer asking for a sync
	kick      chan string               // markets whose crossing to re-check
	self      string                    // this node's peer ID, as makers are named ("" without a Host)
	// idMu guards elemIDs: by market, the IDs of the elements the last
	// snapshot listed (elements).
	idMu    sync.Mutex
	elemIDs map[string]map[elemKey]elemID
	// snapMu guards snaps: by market, the last reconciliation snapshot
	// (reconcileSet).
	snapMu sync.Mutex
	snaps  map[string]snapCache
	adm    *admission // makers known and the new-maker budgets
	// stamps are, by maker, the stamps this node learnt (carry.go).
	stamps map[string][]byte
}

// New returns an empty set of replicas. Start begins its loop; until
// then (and without a Host and PubSub) it is a plain in-memory replica
// set, as benchmarks use it.
func New(cfg Config) *Books {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.SweepEvery <= 0 {
		cfg.SweepEvery = DefaultSweepInterval
	}
	if cfg.MaxResting <= 0 {
		cfg.MaxResting = market.MaxRestingOrders
	}
	if cfg.ReconcileEvery == 0 {
		cfg.ReconcileEvery = DefaultReconcileInterval
	}
	self := ""
	if cfg.Host != nil {
		self = cfg.Host.ID().String() // base58: encoded once, not per message
	}
	return &Books{
		self:        self,
		cfg:         cfg,
		ctx:         context.Background(),
		states:      map[string]*Replica{},
		tombs:       map[string]*tombs{},
		retries:     map[string]*retry{},
		retryNew:    make(chan struct{}, 1),
		reconc:      map[peer.ID]*rate.Limiter{},
		topics:      map[string]*pubsub.Topic{},
		joined:      map[string]time.Time{},
		inlined:     map[string][p2p.OfferDigestSize]byte{},
		limiters:    map[string]*rate.Limiter{},
		refreshers:  map[string]*rate.Limiter{},
		refreshSeqs: map[string]uint64{},
		authors:     map[peer.ID]*rate.Limiter{},
		syncers:     map[peer.ID]*rate.Limiter{},
		kick:        make(chan string, 64),
		rkick:       make(chan struct{}, 1),
		elemIDs:     map[string]map[elemKey]elemID{},
		snaps:       map[string]snapCache{},
		adm:         newAdmission(cfg.Admission),
		stamps:      map[string][]byte{},
	}
}

// Start runs the loop that sweeps expired orders and reports crossable
// ones until ctx ends; the readers of joined topics stop with it too.
// Call it once, before JoinMarket.
func (b *Books) Start(ctx context.Context) {
	b.ctx = ctx
	b.wg.Add(2)
	go b.loop()
	go b.retryLoop()
	if b.cfg.Host != nil {
		p2p.HandleReconcile(b.cfg.Host, b.answerReconcile)
		if b.cfg.ReconcileEvery > 0 {
			b.wg.Add(1)
			go b.reconcileLoop()
		}
	}
}

// Wait waits for the goroutines Start and JoinMarket began, once the
// context given to Start has ended.
func (b *Books) Wait() { b.wg.Wait() }

func key(mkt, cur string) string { return mkt + "/" + cur }

// state returns the replica of a market in a currency, creating it.
// Callers hold b.mu.
func (b *Books) state(mkt, cur string) (*Replica, error) {
	k := key(mkt, cur)
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
	s := &Replica{Book: bk, Index: ix, envs: map[string][]byte{}, offers: map[string]keptOffer{},
		maker: map[string]string{}, count: map[string]map[string]bool{}, tombs: b.tombsOf(mkt)}
	b.states[k] = s
	return s, nil
}

// With calls fn with the replica of a market in a currency, creating it,
// under the Books lock. fn must not block: no network, no store, no
// other component's lock but those taken after this one (the node's own
// orders). The error is the market's or currency's, if invalid.
func (b *Books) With(mkt, cur string, fn func(*Replica)) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, err := b.state(mkt, cur)
	if err != nil {
		return err
	}
	fn(s)
	return nil
}

// Lookup is the open order id of a market in a currency and what remains
// of it.
func (b *Books) Lookup(mkt, cur, id string) (o market.Order, remaining uint32, ok bool) {
	b.With(mkt, cur, func(s *Replica) { o, remaining, ok = s.Book.Lookup(id) })
	return o, remaining, ok
}

// Each calls fn with every replica that exists, under the Books lock, in
// no particular order; the same rules as With apply.
func (b *Books) Each(fn func(*Replica)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.states {
		fn(s)
	}
}

// Markets are the markets whose topics this node joined, sorted.
func (b *Books) Markets() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]string, 0, len(b.topics))
	for mkt := range b.topics {
		out = append(out, mkt)
	}
	slices.Sort(out)
	return out
}

// Joined reports whether this node joined mkt's topic.
func (b *Books) Joined(mkt string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.topics[mkt]
	return ok
}

func (b *Books) allow(maker string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return p2p.AllowIn(b.limiters, maker, orderRate, orderBurst)
}

// allowAuthor is allow for the author of a gossip message, whatever it
// carries: its orders, cancels and the fills it is a party to share one
// budget.
func (b *Books) allowAuthor(author peer.ID) bool {
	b.authorsMu.Lock()
	defer b.authorsMu.Unlock()
	return p2p.AllowIn(b.authors, author, authorRate, authorBurst)
}

func (b *Books) reject(kind, reason string) {
	if b.cfg.Rejects != nil {
		b.cfg.Rejects.WithLabelValues(kind, reason).Inc()
	}
}

func inc(c prometheus.Counter) {
	if c != nil {
		c.Inc()
	}
}

// evictLocked drops an order from a replica holding more than the cap,
// as market.Evictee says (the node's own orders stay), and returns its ID.
// Callers hold b.mu.
func (b *Books) evictLocked(s *Replica, arrived market.Side) string {
	v, ok := market.Evictee(s.Book, b.cfg.MaxResting, arrived, func(o market.Order) bool { return b.selfMaker(o.Maker) })
	if !ok {
		return ""
	}
	// Not a cancel: no tombstone, the order may come back when there is
	// room.
	if err := s.Book.Cancel(v.ID, v.Maker); err != nil {
		return ""
	}
	s.drop(v.ID)
	return v.ID
}

// Kick asks the loop to check whether this node's resting orders in mkt
// cross; kicks beyond what the loop keeps up with are dropped (one
// pending kick of a market does).
func (b *Books) Kick(mkt string) {
	select {
	case b.kick <- mkt:
	default:
	}
}

// loop reports crossable markets as they are kicked and sweeps expired
// orders from the replicas every sweep interval. The sweep runs on a
// ticker, not a timer re-armed by each kick: steady traffic must not put
// it off forever.
func (b *Books) loop() {
	defer b.wg.Done()
	sweep := time.NewTicker(b.cfg.SweepEvery)
	defer sweep.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case mkt := <-b.kick:
			if b.cfg.Hooks.Crossable != nil {
				b.cfg.Hooks.Crossable(mkt)
			}
		case <-sweep.C:
			b.Sweep()
		}
	}
}

// Crossing lists the open orders of maker in mkt (any currency) that an
// opposite order now crosses.
func (b *Books) Crossing(mkt, maker string) []market.Order {
	now := b.cfg.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	var mine []market.Order
	for _, s := range b.states {
		if s.Book.Market() != mkt {
			continue
		}
		for _, c := range s.Book.Crossing(maker, now) {
			if o, _, ok := s.Book.Lookup(c.OrderID); ok {
				mine = append(mine, o)
			}
		}
	}
	return mine
}

// Sweep drops expired orders from every replica.
func (b *Books) Sweep() {
	now := b.cfg.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.states {
		for _, id := range s.Book.Sweep(now) {
			s.drop(id)
		}
	}
	for _, t := range b.tombs {
		t.sweep(now)
	}
}

// Apply applies a verified book event to the replica of mkt.
func (b *Books) Apply(mkt string, ev *p2p.BookEvent) { b.apply(mkt, ev) }

// apply is Apply, reporting whether the replica changed: an order
// rested, a cancel or a fill it did not have.
func (b *Books) apply(mkt string, ev *p2p.BookEvent) bool {
	now := b.cfg.Now()
	switch ev.Kind {
	case p2p.KindOrder:
		o := ev.Order
		kept := b.keptFor(ev)
		b.mu.Lock()
		s, err := b.state(o.Market, o.Currency)
		var evicted string
		if err == nil {
			err = s.Rest(o, ev.Envelope, now)
		}
		mine := false
		if err == nil {
			if kept.env != nil {
				s.offers[o.ID] = kept
			}
			for _, id := range b.evictMaker(s, o.Maker) {
				b.reject("book", "maker-evicted")
				mine = mine || id == o.ID
			}
			if !mine {
				evicted = b.evictLocked(s, o.Side)
			}
		}
		b.mu.Unlock()
		if mine {
			return false
		}
		if evicted == o.ID {
			b.reject("book", "book-full")
			return false
		}
		if evicted != "" {
			b.reject("book", "evicted")
		}
		if err != nil {
			if !errors.Is(err, market.ErrDuplicate) {
				b.reject("book", market.Reason(err))
				b.cfg.Log.Debug("order not added", "order", o.ID, "err", err)
			}
			return false
		}
		inc(b.cfg.Orders)
		if !b.selfMaker(o.Maker) {
			b.Kick(mkt)
		}
	case p2p.KindCancel:
		maker, _ := peer.IDFromBytes(ev.Cancel.Maker)
		id := ev.Cancel.OrderId
		// Until the order's expiry when it is known; else as long as any
		// order could live.
		exp := time.UnixMilli(ev.Cancel.CreatedUnixMs).Add(market.MaxOrderTTL + market.MaxClockSkew)
		orderEnv := ev.CancelledEnvelope
		if ev.CancelledOrder != nil {
			exp = ev.CancelledOrder.Expires
		}
		b.mu.Lock()
		for _, s := range b.states {
			if s.Book.Market() != mkt {
				continue
			}
			if o, _, ok := s.Book.Lookup(id); ok && o.Maker == maker.String() {
				exp, orderEnv = o.Expires, s.envs[id]
				s.Book.Cancel(id, o.Maker)
				s.drop(id)
			}
		}
		t := b.tombsOf(mkt)
		_, had := t.cancels[cancelKey{maker.String(), id}]
		if !t.addCancel(id, maker.String(), ev.Envelope, orderEnv, exp) {
			b.reject("book", "tombstones-full")
		}
		b.mu.Unlock()
		if b.cfg.Hooks.Cancelled != nil {
			b.cfg.Hooks.Cancelled(ev.Cancel.OrderId)
		}
		return !had
	case p2p.KindFill:
		return b.applyFill(ev)
	}
	return true
}

// ApplyFill applies a verified fill once: book, index and recent fills,
// then the hooks (the node's store, its own orders and leases). A fill
// already applied is a no-op.
func (b *Books) ApplyFill(ev *p2p.BookEvent) { b.applyFill(ev) }

// applyFill is ApplyFill, reporting whether the fill was new.
func (b *Books) applyFill(ev *p2p.BookEvent) bool {
	f := *ev.Fill
	now := b.cfg.Now()
	b.mu.Lock()
	s, err := b.state(f.Market, f.Currency)
	if err != nil {
		b.mu.Unlock()
		return false
	}
	if err := s.Book.ApplyFill(f); err != nil {
		b.mu.Unlock()
		if !errors.Is(err, market.ErrDuplicate) {
			b.reject("fill", market.Reason(err))
			b.cfg.Log.Warn("fill refused by the book", "fill", f.ID, "err", err)
			if b.cfg.Hooks.FillRefused != nil {
				b.cfg.Hooks.FillRefused(ev, err)
			}
		}
		return false
	}
	if err := s.Index.Add(f, now); err != nil {
		b.cfg.Log.Debug("fill not indexed", "fill", f.ID, "err", err)
	}
	index, _ := s.Index.Value(now)
	for _, id := range []string{f.BidID, f.AskID} {
		if _, _, ok := s.Book.Lookup(id); !ok {
			s.drop(id)
		}
	}
	// Its parties are established makers now (admission.go).
	b.adm.remember(f.Buyer, true)
	b.adm.remember(f.Provider, true)
	if ev.Raw != nil && !s.tombs.addFill(f, ev.Raw) {
		b.reject("fill", "tombstones-full")
	}
	s.fills = append(s.fills, Trade{Fill: f, Lease: ev.Lease, Raw: ev.Raw})
	if len(s.fills) > MaxRecentFills {
		s.fills = slices.Delete(s.fills, 0, len(s.fills)-MaxRecentFills)
	}
	party := b.selfMaker(f.Buyer) || b.selfMaker(f.Provider)
	if b.cfg.Hooks.FillLocked != nil {
		b.cfg.Hooks.FillLocked(ev, index, party)
	}
	b.mu.Unlock()
	inc(b.cfg.Fills)
	if b.cfg.Hooks.Filled != nil {
		b.cfg.Hooks.Filled(ev, index, party)
	}
	return true
}

// check is the stateful part of validation of a sync or reconciliation
// answer's message.
func (b *Books) check(ctx context.Context, ev *p2p.BookEvent) pubsub.ValidationResult {
	return b.checkFrom(ctx, "", ev)
}

// checkFrom is the stateful part of validation, shared by gossip (from:
// the peer that relayed the message) and sync (from empty).
func (b *Books) checkFrom(ctx context.Context, from peer.ID, ev *p2p.BookEvent) pubsub.ValidationResult {
	res, _ := b.checkRelay(ctx, from, ev)
	return res
}

// checkRelay is checkFrom, also reporting whether an accepted message
// stays here (local): an order of a maker with neither a stamp nor a
// fill, or a fill neither of whose parties has one (relayedLocked); such
// messages go no further than the replica that admits them
// (admission.go).
func (b *Books) checkRelay(ctx context.Context, from peer.ID, ev *p2p.BookEvent) (res pubsub.ValidationResult, local bool) {
	switch ev.Kind {
	case p2p.KindOrder:
		o := ev.Order
		// First, before anything is remembered for it: a maker this
		// replica does not know is admitted at a bounded rate
		// (admission.go), so a flood of fresh keys is ignored here and
		// goes no further.
		b.mu.Lock()
		why := b.admitLocked(o.Maker, from, ev.MakerStamp)
		b.mu.Unlock()
		if why != "" {
			b.reject("book", why)
			return pubsub.ValidationIgnore, false
		}
		if ev.Offer != nil && b.cfg.Offers != nil {
			// Signed by its provider and valid (p2p.DecodeBook): worth
			// keeping whatever becomes of the ask.
			b.cfg.Offers.RememberSealed(ev.OfferProvider, ev.Offer, ev.OfferEnvelope)
		}
		if !b.allowMaker(o.Maker) {
			b.reject("book", "rate-limited")
			return pubsub.ValidationIgnore, false
		}
		if _, _, held := b.Lookup(o.Market, o.Currency, o.ID); held {
			return b.checkRefresh(ctx, from, ev), false
		}
		if b.makerFull(o) {
			// Not relayed either: a flood of valid orders from one key
			// stops at the first hop once its maker is at the cap.
			b.reject("book", "maker-full")
			return pubsub.ValidationIgnore, false
		}
		if o.Side == market.Ask && !b.pullOffer(ctx, ev, from) {
			b.reject("book", "bad-offer") // the offer its author's digest names
			return pubsub.ValidationReject, false
		}
		if o.Side == market.Ask && b.cfg.Hooks.CheckAsk != nil {
			if err := b.cfg.Hooks.CheckAsk(askContext(ctx, o), o, ev.OrderProto); err != nil {
				if errors.Is(err, ErrOfferUnknown) {
					// Transient: not yet known, or the lookup timed out.
					// Retried in the background, never refused for good.
					b.reject("book", "offer-unknown")
					b.deferAsk(ev, from)
					return pubsub.ValidationIgnore, false
				}
				b.reject("book", "offer-mismatch")
				b.cfg.Log.Debug("ask refused", "order", o.ID, "err", err)
				return pubsub.ValidationReject, false
			}
		}
	case p2p.KindCancel:
		maker, _ := peer.IDFromBytes(ev.Cancel.Maker)
		if !b.allow(maker.String()) {
			b.reject("book", "rate-limited")
			return pubsub.ValidationIgnore, false
		}
	case p2p.KindFill:
		// Two fresh keys can sign a fill between themselves as cheaply
		// as an order: the same admission holds for its parties.
		b.mu.Lock()
		why := b.admitFillLocked(ev.Fill, from, ev.MakerStamp)
		b.mu.Unlock()
		if why != "" {
			b.reject("fill", why)
			return pubsub.ValidationIgnore, false
		}
	}
	b.noteEventStamp(ev)
	if ev.Kind == p2p.KindCancel {
		return pubsub.ValidationAccept, false // relayed as before: held to its maker's rate
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return pubsub.ValidationAccept, !b.relayedLocked(eventMakers(ev)...)
}

// makerFull reports whether o's maker already rests as many orders as
// its cap (capLocked: MaxOrdersPerMaker, or MaxOrdersNewMaker for a maker
// not yet established) in o's replica, all with smaller IDs than o's. Which orders of a
// maker past the cap a replica keeps must not depend on the order they
// arrived in, or replicas would never agree: each keeps the maker's
// smallest IDs (evictMaker drops the largest). This node's own orders
// are never refused.
func (b *Books) makerFull(o *market.Order) bool {
	if b.selfMaker(o.Maker) {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.states[key(o.Market, o.Currency)]
	if !ok || len(s.count[o.Maker]) < b.capLocked(o.Maker) {
		return false
	}
	return o.ID > largest(s.count[o.Maker])
}

func largest(ids map[string]bool) string {
	top := ""
	for id := range ids {
		top = max(top, id)
	}
	return top
}

// evictMaker drops the largest IDs of maker's orders in s past its cap
// (capLocked; not its own node's), without a tombstone, and
// returns them. Callers hold b.mu.
func (b *Books) evictMaker(s *Replica, maker string) []string {
	if b.selfMaker(maker) {
		return nil
	}
	var out []string
	for limit := b.capLocked(maker); len(s.count[maker]) > limit; {
		id := largest(s.count[maker])
		s.Book.Cancel(id, maker)
		s.drop(id)
		out = append(out, id)
	}
	return out
}

// errNotJoined: a publication to a market this node has not joined.
func errNotJoined(mkt string) error { return fmt.Errorf("exchange: not in market %s", mkt) }

// Envelope is the sealed envelope of the open order id, or nil.
func (s *Replica) Envelope(id string) []byte { return s.envs[id] }
