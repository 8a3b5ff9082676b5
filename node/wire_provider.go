package node

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/gpu"
	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/internal/credit"
	"github.com/suanli/suanli/node/internal/exchange"
	"github.com/suanli/suanli/node/internal/history"
	"github.com/suanli/suanli/node/internal/lease"
	"github.com/suanli/suanli/node/internal/provider"
	"github.com/suanli/suanli/node/internal/store"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// The provider's side, wired: offer publishing, capacity, the calendar
// and standing asks (internal/provider), the credit policy
// (internal/credit), and the dashboard's history (internal/history).
// What the rest of the node calls keeps its name here, one line each.

// What the provider's packages are given, checked at compile time.
var (
	_ provider.Store   = (*store.Store)(nil)
	_ provider.DHT     = (*p2p.DHT)(nil)
	_ provider.Orders  = standingOrders{}
	_ credit.Payments  = nodePayments{}
	_ history.Store    = (*store.Store)(nil)
	_ api.DashboardAPI = (*Node)(nil)
)

// DefaultCreditLimit is a provider's credit limit per buyer when neither
// an option nor config.json sets one: 10 units of the provider's currency.
const DefaultCreditLimit = credit.DefaultLimit

// DefaultCreditNew is the credit a buyer with no paid history gets when
// neither an option nor config.json sets it: 1 unit of the limit's
// currency (never more than the limit).
const DefaultCreditNew = credit.DefaultNew

// WithCreditNew sets the credit a buyer with no paid history starts with,
// a decimal in the credit limit's currency; each payment the provider
// acknowledges raises it by as much, up to the credit limit.
func WithCreditNew(decimal string) Option {
	return func(o *options) error {
		if err := credit.ParseNew(decimal); err != nil {
			return err
		}
		o.creditNew = decimal
		return nil
	}
}

// WithCreditLimit sets the most a buyer may owe this provider unpaid: a
// decimal in currency (empty: the node's price currency), or "none" for no
// limit. Leases in any other currency get no credit: only what the buyer
// prepaid in it.
func WithCreditLimit(decimal, currency string) Option {
	return func(o *options) error {
		if err := credit.ParseLimit(decimal, currency); err != nil {
			return err
		}
		o.creditLimit, o.creditCurrency = decimal, currency
		return nil
	}
}

// creditSettings resolves the credit policy: options over config.json.
func creditSettings(o options, cfg Config, priceCurrency string) credit.Settings {
	return credit.Settings{Limit: cmp.Or(o.creditLimit, cfg.CreditLimit), Currency: cmp.Or(o.creditCurrency, priceCurrency),
		New: cmp.Or(o.creditNew, cfg.CreditNew)}
}

// newCredit makes the node's credit policy; what it reads of the node
// (store, leases, metrics) it reads when asked, so it may be made first.
func (n *Node) newCredit(o options, cfg Config, self peer.ID) (*credit.Policy, error) {
	return credit.New(creditSettings(o, cfg, n.price.Currency), credit.Config{
		Self: self, Payments: nodePayments{n}, Log: n.log,
		Leases: func(buyer peer.ID, currency, except string, add func(*market.Lease) error) error {
			return n.leases.EachProvided(buyer, currency, except, add)
		},
		Reject: func(kind, reason string) { n.metrics.Rejects.WithLabelValues(kind, reason).Inc() },
	})
}

// nodePayments reads the acknowledged payments from the node's store.
type nodePayments struct{ n *Node }

func (p nodePayments) PaymentsBetween(provider, buyer peer.ID, fn func(uint64, []byte) error) error {
	return p.n.store.PaymentsBetween(provider, buyer, fn)
}

// newProvider makes the provider's side; a buyer's publishes nothing.
func (n *Node) newProvider() {
	n.prov = provider.New(provider.Config{
		Self: n.host.ID(), Key: n.key, GPUs: n.gpus, NoGPU: n.noGPU, Store: n.store, DHT: n.dht, Clock: provider.SystemClock(n.now), Log: n.log,
		Published: n.metrics.Published,
		Telemetry: func(at time.Time, tel []gpu.Telemetry) { n.metrics.Observe(tel); n.telHist.Add(at, tel) },
		OfferTTL:  n.offerTTL, Region: n.region, Price: n.price, Schedule: n.schedule, ScheduleOffset: n.scheduleOffset,
		BillingInterval: n.billingInterval, ChargeIncrement: n.chargeIncrement,
		Hooks: provider.Hooks{
			Addrs: n.Addrs, JoinMarket: n.JoinMarket,
			Republished: func(ctx context.Context, mkts []string) { n.books.Refresh(ctx, mkts...) },
			Isolation: func() proto.IsolationLevel {
				if n.isolation == nil {
					return proto.IsolationLevel_ISOLATION_LEVEL_UNSPECIFIED
				}
				return lease.IsolationProto(n.isolation.Level)
			},
			Resources: func() provider.Resources {
				p := n.perGPU.Share(provider.Count(n.gpus))
				return provider.Resources{MilliCPUsPerGPU: uint64(p.MilliCPUs), MemoryPerGPU: p.RAM, DiskPerGPU: p.Disk, HostMemory: provider.HostMemory()}
			},
		},
	})
	n.standing = provider.NewStanding(standingOrders{n}, provider.SystemClock(n.now), n.log)
}

// run is the node's background life: join the network, then (as a
// provider) sample telemetry, keep the standing asks topped up, and
// publish the offer and keep republishing it.
func (n *Node) run() {
	n.bootstrap()
	if n.gpus == nil {
		return
	}
	n.spawn(func() { n.prov.SampleTelemetry(n.ctx) })
	n.spawn(func() { n.standing.Run(n.ctx) })
	// A publish that failed for want of peers is retried soon after a peer
	// is identified, not only when its backoff ends: the first offer of a
	// provider started long before its peers goes out when they come.
	peerUp := make(chan struct{}, 1)
	if sub, err := n.host.EventBus().Subscribe(new(event.EvtPeerIdentificationCompleted)); err == nil {
		defer sub.Close()
		// Drained at once: a subscriber that falls behind blocks the
		// host's identify, and Run is busy while it publishes.
		n.spawn(func() {
			for range sub.Out() {
				select {
				case peerUp <- struct{}{}:
				default:
				}
			}
		})
	}
	n.prov.Run(n.ctx, peerUp)
}

// bootstrap dials the bootstrap peers until one answers or the node closes.
func (n *Node) bootstrap() {
	backoff := 500 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(n.ctx, 20*time.Second)
		err := n.dht.Bootstrap(ctx)
		cancel()
		if err == nil || n.ctx.Err() != nil {
			return
		}
		n.log.Warn("bootstrap failed; will retry", "err", err, "in", backoff)
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

// Publish builds a fresh offer from the GPU inventory with the next seq,
// seals it and publishes it to the DHT. The run loop calls it on a timer;
// integrators may call it after changing what they offer.
func (n *Node) Publish(ctx context.Context) error { return n.prov.Publish(ctx) }

// Published is the last offer this node published, or nil.
func (n *Node) Published() *proto.Offer {
	if n.prov == nil {
		return nil
	}
	return n.prov.Published()
}

// capacityChanged asks the run loop to publish a fresh offer now
// (provider.CapacityChanged); a node without GPUs publishes nothing.
func (n *Node) capacityChanged() {
	if n.prov != nil {
		n.prov.CapacityChanged()
	}
}

// leaseEnded is the provider's hook at the end of a lease, after its GPUs
// are handed back: publish the freed capacity and re-list it for the
// standing asks.
func (n *Node) leaseEnded() {
	n.capacityChanged()
	if n.standing != nil {
		n.standing.Poke()
	}
}

// Standing asks.

// StandingAsks lists the standing asks: ID, count kept, orders placed.
func (n *Node) StandingAsks() []api.StandingAskView { return n.standing.List() }

// standingOrders is what standing asks reach of the node
// (provider.Orders): its API for orders and leases, and its own orders.
type standingOrders struct{ *Node }

func (s standingOrders) FreeGPUs(mkt string) ([]string, error) { return s.prov.FreeGPUs(mkt) }

func (s standingOrders) MarkStanding(order, standing string) { s.orders.MarkStanding(order, standing) }
func (s standingOrders) RestingAsks(mkt string, now time.Time) uint32 {
	return s.orders.RestingAsks(mkt, now)
}

// Credit.

// creditViews are buyer's credit in its leases' currencies and the limit's.
func (n *Node) creditViews(buyer peer.ID, currencies []string) []api.CreditView {
	if n.gpus == nil {
		return nil
	}
	return n.credit.Views(buyer, currencies, n.now())
}

// creditFreed is told a payment of buyer was acknowledged: the policy
// counts it, and this provider's resting orders in its markets are
// retried, so an ask crossing a bid it refused to take while the buyer
// was over its limit trades now.
func (n *Node) creditFreed(buyer peer.ID) {
	n.credit.Paid(buyer)
	seen := map[string]bool{}
	for _, g := range n.Published().GetGpus() {
		if !seen[g.Market] {
			seen[g.Market] = true
			n.books.Kick(g.Market)
		}
	}
}

// History.

// prices is the price history in the node's store.
func (n *Node) prices() history.Prices { return history.Prices{Store: n.store, Log: n.log} }

func (n *Node) recordHistory(f market.Fill, index int64) { n.prices().Record(f, index) }

// History implements DashboardAPI.
func (n *Node) History(_ context.Context, mkt, currency string, q api.HistoryQuery) (_ api.HistoryView, err error) {
	defer classified(&err)
	return n.prices().Query(mkt, currency, q)
}

// GPUHistory implements DashboardAPI.
func (n *Node) GPUHistory(ctx context.Context) (_ api.GPUHistoryView, err error) {
	defer classified(&err)
	if n.gpus == nil {
		return api.GPUHistoryView{}, fmt.Errorf("%w: %v", api.ErrNoGPUs, n.noGPU)
	}
	leases, _ := n.Leases(ctx)
	return n.telHist.View(n.gpus.Inventory, leases, provider.TelemetryInterval)
}

// marketsLookupTimeout bounds the DHT lookup Markets makes on a node that
// has not looked up offers in the last minute.
const marketsLookupTimeout = 5 * time.Second

// Markets implements DashboardAPI: the markets this node joined, with
// their books, and the markets known from providers' offers (the DHT's,
// through the node's offer cache), joined or not, with how many providers
// offer how many GPUs from what list price. A read-only request starts no
// lookup: it answers from the offers this node already stored.
func (n *Node) Markets(ctx context.Context) (_ []api.MarketSummary, err error) {
	defer classified(&err)
	now := n.now()
	var books []api.MarketSummary
	n.books.Each(func(s *exchange.Replica) { books = append(books, history.BookSummary(s, now)) })
	return history.Summaries(books, n.books.Markets(), n.knownOffers(ctx, now)), nil
}

// knownOffers are the unexpired offers of every market this node knows:
// its own, and the offer cache's from the last lookup of all markets (a
// new lookup, bounded by marketsLookupTimeout, when that one is more than
// a minute old). A read-only request, or a lookup that finds nothing, gets
// the offers stored in Badger.
func (n *Node) knownOffers(ctx context.Context, now time.Time) []*proto.Offer {
	offers, warm := map[peer.ID]*proto.Offer{}, true
	if !api.ReadOnly(ctx) {
		offers, warm = n.offers.Warm(p2p.AnyMarket)
	}
	if !warm {
		lctx, cancel := context.WithTimeout(ctx, marketsLookupTimeout)
		var err error
		offers, err = n.offers.Lookup(lctx, p2p.AnyMarket, false)
		cancel()
		if err != nil {
			n.log.Debug("some offers could not be fetched", "err", err)
		}
	}
	if len(offers) == 0 {
		n.offers.FromStore(offers)
	}
	if o := n.Published(); o != nil {
		offers[n.host.ID()] = o
	}
	out := make([]*proto.Offer, 0, len(offers))
	for _, o := range offers {
		if time.UnixMilli(o.ExpiresUnixMs).After(now) {
			out = append(out, o)
		}
	}
	return out
}
