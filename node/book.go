package node

import (
	"context"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/internal/exchange"
	"github.com/suanli/suanli/node/internal/leases"
	"github.com/suanli/suanli/node/internal/repo"
	"github.com/suanli/suanli/node/internal/resale"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// The order-book replicas, their gossip and the offer cache are package
// exchange's; this file is the node's side of them: what a book message
// means to this node's own orders, leases and store.

// newBooks builds the node's replicas, wired to its host, pubsub, DHT,
// metrics and hooks, its orders stamped (grinding the stamp first if the
// repo has none of stampBits).
func (n *Node) newBooks(sweepEvery time.Duration, maxResting, stampBits int) *exchange.Books {
	stamp := repo.OpenStamp(n.repo, n.host.ID(), stampBits)
	n.spawn(func() { stamp.Grind(n.ctx, n.log) })
	return exchange.New(exchange.Config{
		Stamp: stamp.Get, Admission: exchange.AdmissionConfig{StampBits: stampBits},
		Host:       n.host,
		PubSub:     n.ps,
		Providers:  n.dht.Providers,
		Offers:     n.offers,
		Now:        n.now,
		Log:        n.log,
		Rejects:    n.metrics.Rejects,
		Orders:     n.metrics.Orders,
		Fills:      n.metrics.Fills,
		SweepEvery: sweepEvery,
		MaxResting: maxResting,
		Hooks: exchange.Hooks{
			CheckAsk: func(ctx context.Context, o *market.Order, po *proto.Order) error {
				return n.resale.AskFacts(ctx, o, po)
			}, // n.resale is set later
			Cancelled:   func(id string) { n.orders.Cancelled(id) },
			FillLocked:  n.fillLocked,
			Filled:      n.filled,
			FillRefused: n.fillRefused,
			Crossable:   n.takeCrossing,
			OfferFor:    n.offerFor,
		},
	})
}

// JoinMarket subscribes to a market's book topic, registers its validator,
// and fetches the open orders from a few peers. Joining twice is a no-op.
func (n *Node) JoinMarket(ctx context.Context, mkt string) error {
	if !market.ValidMarketKey(mkt) || mkt == "" {
		return api.BadRequest("market %q: want a key like nvidia-h100-sxm5-80gb", mkt)
	}
	if api.ReadOnly(ctx) && !n.books.Joined(mkt) {
		return api.Errorf(api.CodeForbidden, "market %s is not joined, and %w", mkt, api.ErrReadOnlyNetwork)
	}
	return n.books.JoinMarket(ctx, mkt)
}

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
		return fmt.Errorf("%w: ask names offer seq %d, newest is %d", exchange.ErrOfferUnknown, seq, offer.Seq)
	case uint32(count) < o.Quantity:
		return fmt.Errorf("ask for %d GPUs, offer has %d in %s", o.Quantity, count, o.Market)
	case offer.GetPricing().GetCurrency() != o.Currency:
		return fmt.Errorf("ask in %s, offer in %s", o.Currency, offer.GetPricing().GetCurrency())
	}
	o.Facts = market.Facts{Region: offer.Region, Attestation: n.attestedLevel(ctx, pid, offer), MemoryBytes: mem}
	return nil
}

// offerFor is the sealed offer that travels with an ask this node
// publishes: its own published offer, or for a resale ask the resold
// lease's provider's as this node holds it (nil if it holds none: replicas
// then look it up).
func (n *Node) offerFor(po *proto.Order) []byte {
	if len(po.GetResell()) > 0 {
		l, err := resale.ResoldLeaseTerms(po.Resell, n.now())
		if err != nil {
			return nil
		}
		return n.offers.Sealed(peer.ID(l.Provider))
	}
	return n.ownSealed()
}

// ownSealed is this node's published offer, sealed (nil when it has none):
// what travels with its asks and what it answers on p2p.OfferProtocol.
func (n *Node) ownSealed() []byte {
	return n.offers.OwnSealed(func(o *proto.Offer) ([]byte, error) { return p2p.SealOffer(n.key, o) })
}

// offerOf returns a provider's offer, from this node itself, the in-memory
// cache, or the DHT (see exchange.Offers.Of).
func (n *Node) offerOf(ctx context.Context, p peer.ID, minSeq uint64) (*proto.Offer, error) {
	return n.offers.Of(ctx, p, minSeq)
}

// fillLocked records a fill of this node's under the books lock: the
// node's own orders, so that whoever sees the replica change also sees
// the node's order record it, and the end of the take's count in flight,
// in the same step as the book's remaining quantity changes (inflight).
// No store write happens here: the price history is written once, after
// the lock (filled).
func (n *Node) fillLocked(ev *p2p.BookEvent, _ int64, party bool) {
	if party {
		n.orders.Filled(*ev.Fill, ev.Lease)
	}
	n.inflight.Done(ev.Lease.GetId()) // a no-op unless the take is this node's
}

// filled is the rest of applying a fill: the lease when this node is a
// party, and the fill in Badger.
func (n *Node) filled(ev *p2p.BookEvent, index int64, party bool) {
	f := ev.Fill
	if party {
		n.leases.FromFill(ev) // nil-safe
	}
	if err := n.store.PutFill(f.ID, f.Time, ev.Raw); err != nil {
		// The lease keeps the signed fill in its own record too.
		n.storeFailed("fill", err, ev.Lease.Id)
	}
	n.recordHistory(*f, index)
	n.log.Info("trade", "market", f.Market, "count", f.Quantity, "price", market.FormatMicros(f.Price, f.Currency),
		"currency", f.Currency, "buyer", short(f.Buyer), "provider", short(f.Provider), "lease", ev.Lease.Id)
}

// fillRefused keeps, as evidence, a doubly-signed fill the book refused
// for a reason that is its signers' fault.
func (n *Node) fillRefused(ev *p2p.BookEvent, err error) {
	if leases.IsFillEvidence(err) && ev.Raw != nil {
		if perr := leases.PutFillEvidence(n.store, *ev.Fill, ev.Raw, err, n.now()); perr != nil {
			n.storeFailed("fill evidence", perr, ev.Fill.ID)
		}
	}
}

// publishBook gossips a book message this node built (exchange.Books.Publish).
func (n *Node) publishBook(ctx context.Context, mkt string, m *proto.BookMessage, ev *p2p.BookEvent) error {
	return n.books.Publish(ctx, mkt, m, ev)
}

// takeCrossing makes this node the taker of each of its resting orders in
// mkt that a new opposite order crosses.
func (n *Node) takeCrossing(mkt string) {
	for _, o := range n.books.Crossing(mkt, n.host.ID().String()) {
		env := n.orders.Envelope(o.ID)
		if env == nil {
			continue
		}
		n.trade.TakeLoop(n.ctx, &o, env)
	}
}

// short abbreviates a peer ID string for logs.
func short(id string) string {
	if len(id) > 8 {
		return id[len(id)-8:]
	}
	return id
}
