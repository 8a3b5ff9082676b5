package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/suanli/suanli/gpu"
	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/executor"
	"github.com/suanli/suanli/node/internal/attestor"
	"github.com/suanli/suanli/node/internal/credit"
	"github.com/suanli/suanli/node/internal/exchange"
	"github.com/suanli/suanli/node/internal/history"
	"github.com/suanli/suanli/node/internal/httpapi"
	"github.com/suanli/suanli/node/internal/lease"
	"github.com/suanli/suanli/node/internal/metrics"
	"github.com/suanli/suanli/node/internal/orders"
	"github.com/suanli/suanli/node/internal/provider"
	"github.com/suanli/suanli/node/internal/repo"
	"github.com/suanli/suanli/node/internal/resale"
	"github.com/suanli/suanli/node/internal/store"
	"github.com/suanli/suanli/node/internal/trade"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// defaultStampBits is WithStampBits' default (this package's tests lower it).
var defaultStampBits = p2p.DefaultStampBits

// Option configures New. Options override the repo's config.json.
type Option func(*options) error

type options struct {
	repo       string
	autoInit   bool
	passphrase []byte
	listen     []string
	bootstrap  []string
	api        *string
	gpuSim     string
	gpuSeed    int64
	backend    gpu.Backend
	noGPU      bool
	region     string
	price      string
	currency   string
	offerTTL   time.Duration
	billing    time.Duration
	client     bool
	logger     *slog.Logger
	now        func() time.Time
	verdictTTL time.Duration // see WithAttestWindow
	// Leases (see lease.go).
	executors []string
	docker    *DockerConfig
	slurm     *SlurmConfig
	process   executor.ProcessConfig
	perGPU    provider.PerGPU
	// Preemption (see preempt.go).
	preemptNotice time.Duration
	preemptMargin *int64
	// The unit leases charge GPU time in (see WithBillingIncrement).
	chargeIncrement time.Duration
	// Time-of-day prices (see billing.go).
	schedule       []*proto.PriceWindow
	scheduleOffset int32
	unpaidGrace    time.Duration
	withhold       bool
	// Credit limits (see wire_provider.go, internal/credit).
	creditLimit    string // decimal, or "none"
	creditNew      string // decimal
	creditCurrency string
	host           host.Host // see WithHost (host_option.go)
	// sweepEvery is how often expired orders leave the replicas; tests
	// shorten it (export_test.go). Default exchange.DefaultSweepInterval.
	sweepEvery time.Duration
	logCap     int64 // see WithLogCap
	// maxResting caps the other makers' orders each replica keeps
	// (WithMaxRestingOrders).
	maxResting int
	smallStore bool // see WithSmallStore
	stampBits  int  // see WithStampBits
}

// WithSmallStore sizes the node's Badger store for a small node among
// hundreds in one process (a simulation): a 1 MiB memtable, no block or
// index cache (store.Options.Small). It is still Badger on disk, about
// 9 MiB less memory per node than the default.
func WithSmallStore() Option {
	return func(o *options) error { o.smallStore = true; return nil }
}

// WithMaxRestingOrders caps the orders of other makers that this node's
// replica of one market's book (in one currency) keeps resting. Past it a
// new order gets in only in place of one it ranks ahead of, and the last
// in priority goes (market.Evictee); this node's own orders always stay.
// Default market.MaxRestingOrders.
func WithMaxRestingOrders(n int) Option {
	return func(o *options) error {
		if n <= 0 {
			return fmt.Errorf("max resting orders %d: want a positive number", n)
		}
		o.maxResting = n
		return nil
	}
}

// WithRepo sets the repo directory. Required.
func WithRepo(dir string) Option {
	return func(o *options) error { o.repo = dir; return nil }
}

// WithAutoInit initializes the repo with defaults if it has none.
func WithAutoInit() Option {
	return func(o *options) error { o.autoInit = true; return nil }
}

// WithPassphrase decrypts (or, with WithAutoInit, encrypts) the identity key.
func WithPassphrase(p []byte) Option {
	return func(o *options) error { o.passphrase = p; return nil }
}

// WithListen replaces the listen multiaddrs.
func WithListen(addrs ...string) Option {
	return func(o *options) error {
		for _, a := range addrs {
			if _, err := ma.NewMultiaddr(a); err != nil {
				return fmt.Errorf("node: listen address %q: %w", a, err)
			}
		}
		o.listen = addrs
		return nil
	}
}

// WithBootstrap replaces the bootstrap peers (full multiaddrs with /p2p/<id>).
func WithBootstrap(addrs ...string) Option {
	return func(o *options) error {
		if _, err := repo.ParseBootstrap(addrs); err != nil {
			return err
		}
		o.bootstrap = addrs
		return nil
	}
}

// WithAPI sets the local API address: "127.0.0.1:0" picks a free port,
// "unix:/path" a unix socket, "" disables the API.
func WithAPI(addr string) Option {
	return func(o *options) error { o.api = &addr; return nil }
}

// WithGPUSim makes the node a provider of a simulated machine (see
// gpu.SimModels), its telemetry deterministic for seed.
func WithGPUSim(model string, seed int64) Option {
	return func(o *options) error {
		if o.backend != nil || o.noGPU {
			return errors.New("node: WithGPUSim conflicts with WithGPUBackend/WithoutGPU")
		}
		o.gpuSim, o.gpuSeed = model, seed
		return nil
	}
}

// WithGPUBackend uses the given backend; the node closes it on Close.
func WithGPUBackend(b gpu.Backend) Option {
	return func(o *options) error {
		if o.gpuSim != "" || o.noGPU {
			return errors.New("node: WithGPUBackend conflicts with WithGPUSim/WithoutGPU")
		}
		o.backend = b
		return nil
	}
}

// WithoutGPU runs the node as a buyer only, without probing NVML.
func WithoutGPU() Option {
	return func(o *options) error {
		if o.gpuSim != "" || o.backend != nil {
			return errors.New("node: WithoutGPU conflicts with WithGPUSim/WithGPUBackend")
		}
		o.noGPU = true
		return nil
	}
}

// WithRegion sets the provider's region code, e.g. "CN-GZ".
func WithRegion(code string) Option {
	return func(o *options) error {
		if !market.ValidRegion(code) {
			return fmt.Errorf("node: region %q: want a code like CN-GZ or US-CA", code)
		}
		o.region = code
		return nil
	}
}

// WithPrice sets the on-demand price per GPU-hour, a decimal in currency.
func WithPrice(decimal, currency string) Option {
	return func(o *options) error {
		if _, err := market.ParseMoney(decimal, currency); err != nil {
			return fmt.Errorf("node: price: %w", err)
		}
		o.price, o.currency = decimal, currency
		return nil
	}
}

// WithOfferTTL sets how long published offers live; they are republished
// at a third of it. Default 1 h.
func WithOfferTTL(d time.Duration) Option {
	return func(o *options) error {
		if d < 3*time.Second || d > market.MaxOfferTTL {
			return fmt.Errorf("node: offer TTL %s out of range 3s..%s", d, market.MaxOfferTTL)
		}
		o.offerTTL = d
		return nil
	}
}

// WithBillingInterval sets how often a provider meters leases and sends
// receipts, and so the billing interval of the leases it signs. Default 60 s.
func WithBillingInterval(d time.Duration) Option {
	return func(o *options) error {
		if d < time.Second || d > time.Hour {
			return fmt.Errorf("node: billing interval %s out of range 1s..1h", d)
		}
		o.billing = d
		return nil
	}
}

// WithDHTClient runs the DHT in client mode: for short-lived processes that
// should not hold records for others.
func WithDHTClient() Option {
	return func(o *options) error { o.client = true; return nil }
}

// WithLogger sets the logger; each subsystem logs under its own name.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error { o.logger = l; return nil }
}

// WithClock sets the clock used for offer times and validation.
func WithClock(now func() time.Time) Option {
	return func(o *options) error { o.now = now; return nil }
}

// Node is one Suanli peer: provider when it has GPUs, buyer always.
// Its methods are safe for concurrent use.
type Node struct {
	// isolation is what the executors enforce (set once at start).
	isolation *api.IsolationView
	repo      string
	key       crypto.PrivKey
	lock      *os.File
	store     *store.Store
	host      host.Host
	dht       *p2p.DHT
	gpus      gpu.Backend // nil: buyer only
	noGPU     error       // why gpus is nil
	region    string
	price     market.Money
	offerTTL  time.Duration
	now       func() time.Time
	log       *slog.Logger
	metrics   *metrics.Metrics
	api       *httpapi.Server

	ctx       context.Context
	cancel    context.CancelFunc
	spawned   trade.Gate // background work Close waits for (spawn)
	closeOnce sync.Once
	closeErr  error

	ps              *pubsub.PubSub
	books           *exchange.Books // the market replicas and their gossip (book.go)
	offers          *exchange.Offers
	verified        *p2p.Verified // the signatures this node checked (p2p.Verified)
	billingInterval time.Duration
	trade           *trade.Trader        // the take protocol, as taker and maker (wire_trade.go)
	resale          *resale.Manager      // resales of reserved time (wire_trade.go)
	inflight        trade.Inflight       // GPUs of own orders in takes in flight, as taker or maker
	orders          *orders.Own          // the node's own orders (orders.go)
	attest          *attestor.Attestor   // see attest.go
	leases          *lease.Manager       // the lease runtime (wire_lease.go)
	perGPU          provider.PerGPU      // what each GPU is sold with (see WithResourcesPerGPU)
	preemptNotice   time.Duration        // spot leases' notice before preemption
	chargeIncrement time.Duration        // the unit leases charge GPU time in (see WithBillingIncrement)
	schedule        []*proto.PriceWindow // time-of-day prices (see WithPriceSchedule)
	scheduleOffset  int32
	preemptMargin   int64 // basis points a spot trade must pay more to preempt

	// The provider's side (wire_provider.go).
	prov     *provider.Provider // offer publishing, capacity, calendar
	standing *provider.Standing // standing asks
	credit   *credit.Policy     // credit limits
	telHist  history.Telemetry  // GPU samples over time

	// hostInjected: the caller gave the host (WithHost) and closes it.
	hostInjected bool
}

var _ api.API = (*Node)(nil)

// New opens the repo, starts the libp2p host, DHT and local API, and starts
// joining the network and (with GPUs) publishing offers in the background.
// Close stops everything.
func New(opts ...Option) (_ *Node, err error) {
	o := options{offerTTL: time.Hour, billing: time.Minute, now: time.Now, logCap: DefaultLogCap, stampBits: defaultStampBits}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if o.repo == "" {
		return nil, errors.New("node: no repo directory (WithRepo)")
	}
	if len(o.schedule) > 0 && o.chargeIncrement > 0 {
		return nil, errors.New("node: a price schedule bills each window to the millisecond: it excludes WithBillingIncrement")
	}
	if o.logger == nil {
		o.logger = slog.Default()
	}
	lock, cfg, err := repo.Open(o.repo, o.autoInit, o.passphrase)
	if err != nil {
		return nil, err
	}
	n := &Node{
		lock: lock,
		repo: o.repo, now: o.now, offerTTL: o.offerTTL, billingInterval: o.billing, perGPU: o.perGPU, chargeIncrement: o.chargeIncrement, schedule: o.schedule, scheduleOffset: o.scheduleOffset,
		preemptNotice: cmp.Or(o.preemptNotice, market.PreemptionNotice), preemptMargin: market.DefaultPreemptMarginBP,
		log: o.logger.With("node", filepath.Base(o.repo)),
	}
	if o.preemptMargin != nil {
		n.preemptMargin = *o.preemptMargin
	}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if n.key, err = LoadKey(o.repo, o.passphrase); err != nil {
		return nil, err
	}
	if o.host != nil {
		if n.key, err = p2p.HostKey(o.host); err != nil {
			return nil, err
		}
	}
	pid, _ := peer.IDFromPrivateKey(n.key)
	n.log = n.log.With("peer", shortID(pid))

	// Resolve configuration: options win over config.json.
	listen := repo.Or(o.listen, cfg.Listen)
	bootstrap := repo.Or(o.bootstrap, cfg.Bootstrap)
	apiAddr := cfg.API
	if o.api != nil {
		apiAddr = *o.api
	}
	n.region = cmp.Or(o.region, cfg.Region, repo.DefaultRegion)
	if !market.ValidRegion(n.region) {
		return nil, fmt.Errorf("node: region %q in config: want a code like CN-GZ", n.region)
	}
	priceStr, cur := cmp.Or(o.price, cfg.Price, "2.50"), cmp.Or(o.currency, cfg.Currency, "USD")
	if n.price, err = market.ParseMoney(priceStr, cur); err != nil {
		return nil, fmt.Errorf("node: price in config: %w", err)
	}
	if n.credit, err = n.newCredit(o, cfg, pid); err != nil {
		return nil, err
	}
	peers, err := repo.ParseBootstrap(bootstrap)
	if err != nil {
		return nil, err
	}

	n.metrics = metrics.New()
	if n.store, err = store.Open(filepath.Join(o.repo, repo.DatastoreDir), store.Options{Logger: o.logger.With("subsystem", "badger"), Now: n.now, Small: o.smallStore}); err != nil {
		return nil, err
	}
	if n.gpus, n.noGPU = gpu.Choose(o.noGPU, o.backend, cmp.Or(o.gpuSim, cfg.GPUSim), o.gpuSeed); n.noGPU != nil {
		n.log.Info("no GPUs to offer; running as a buyer", "reason", n.noGPU)
	}

	if o.host != nil {
		n.host, n.hostInjected = o.host, true
	} else if n.host, err = p2p.NewHost(p2p.HostConfig{Key: n.key, Listen: listen, Registerer: n.metrics.Reg}); err != nil {
		return nil, err
	}
	n.verified = p2p.NewVerified(p2p.DefaultVerifiedEntries)
	validator := p2p.OfferValidator{Now: n.now, Verified: n.verified, OnReject: func(reason string) {
		n.metrics.Rejects.WithLabelValues("offer", reason).Inc()
	}}
	if n.dht, err = p2p.NewDHT(p2p.DHTConfig{Host: n.host, Validator: validator, Client: o.client, Bootstrap: peers}); err != nil {
		return nil, err
	}
	watchMetrics(n.metrics, n)
	n.newProvider()

	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.offers = exchange.NewOffers(n.ctx, exchange.OffersConfig{
		DHT: n.dht, Store: n.store, Self: n.host.ID(), Published: n.Published, Now: n.now, Log: n.log, Found: n.metrics.Found, Verified: n.verified,
	})
	if n.ps, err = p2p.NewPubSub(n.ctx, n.host); err != nil {
		return nil, err
	}
	n.books = n.newBooks(o.sweepEvery, o.maxResting, o.stampBits)
	n.orders = n.newOrders()
	n.books.Start(n.ctx)
	n.trade, n.resale = n.newTrader(), n.newResale()
	p2p.HandleTakes(n.host, n.trade.HandleTake)
	p2p.HandleSync(n.host, n.books.AnswerSync)
	p2p.HandleOffer(n.host, n.ownSealed, func() { n.metrics.Rejects.WithLabelValues("offer-request", "rate-limited").Inc() })
	p2p.HandleOfferDigest(n.host, n.offers.Held, func() { n.metrics.Rejects.WithLabelValues("offer-pull", "rate-limited").Inc() })
	if err := n.startLeases(o); err != nil {
		return nil, err
	}
	n.startAttest(o)
	if apiAddr != "" {
		if n.api, err = startAPI(n, apiAddr); err != nil {
			return nil, err
		}
	}
	n.spawn(n.run)
	n.log.Info("node started", "addrs", n.host.Addrs(), "provider", n.gpus != nil, "api", n.APIAddr())
	return n, nil
}

// spawn runs fn on a goroutine that Close waits for. Work is started
// from goroutines Close does not wait for (stream handlers, the books'
// readers); once Close waits, spawn starts nothing and reports false.
// What it drops then is redone from storage when the node restarts.
func (n *Node) spawn(fn func()) bool {
	if !n.spawned.Enter() {
		return false
	}
	go func() {
		defer n.spawned.Leave()
		fn()
	}()
	return true
}

// Close stops the node: API, background work, DHT, host, GPUs, store, lock.
// The api file is removed. Close is safe to call more than once; fields
// stay set, so a stream handler still running meets closed resources (and
// errors), never nil ones.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		var errs []error
		if n.api != nil {
			errs = append(errs, n.api.Close())
		}
		if n.cancel != nil {
			n.cancel()
		}
		if n.host != nil {
			// Stop accepting streams before waiting for the workers.
			for _, p := range []protocol.ID{p2p.TradeProtocol, p2p.SyncProtocol, p2p.ReconcileProtocol, p2p.AttestProtocol, p2p.OfferProtocol, p2p.OfferDigestProtocol} {
				n.host.RemoveStreamHandler(p)
			}
			if n.leases != nil {
				n.leases.Stop()
			}
		}
		n.spawned.Close()
		if n.books != nil {
			n.books.Wait()
		}
		if n.offers != nil {
			n.offers.Wait()
		}
		if n.dht != nil {
			errs = append(errs, n.dht.Close())
		}
		if n.host != nil && !n.hostInjected {
			errs = append(errs, n.host.Close())
		}
		closeStore := func() {
			if n.gpus != nil {
				errs = append(errs, n.gpus.Close())
			}
			if n.store != nil {
				errs = append(errs, n.store.Close())
			}
		}
		if n.trade != nil {
			// Let the takes being answered finish before the store goes.
			n.trade.Shut(closeStore)
		} else {
			closeStore()
		}
		if n.lock != nil {
			errs = append(errs, n.lock.Close())
		}
		n.closeErr = errors.Join(errs...)
	})
	return n.closeErr
}

// PeerID is the node's identity.
func (n *Node) PeerID() peer.ID { return n.host.ID() }

// Host is the node's libp2p host, for integrators adding protocols.
func (n *Node) Host() host.Host { return n.host }

// Addrs are the node's full listen multiaddrs, ending in /p2p/<id>.
func (n *Node) Addrs() []string {
	var out []string
	for _, a := range n.host.Addrs() {
		out = append(out, a.String()+"/p2p/"+n.host.ID().String())
	}
	return out
}

// APIAddr is where the local API listens, or "" when it is off.
func (n *Node) APIAddr() string {
	if n.api == nil {
		return ""
	}
	return n.api.Addr()
}

// IsProvider reports whether the node has GPUs to offer.
func (n *Node) IsProvider() bool { return n.gpus != nil }

// ID implements API.
func (n *Node) ID(context.Context) (_ api.IDInfo, err error) {
	defer classified(&err)
	info := api.IDInfo{ID: n.host.ID().String(), Addrs: n.Addrs(), Provider: n.gpus != nil}
	if n.noGPU != nil {
		info.NoGPUReason = n.noGPU.Error()
	}
	return info, nil
}

// GPUs implements API.
func (n *Node) GPUs(context.Context) (_ api.GPUReport, err error) {
	defer classified(&err)
	if n.gpus == nil {
		return api.GPUReport{}, fmt.Errorf("%w: %v", api.ErrNoGPUs, n.noGPU)
	}
	return InventoryReport(n.gpus)
}

// Peers implements API.
func (n *Node) Peers(context.Context) (_ []api.PeerView, err error) {
	defer classified(&err)
	out := []api.PeerView{}
	for _, p := range n.host.Network().Peers() {
		v := api.PeerView{ID: p.String(), Addrs: []string{}}
		for _, c := range n.host.Network().ConnsToPeer(p) {
			v.Addrs = append(v.Addrs, c.RemoteMultiaddr().String())
		}
		out = append(out, v)
	}
	return out, nil
}

func shortID(p peer.ID) string { return short(p.String()) }

// Repo is the node's repo directory.
func (n *Node) Repo() string { return n.repo }
