package resale

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"
	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/internal/exchange"
	"github.com/suanli/suanli/node/internal/store"
	"github.com/suanli/suanli/node/internal/trade"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// DefaultOrderTTL is how long a resale ask rests when not told.
const DefaultOrderTTL = time.Hour

// Lease is what the resale needs of a lease this node is party to, read
// in one step.
type Lease struct {
	ID    string
	Peer  peer.ID // the counterparty
	Role  market.Role
	Terms *proto.Lease
	State market.LeaseState
	Fill  []byte // the signed terms as stored (a marshalled proto.Fill)
}

// Node is what the resale needs of the rest of the node: its leases, its
// own orders, the book's gossip and the offers. The node implements it in
// one wiring file (node/wire_trade.go).
type Node interface {
	// Lease is lease id as it stands.
	Lease(id string) (Lease, error)
	// EndResold ends lease id, which this node holds, as resold at at
	// (when it still runs) and lets the lease's loop see it.
	EndResold(id string, at time.Time, note string)
	// HandOver, for lease id this node provides, runs fn under the
	// lease's lock while it runs, with the time it is billed to; fn
	// returns the handover time and the note the lease ends as resold
	// with. HandOver returns the lease's close time.
	HandOver(id string, fn func(billedTo time.Time) (at time.Time, note string, err error)) (time.Time, error)
	// ResoldClosed tells the holder of lease id, resold and closed at at,
	// that it is, and lets the lease's loop see it.
	ResoldClosed(id string, at time.Time)
	// StartLease starts the lease of a fill this node is party to.
	StartLease(ev *p2p.BookEvent)
	// ResaleOf is the lease an own order resells, or "".
	ResaleOf(order string) string
	// AddOwn records a resale ask as one of this node's orders, resting.
	AddOwn(o *market.Order, env []byte, req api.OrderRequest)
	// OwnFilled records a fill of one of this node's orders.
	OwnFilled(f market.Fill, l *proto.Lease)
	// Order is one of this node's orders; CancelOrder withdraws it.
	Order(ctx context.Context, id string) (api.OrderView, error)
	CancelOrder(ctx context.Context, id string) (api.OrderView, error)
	// JoinMarket joins a market's book; PublishBook gossips on it.
	JoinMarket(ctx context.Context, mkt string) error
	PublishBook(ctx context.Context, mkt string, m *proto.BookMessage, ev *p2p.BookEvent) error
	// AskFacts, OfferOf and AttestedLevel are an ask's facts, a
	// provider's offer and its attestation level.
	AskFacts(ctx context.Context, o *market.Order, offerSeq uint64) error
	OfferOf(ctx context.Context, p peer.ID, minSeq uint64) (*proto.Offer, error)
	AttestedLevel(ctx context.Context, p peer.ID, offer *proto.Offer) string
	// Spawn runs fn on a goroutine Close waits for, unless closing;
	// Context ends when the node closes.
	Spawn(fn func()) bool
	Context() context.Context
}

// Config is what a Manager is built from.
type Config struct {
	Host  host.Host
	Key   crypto.PrivKey
	Store *store.Store
	Books *exchange.Books
	Now   func() time.Time
	Log   *slog.Logger
	// Rejects is suanli_validation_rejects_total{kind,reason}.
	Rejects *prometheus.CounterVec
	Node    Node
}

// Manager is one node's side of resales, as holder, provider and new
// buyer. It is safe for concurrent use.
type Manager struct {
	Config
	mu     sync.Mutex          // guards claims; a leaf
	claims map[string]struct{} // leases being handed over by this holder
}

// New returns a Manager.
func New(c Config) *Manager {
	return &Manager{Config: c, claims: map[string]struct{}{}}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func shortID(p peer.ID) string {
	s := p.String()
	if len(s) > 8 {
		return s[len(s)-8:]
	}
	return s
}

// claim marks lease as being handed over, so the holder never hands a
// lease over twice at once; ok is false when it already is.
func (m *Manager) claim(lease string) (release func(), ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, busy := m.claims[lease]; busy {
		return nil, false
	}
	m.claims[lease] = struct{}{}
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.claims, lease)
	}, true
}

// refused counts and logs a refused resale step of kind.
func (m *Manager) refused(kind string, err error) error {
	m.Rejects.WithLabelValues(kind, market.ResaleReason(err)).Inc()
	m.Log.Info("resale refused", "kind", kind, "err", err)
	return err
}

// ResoldLeaseTerms reads the resold lease's terms an ask carries: a
// marshalled proto.Fill, either a whole trade (its take and accept, both
// signed) or the provider's accept of a lease bought by resale.
func ResoldLeaseTerms(b []byte, now time.Time) (*proto.Lease, error) {
	var f proto.Fill
	if len(b) == 0 || len(b) > proto.MaxBookMessageSize {
		return nil, &market.ResaleError{Label: "schema", Reason: "no resold lease terms, or too large"}
	}
	if err := gproto.Unmarshal(b, &f); err != nil {
		return nil, &market.ResaleError{Label: "schema", Reason: "resold lease terms: " + err.Error()}
	}
	acc, signer, err := p2p.Open[*proto.Accept](f.Accept, proto.MaxBookMessageSize)
	if err != nil || acc.GetLease() == nil {
		return nil, &market.ResaleError{Label: "schema", Reason: fmt.Sprintf("resold lease accept: %v", err)}
	}
	l := acc.Lease
	if err := market.ValidateTerms(l); err != nil {
		return nil, &market.ResaleError{Label: "wrong-terms", Reason: err.Error()}
	}
	// The provider's own accept binds it; a maker-buyer's accept binds the
	// provider only with the provider's take beside it (p2p.OpenFill).
	if bytes.Equal([]byte(signer), l.Provider) && bytes.Equal(acc.Maker, l.Provider) && acc.TakeId == l.Id {
		return l, nil
	}
	ev, err := p2p.OpenFill(&f, now)
	if err != nil || ev.Lease == nil || !bytes.Equal(ev.Lease.Provider, l.Provider) {
		return nil, &market.ResaleError{Label: "bad-provider", Reason: fmt.Sprintf("resold lease terms not signed by its provider (%v)", err)}
	}
	return ev.Lease, nil
}

// AskFacts checks a replica's ask as Node.AskFacts does, or a resale
// ask as resaleFacts does.
func (m *Manager) AskFacts(ctx context.Context, o *market.Order, po *proto.Order) error {
	if len(po.GetResell()) > 0 {
		return m.resaleFacts(ctx, o, po)
	}
	return m.Node.AskFacts(ctx, o, po.GetOfferSeq())
}

// resaleFacts checks a resale ask against the lease it names and takes its
// facts from that lease's provider's offer: its maker holds the lease, and
// the ask sells all the lease's GPUs at most for the rest of its block.
func (m *Manager) resaleFacts(ctx context.Context, o *market.Order, po *proto.Order) error {
	now := m.Now()
	l, err := ResoldLeaseTerms(po.Resell, now)
	if err != nil {
		return err
	}
	maker, err := peer.Decode(o.Maker)
	if err != nil {
		return err
	}
	if err := market.CheckResellable(l, []byte(maker), now); err != nil {
		return err
	}
	end := market.LeaseEnd(l)
	switch {
	case o.Side != market.Ask || o.LeaseType != market.Reserved:
		return &market.ResaleError{Label: "not-reserved", Reason: "a resale is a reserved ask"}
	case o.Market != l.Market || o.Currency != l.Currency:
		return &market.ResaleError{Label: "wrong-terms", Reason: "resale ask's market or currency is not the lease's"}
	case int(o.Quantity) != len(l.Gpus) || !o.AllOrNone || !o.PostOnly:
		return &market.ResaleError{Label: "wrong-gpus", Reason: fmt.Sprintf("a resale sells all %d GPUs of the lease at once and only rests", len(l.Gpus))}
	case o.MaxDuration > end.Sub(o.Created)+market.ResaleDurationSlack+time.Second || o.Expires.After(end):
		return &market.ResaleError{Label: "wrong-duration", Reason: "resale ask outlasts the lease's block"}
	case !o.Start.IsZero():
		return &market.ResaleError{Label: "wrong-duration", Reason: "a resale starts at the handover"}
	}
	offer, err := m.Node.OfferOf(ctx, peer.ID(l.Provider), 0)
	if err != nil {
		return err
	}
	var mem uint64
	for _, g := range offer.Gpus {
		if g.Market == l.Market {
			mem = g.MemoryBytes
		}
	}
	o.Facts = market.Facts{Region: offer.Region, Attestation: m.Node.AttestedLevel(ctx, peer.ID(l.Provider), offer), MemoryBytes: mem}
	return nil
}

// Place places a resale ask of the lease req.Resell names (see
// node.PlaceOrder): all its GPUs for the rest of its block, at req.Price.
func (m *Manager) Place(ctx context.Context, req api.OrderRequest) (api.OrderView, error) {
	now := m.Now()
	refuse := func(err error) (api.OrderView, error) {
		m.refused("resale", err)
		return api.OrderView{}, api.BadRequest("%v", err)
	}
	r, err := m.Node.Lease(req.Resell)
	if err != nil {
		return refuse(&market.ResaleError{Label: "not-holder", Reason: fmt.Sprintf("this node holds no lease %s", req.Resell)})
	}
	if r.Role != market.RoleBuyer {
		return refuse(&market.ResaleError{Label: "not-holder", Reason: fmt.Sprintf("lease %s is this node's to provide, not to resell", r.ID)})
	}
	terms, state, fill := r.Terms, r.State, r.Fill
	if err := market.CheckResellable(terms, []byte(m.Host.ID()), now); err != nil {
		return refuse(err)
	}
	if sold, _ := m.Store.SignedPremium("resale/sold/" + r.ID); sold != nil {
		return refuse(&market.ResaleError{Label: "already-resold", Reason: fmt.Sprintf("lease %s was resold already", r.ID)})
	}
	if state != market.LeaseRunning {
		return refuse(&market.ResaleError{Label: "ended", Reason: fmt.Sprintf("lease %s is %s", r.ID, state)})
	}
	if len(fill) == 0 {
		return api.OrderView{}, fmt.Errorf("node: lease %s has no stored signed terms to resell", r.ID)
	}
	if req.Currency != "" && req.Currency != terms.Currency {
		return api.OrderView{}, api.BadRequest("lease %s is priced in %s, not %s", r.ID, terms.Currency, req.Currency)
	}
	price, err := market.ParseMoney(req.Price, terms.Currency)
	if err != nil {
		return api.OrderView{}, api.BadRequest("price: %v", err)
	}
	expires := DefaultOrderTTL
	if req.Expires != "" {
		if expires, err = time.ParseDuration(req.Expires); err != nil {
			return api.OrderView{}, api.BadRequest("expires: %v", err)
		}
	}
	end := market.LeaseEnd(terms)
	rest := end.Sub(now).Truncate(time.Second)
	if err := m.Node.JoinMarket(ctx, terms.Market); err != nil {
		return api.OrderView{}, err
	}
	var nonce [8]byte
	rand.Read(nonce[:])
	until := now.Add(expires)
	if until.After(end) {
		until = end
	}
	po := &proto.Order{
		Maker: []byte(m.Host.ID()), Side: proto.Side_SIDE_ASK, Market: terms.Market, Currency: terms.Currency,
		Quantity: uint32(len(terms.Gpus)), PriceMicros: price.Micros, LeaseType: proto.LeaseType_LEASE_TYPE_RESERVED,
		MinDurationS: 1, MaxDurationS: int64((rest + market.ResaleDurationSlack) / time.Second),
		CreatedUnixMs: now.UnixMilli(), ExpiresUnixMs: until.UnixMilli(),
		Nonce: binary.BigEndian.Uint64(nonce[:]), PostOnly: true, AllOrNone: true, ClientKey: req.ClientKey, Resell: fill,
	}
	o, err := p2p.OrderFromProto(po)
	if err != nil {
		return api.OrderView{}, api.BadRequest("%v", err)
	}
	if err := o.Validate(now); err != nil {
		return api.OrderView{}, api.BadRequest("%v", err)
	}
	if err := m.resaleFacts(ctx, o, po); err != nil {
		if errors.Is(err, market.ErrResale) {
			return refuse(err)
		}
		return api.OrderView{}, api.BadRequest("%v", err)
	}
	env, err := p2p.Seal(m.Key, po, proto.MaxBookMessageSize)
	if err != nil {
		return api.OrderView{}, err
	}
	o.ID = proto.CIDOf(env).String()
	var rerr error
	err = m.Books.With(o.Market, o.Currency, func(s *exchange.Replica) {
		if _, merr := s.Book.Match(o, now); errors.Is(merr, market.ErrWouldCross) {
			rerr = api.BadRequest("a resale ask only rests, and a bid at or above %s rests now: take it by placing the ask under it later, or cancel",
				market.FormatMicros(o.Price, o.Currency))
		} else {
			rerr = s.Rest(o, env, now)
		}
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return api.OrderView{}, api.BadRequest("%v", err)
	}
	m.Node.AddOwn(o, env, req)
	ev := &p2p.BookEvent{Kind: p2p.KindOrder, Order: o, OrderProto: po, Envelope: env}
	if err := m.Node.PublishBook(ctx, o.Market, &proto.BookMessage{Body: &proto.BookMessage_Order{Order: env}}, ev); err != nil {
		m.Log.Warn("publishing resale ask failed", "order", o.ID, "err", err)
	}
	m.Log.Info("resale ask placed", "order", o.ID, "lease", r.ID, "price", market.FormatMicros(o.Price, o.Currency), "rest", rest)
	return m.Node.Order(ctx, o.ID)
}

// HandleTake is the holder's side of a take of its resale ask (see
// the steps above); ok is false when the take is not of one.
func (m *Manager) HandleTake(ctx context.Context, from peer.ID, take *proto.Take, takeEnv []byte, takeID string) (reply *proto.TradeReply, ok bool) {
	lease := m.Node.ResaleOf(take.MakerOrderId)
	if lease == "" {
		return nil, false
	}
	reject := func(err error) (*proto.TradeReply, bool) {
		m.refused("resale-take", err)
		env, serr := p2p.Seal(m.Key, &proto.Reject{Maker: []byte(m.Host.ID()), TakeId: takeID, Reason: err.Error()}, proto.MaxBookMessageSize)
		if serr != nil {
			return nil, true
		}
		return &proto.TradeReply{Body: &proto.TradeReply_Reject{Reject: env}}, true
	}
	rerr := func(label, format string, args ...any) error {
		return &market.ResaleError{Label: label, Reason: fmt.Sprintf(format, args...)}
	}
	release, claimed := m.claim(lease)
	if !claimed {
		return reject(rerr("busy", "lease %s is being handed over to another taker", lease))
	}
	defer release()
	now := m.Now()
	r, err := m.Node.Lease(lease)
	if err != nil {
		return reject(rerr("not-holder", "%v", err))
	}
	terms := r.Terms
	if err := market.CheckResellable(terms, []byte(m.Host.ID()), now); err != nil {
		return reject(err)
	}
	if sold, _ := m.Store.SignedPremium("resale/sold/" + lease); sold != nil {
		return reject(rerr("already-resold", "lease %s was resold already", lease))
	}
	to, _, err := p2p.OpenOrder(take.TakerOrder, now)
	if err != nil {
		return reject(rerr("schema", "taker order: %v", err))
	}
	mine, remaining, open := m.Books.Lookup(take.Market, take.Currency, take.MakerOrderId)
	rest := market.LeaseEnd(terms).Sub(now).Truncate(time.Second)
	switch {
	case !open || mine.Maker != m.Host.ID().String():
		return reject(rerr("closed", "resale ask %s is not open", take.MakerOrderId))
	case to.Maker != from.String() || to.Side != market.Bid || to.Market != take.Market || to.Currency != take.Currency:
		return reject(rerr("schema", "taker order does not belong to the take"))
	case take.Quantity != remaining || int(take.Quantity) != len(terms.Gpus):
		return reject(rerr("wrong-gpus", "a resale sells all %d GPUs of the lease; the take wants %d", len(terms.Gpus), take.Quantity))
	case take.PriceMicros != mine.Price:
		return reject(rerr("wrong-price", "take price %d is not the ask's %d", take.PriceMicros, mine.Price))
	case take.LeaseType != proto.LeaseType_LEASE_TYPE_RESERVED:
		return reject(rerr("not-reserved", "a resale is of reserved time"))
	case to.Duration < rest-market.ResaleDurationSlack:
		return reject(rerr("wrong-duration", "a resale sells the rest of the block, %s (give or take %s); the bid wants %s", rest, market.ResaleDurationSlack, to.Duration))
	}
	// The book's own rules on just this pair: constraints, lease type,
	// self-match.
	pair, err := market.NewBook(take.Market, take.Currency)
	if err != nil {
		return reject(rerr("schema", "%v", err))
	}
	resting := mine
	resting.ClientKey = ""
	if err := pair.Add(&resting, now); err != nil {
		return reject(rerr("schema", "ask: %v", err))
	}
	incoming := *to
	incoming.Quantity, incoming.AllOrNone, incoming.PostOnly, incoming.TimeInForce, incoming.ClientKey = take.Quantity, false, false, market.IOC, ""
	if ms, err := pair.Match(&incoming, now); err != nil || len(ms) != 1 || ms[0].Quantity != take.Quantity {
		return reject(rerr("no-match", "the orders do not match (%v)", err))
	}

	h := &proto.Handover{LeaseId: lease, Holder: []byte(m.Host.ID()), Buyer: []byte(from), Take: takeEnv,
		AskId: take.MakerOrderId, CreatedUnixMs: now.UnixMilli()}
	hEnv, err := p2p.Seal(m.Key, h, proto.MaxReceiptSize)
	if err != nil {
		return reject(rerr("schema", "%v", err))
	}
	hctx, cancel := context.WithTimeout(ctx, trade.AcceptWindow)
	kind, body, err := p2p.SendReceiptMessage(hctx, m.Host, r.Peer, p2p.FrameHandover, hEnv)
	cancel()
	switch {
	case err != nil:
		return reject(rerr("provider-unreachable", "the lease's provider did not answer the handover: %v", err))
	case kind == p2p.FrameRefuse:
		return reject(rerr("provider-refused", "the lease's provider refused the handover: %s", truncate(string(body), 512)))
	case kind != p2p.FrameOK:
		return reject(rerr("provider-refused", "the lease's provider answered %q", kind))
	}
	accEnv := body
	nl, err := checkResaleAccept(terms, accEnv, takeEnv, []byte(from))
	if err != nil {
		m.Log.Error("the provider's accept of a handover is wrong", "lease", lease, "err", err)
		return reject(err)
	}
	at := time.UnixMilli(nl.StartUnixMs)
	m.Node.EndResold(lease, at, "resold to "+from.String()+" as lease "+nl.Id)

	p, err := market.NewPremium(terms, nl, mine.Price, m.Now())
	if err != nil {
		return reject(err)
	}
	pEnv, err := p2p.Seal(m.Key, p, proto.MaxReceiptSize)
	if err != nil {
		return reject(rerr("schema", "%v", err))
	}
	// The sale and the answer to the take are stored in one synced
	// transaction: the same take again, after a restart too, gets this
	// answer from the store (trade.Trader.StoredAnswer).
	reply = &proto.TradeReply{Body: &proto.TradeReply_Resale{Resale: &proto.ResaleReply{Accept: accEnv, Handover: hEnv, Premium: pEnv}}}
	raw, err := gproto.Marshal(reply)
	if err == nil {
		err = m.Store.PutResoldTake("resale/sold/"+lease, &proto.SignedPremium{Premium: pEnv, Handover: hEnv, Accept: accEnv}, takeID, raw)
	}
	if err != nil {
		m.Log.Error("storing a resale failed", "lease", lease, "err", err)
	}
	f := market.Fill{ID: proto.CIDOf(accEnv).String(), Market: take.Market, Currency: take.Currency, BidID: to.ID,
		AskID: take.MakerOrderId, Buyer: from.String(), Provider: m.Host.ID().String(), Quantity: take.Quantity,
		Price: mine.Price, LeaseType: market.Reserved, Time: m.Now()}
	m.Node.OwnFilled(f, nl)
	m.Node.Spawn(func() { // the ask is sold: off the book
		cctx, cancel := context.WithTimeout(m.Node.Context(), 10*time.Second)
		defer cancel()
		if _, err := m.Node.CancelOrder(cctx, take.MakerOrderId); err != nil {
			m.Log.Debug("withdrawing a sold resale ask", "order", take.MakerOrderId, "err", err)
		}
	})
	m.Log.Info("lease resold", "lease", lease, "to", shortID(from), "new", nl.Id, "at", at.Format(time.RFC3339Nano),
		"premium", market.FormatMicros(p.PremiumMicros, p.Currency))
	return reply, true
}

// checkResaleAccept checks the provider's accept of a handover of the
// lease on terms to buyer for its take: signed by the lease's provider,
// for that take, and its lease the rest of terms' block.
func checkResaleAccept(terms *proto.Lease, accEnv, takeEnv, buyer []byte) (*proto.Lease, error) {
	acc, signer, err := p2p.Open[*proto.Accept](accEnv, proto.MaxBookMessageSize)
	takeID := proto.CIDOf(takeEnv).String()
	switch {
	case err != nil:
		return nil, &market.ResaleError{Label: "bad-accept", Reason: fmt.Sprintf("accept: %v", err)}
	case !bytes.Equal([]byte(signer), terms.Provider) || !bytes.Equal(acc.Maker, terms.Provider):
		return nil, &market.ResaleError{Label: "bad-accept", Reason: "accept not signed by the lease's provider"}
	case acc.TakeId != takeID || acc.GetLease().GetId() != takeID:
		return nil, &market.ResaleError{Label: "bad-accept", Reason: "accept is not of this take"}
	}
	if err := market.CheckResoldTerms(terms, acc.Lease, buyer); err != nil {
		return nil, err
	}
	return acc.Lease, nil
}

// TakeHandover is the provider's side of a handover: checked, stored with
// the new lease's terms in one transaction, the old lease ended as resold
// and the new one started; it returns the sealed accept.
func (m *Manager) TakeHandover(from peer.ID, env []byte) ([]byte, error) {
	acc, err := m.handover(from, env)
	if err != nil {
		return nil, m.refused("handover", err)
	}
	return acc, nil
}

func (m *Manager) handover(from peer.ID, env []byte) ([]byte, error) {
	rerr := func(label, format string, args ...any) error {
		return &market.ResaleError{Label: label, Reason: fmt.Sprintf(format, args...)}
	}
	h, signer, err := p2p.Open[*proto.Handover](env, proto.MaxReceiptSize)
	if err != nil {
		return nil, rerr("bad-envelope", "handover: %v", err)
	}
	if signer != from {
		return nil, rerr("not-holder", "handover not signed by its sender")
	}
	r, err := m.Node.Lease(h.LeaseId)
	if err != nil || r.Role != market.RoleProvider {
		return nil, rerr("unknown-lease", "no lease %q provided by this node", h.LeaseId)
	}
	now := m.Now()
	if err := market.CheckHandover(h, []byte(signer), r.Terms, now); err != nil {
		return nil, err
	}
	take, taker, err := p2p.Open[*proto.Take](h.Take, proto.MaxBookMessageSize)
	switch {
	case err != nil:
		return nil, rerr("bad-take", "take: %v", err)
	case !bytes.Equal([]byte(taker), h.Buyer) || !bytes.Equal(take.Taker, h.Buyer):
		return nil, rerr("bad-take", "take not signed by the new buyer")
	case take.MakerOrderId != h.AskId || take.Market != r.Terms.Market || take.Currency != r.Terms.Currency:
		return nil, rerr("bad-take", "take is not of the holder's resale ask")
	case int(take.Quantity) != len(r.Terms.Gpus) || take.LeaseType != proto.LeaseType_LEASE_TYPE_RESERVED:
		return nil, rerr("wrong-gpus", "take of %d GPUs of %v for a lease of %d reserved", take.Quantity, take.LeaseType, len(r.Terms.Gpus))
	}
	takeID := proto.CIDOf(h.Take).String()
	if prev, err := m.Store.HandoverOf(r.ID); err == nil && prev != nil {
		if prevH, _, err := p2p.Open[*proto.Handover](prev.Handover, proto.MaxReceiptSize); err == nil && bytes.Equal(prevH.Take, h.Take) {
			return prev.Accept, nil // the same handover again: the same answer
		}
		return nil, rerr("already-resold", "lease %s was handed over already", r.ID)
	}

	var accEnv []byte
	var nl *proto.Lease
	closedAt, err := m.Node.HandOver(r.ID, func(billedTo time.Time) (time.Time, string, error) {
		at, err := market.HandoverAt(r.Terms, billedTo.UnixMilli(), now)
		if err != nil {
			return time.Time{}, "", err
		}
		nl = market.ResoldTerms(r.Terms, h.Buyer, takeID, at)
		acc := &proto.Accept{Maker: []byte(m.Host.ID()), TakeId: takeID, Lease: nl, CreatedUnixMs: now.UnixMilli()}
		if accEnv, err = p2p.Seal(m.Key, acc, proto.MaxBookMessageSize); err != nil {
			return time.Time{}, "", err
		}
		if err := m.putHandover(r.ID, nl, &proto.ResaleReply{Handover: env, Accept: accEnv}); err != nil {
			return time.Time{}, "", err
		}
		if err := m.Store.ReserveGPUs(nl.Gpus, nl.Id, market.LeaseEnd(r.Terms), r.ID); err != nil {
			m.Store.DropHandover(r.ID, nl.Id)
			return time.Time{}, "", rerr("gpus", "moving the GPUs to the new lease: %v", err)
		}
		return at, "resold by the buyer to " + peer.ID(h.Buyer).String() + " as lease " + nl.Id, nil
	})
	if err != nil {
		return nil, err
	}
	m.Log.Info("lease handed over", "lease", r.ID, "to", shortID(peer.ID(h.Buyer)), "new", nl.Id, "at", closedAt.Format(time.RFC3339Nano))

	ev := &p2p.BookEvent{Kind: p2p.KindFill, Lease: nl, Take: take, Raw: &proto.Fill{Take: h.Take, Accept: accEnv},
		Fill: &market.Fill{ID: proto.CIDOf(accEnv).String(), Market: nl.Market, Currency: nl.Currency, AskID: h.AskId,
			Buyer: peer.ID(h.Buyer).String(), Provider: m.Host.ID().String(), Quantity: take.Quantity, Price: nl.PriceMicros,
			LeaseType: market.Reserved, Time: now}}
	m.Node.Spawn(func() {
		m.Node.StartLease(ev)
		// The holder ends its side on the accept; the notice is for a
		// holder that did not get it.
		m.Node.ResoldClosed(r.ID, closedAt)
	})
	return accEnv, nil
}

// TakeResale is the new buyer's side: the holder's reply to its take of a
// resale ask m checked (the accept is the lease's provider's, for the rest
// of the lease's block at its price; the handover names this take; the
// premium is right), the premium countersigned and stored, the new lease
// started. It returns the GPUs bought.
func (m *Manager) TakeResale(o *market.Order, mt market.Match, takeEnv, askEnv []byte, rep *proto.ResaleReply) (uint32, error) {
	q, err := m.checkResale(o, mt, takeEnv, askEnv, rep)
	if err != nil {
		return 0, m.refused("resale-reply", err)
	}
	return q, nil
}

func (m *Manager) checkResale(o *market.Order, mt market.Match, takeEnv, askEnv []byte, rep *proto.ResaleReply) (uint32, error) {
	rerr := func(label, format string, args ...any) error {
		return &market.ResaleError{Label: label, Reason: fmt.Sprintf(format, args...)}
	}
	now := m.Now()
	me := []byte(m.Host.ID())
	if askEnv == nil {
		return 0, rerr("closed", "resale ask %s was not on the book when taken", mt.OrderID)
	}
	_, po, err := p2p.OpenOrder(askEnv, now)
	if err != nil {
		return 0, rerr("schema", "resale ask: %v", err)
	}
	terms, err := ResoldLeaseTerms(po.Resell, now)
	if err != nil {
		return 0, err
	}
	holder, err := peer.Decode(mt.Maker)
	if err != nil || !bytes.Equal(terms.Buyer, []byte(holder)) {
		return 0, rerr("not-holder", "the resale ask's maker does not hold the lease")
	}
	nl, err := checkResaleAccept(terms, rep.GetAccept(), takeEnv, me)
	if err != nil {
		return 0, err
	}
	h, hs, err := p2p.Open[*proto.Handover](rep.GetHandover(), proto.MaxReceiptSize)
	if err != nil {
		return 0, rerr("bad-envelope", "handover: %v", err)
	}
	if hs != holder || !bytes.Equal(h.Take, takeEnv) || !bytes.Equal(h.Buyer, me) || h.LeaseId != terms.Id || h.AskId != mt.OrderID {
		return 0, rerr("bad-handover", "the handover is not of this take by the lease's holder")
	}
	p, ps, err := p2p.Open[*proto.Premium](rep.GetPremium(), proto.MaxReceiptSize)
	if err != nil {
		return 0, rerr("bad-envelope", "premium: %v", err)
	}
	if err := market.CheckPremium(p, []byte(ps), terms, nl, mt.Price, now); err != nil {
		return 0, err
	}
	cs := &proto.PremiumCountersign{LeaseId: terms.Id, PremiumHash: proto.ReceiptHash(rep.Premium), Buyer: me, CreatedUnixMs: now.UnixMilli()}
	csEnv, err := p2p.Seal(m.Key, cs, proto.MaxReceiptSize)
	if err != nil {
		return 0, err
	}
	sp := &proto.SignedPremium{Premium: rep.Premium, Countersign: csEnv, Handover: rep.Handover, Accept: rep.Accept}
	if err := m.Store.PutSignedPremium("resale/bought/"+nl.Id, sp); err != nil {
		return 0, err
	}
	if err := m.Store.PutLease(nl); err != nil {
		return 0, err
	}
	take, _, _ := p2p.Open[*proto.Take](takeEnv, proto.MaxBookMessageSize)
	f := market.Fill{ID: proto.CIDOf(rep.Accept).String(), Market: nl.Market, Currency: nl.Currency, BidID: o.ID, AskID: mt.OrderID,
		Buyer: m.Host.ID().String(), Provider: holder.String(), Quantity: uint32(len(nl.Gpus)), Price: mt.Price,
		LeaseType: market.Reserved, Time: now}
	m.Node.StartLease(&p2p.BookEvent{Kind: p2p.KindFill, Lease: nl, Take: take, Raw: &proto.Fill{Take: takeEnv, Accept: rep.Accept}, Fill: &f})
	m.Node.OwnFilled(f, nl)
	m.Node.Spawn(func() {
		m.sendPremiumCountersign(holder, csEnv)
	})
	m.Log.Info("lease bought by resale", "lease", nl.Id, "from", shortID(holder), "of", terms.Id,
		"premium", market.FormatMicros(p.PremiumMicros, p.Currency))
	return uint32(len(nl.Gpus)), nil
}

// sendPremiumCountersign gives the holder the countersigned premium,
// retrying for a while.
func (m *Manager) sendPremiumCountersign(holder peer.ID, env []byte) {
	for backoff, tries := 250*time.Millisecond, 0; tries < 12; backoff, tries = min(2*backoff, 5*time.Second), tries+1 {
		ctx, cancel := context.WithTimeout(m.Node.Context(), p2p.ReceiptTimeout)
		kind, body, err := p2p.SendReceiptMessage(ctx, m.Host, holder, p2p.FramePremium, env)
		cancel()
		if err == nil && kind == p2p.FrameOK {
			return
		}
		if err == nil && kind == p2p.FrameRefuse {
			m.Log.Warn("premium countersignature refused", "holder", shortID(holder), "answer", string(body))
			return
		}
		select {
		case <-m.Node.Context().Done():
			return
		case <-time.After(backoff):
		}
	}
}

// TakePremiumCountersign is the holder's side: the new buyer's
// countersignature of the premium it signed, stored beside it.
func (m *Manager) TakePremiumCountersign(from peer.ID, env []byte) error {
	err := func() error {
		cs, signer, err := p2p.Open[*proto.PremiumCountersign](env, proto.MaxReceiptSize)
		if err != nil {
			return &market.ResaleError{Label: "bad-envelope", Reason: err.Error()}
		}
		key := "resale/sold/" + cs.LeaseId
		sp, err := m.Store.SignedPremium(key)
		if err != nil || sp == nil {
			return &market.ResaleError{Label: "unknown-lease", Reason: fmt.Sprintf("no resale of lease %q by this node", cs.LeaseId)}
		}
		p, _, err := p2p.Open[*proto.Premium](sp.Premium, proto.MaxReceiptSize)
		if err != nil {
			return err
		}
		if signer != from || !bytes.Equal(cs.Buyer, []byte(signer)) || !bytes.Equal(p.Buyer, []byte(signer)) ||
			!bytes.Equal(cs.PremiumHash, proto.ReceiptHash(sp.Premium)) {
			return &market.ResaleError{Label: "bad-countersign", Reason: "premium countersignature not the new buyer's, or of another premium"}
		}
		if len(sp.Countersign) > 0 {
			return nil // already taken
		}
		sp.Countersign = env
		return m.Store.PutSignedPremium(key, sp)
	}()
	if err != nil {
		return m.refused("premium", err)
	}
	return nil
}

// View is lease id's resale as this node knows it, or nil.
func (m *Manager) View(id string) *api.ResaleView {
	for _, k := range []struct{ key, role string }{{"resale/sold/" + id, "seller"}, {"resale/bought/" + id, "buyer"}} {
		sp, err := m.Store.SignedPremium(k.key)
		if err != nil || sp == nil {
			continue
		}
		p, _, err := p2p.Open[*proto.Premium](sp.Premium, proto.MaxReceiptSize)
		if err != nil {
			continue
		}
		rec, _ := gproto.MarshalOptions{Deterministic: true}.Marshal(sp)
		return &api.ResaleView{Role: k.role, Lease: p.LeaseId, NewLease: p.NewLeaseId, Holder: peer.ID(p.Holder).String(),
			Buyer: peer.ID(p.Buyer).String(), From: time.UnixMilli(p.FromUnixMs).UTC(), End: time.UnixMilli(p.EndUnixMs).UTC(),
			GPUs: p.Gpus, LeasePrice: market.FormatMicros(p.LeasePriceMicros, p.Currency),
			ResalePrice: market.FormatMicros(p.ResalePriceMicros, p.Currency), Premium: market.FormatMicros(p.PremiumMicros, p.Currency),
			PremiumMicros: p.PremiumMicros, Currency: p.Currency, Countersigned: len(sp.Countersign) > 0, Record: rec}
	}
	if rep, err := m.Store.HandoverOf(id); err == nil && rep != nil {
		h, _, err1 := p2p.Open[*proto.Handover](rep.Handover, proto.MaxReceiptSize)
		acc, _, err2 := p2p.Open[*proto.Accept](rep.Accept, proto.MaxBookMessageSize)
		if err1 == nil && err2 == nil && acc.Lease != nil {
			return &api.ResaleView{Role: "provider", Lease: id, NewLease: acc.Lease.Id, Holder: peer.ID(h.Holder).String(),
				Buyer: peer.ID(h.Buyer).String(), From: time.UnixMilli(acc.Lease.StartUnixMs).UTC(), End: market.LeaseEnd(acc.Lease),
				GPUs: uint32(len(acc.Lease.Gpus)), LeasePrice: market.FormatMicros(acc.Lease.PriceMicros, acc.Lease.Currency),
				Currency: acc.Lease.Currency}
		}
	}
	return nil
}

// putHandover stores a handover once per lease (see store.PutHandover): a
// second is refused as already resold.
func (m *Manager) putHandover(lease string, nl *proto.Lease, rep *proto.ResaleReply) error {
	err := m.Store.PutHandover(lease, nl, rep)
	if errors.Is(err, store.ErrHandedOver) {
		return &market.ResaleError{Label: "already-resold", Reason: fmt.Sprintf("lease %s was handed over already", lease)}
	}
	return err
}
