// Package simnet runs a simulated many-region Suanli network in one process:
// real nodes (DHT, gossipsub, Badger, simulated GPUs) on go-libp2p's mocknet
// with per-link latency, measured against raw libp2p floors (kad-dht,
// gossipsub, ping) run on the same mocknet in the same run.
package simnet

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	coreconnmgr "github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	corenet "github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/suanli/suanli/gpu"
	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/devnet"
)

// DefaultRegions are the first regions nodes are spread over, round robin:
// two "east" (low latency, near users) and two "west" (cheap compute).
var DefaultRegions = []string{"CN-SH", "CN-GZ", "CN-NM", "CN-GZ-W"}

// Market is the market the simulated providers trade in with the default
// model (dgxh100); Config.Model chooses another.
const Market = "nvidia-h100-sxm5-80gb"

// Config sizes a simulation. Zero values take the defaults written on each
// field.
type Config struct {
	// Nodes is the number of Suanli nodes. Default 100.
	Nodes int
	// Regions is how many regions the nodes are spread over, round robin.
	// Default 4 (DefaultRegions, then CN-R5, CN-R6, ...).
	Regions int
	// Intra is the one-way latency inside a region, Inter between regions.
	// Defaults 2 ms and 20 ms; Inter at most 40 ms.
	Intra, Inter time.Duration
	// ProviderShare is the share of nodes that are providers, in (0, 1).
	// Default 0.25.
	ProviderShare float64
	// Samples is how many times each measure is taken. Default 20.
	Samples int
	// BillingInterval of the providers' leases. Default 1 s (the minimum).
	BillingInterval time.Duration
	// OfferTTL is how long the providers' offers live (they republish
	// before). Default 10 min. Shorter, the measures after the asks run
	// on asks whose travelling offers have expired, as in a long-lived
	// market.
	OfferTTL time.Duration
	// Faults runs, after the core measures, an east-west partition that
	// heals, then churn (a tenth of the buyers drop out and come back).
	Faults bool
	// Attack, when above zero, runs after the core measures hostile peers
	// numbering this share of the nodes (each with a few identities) that
	// flood the market's topic, and measures honest propagation and
	// crossing again while they do. At most 0.5.
	Attack float64
	// AttackCores is how many cores of their own the hostile peers grind
	// maker stamps on, each charged the real work (p2p.DefaultStampBits,
	// stampCost): they get AttackCores/stampCost stamped identities a
	// second. Default: what as many honest nodes have here, this
	// machine's cores divided by Nodes for each hostile host.
	AttackCores float64
	// ConnHigh is each simulated host's connection manager's high
	// watermark (it trims back to a third of it). Default DefaultConnHigh,
	// a real node's; a lower one holds less per node at large sizes
	// (each connection costs a simulated host ~50 KiB: gossipsub's and
	// the mocknet's goroutines per stream).
	ConnHigh int
	// Model is the simulated machine every provider has (gpu.SimModels);
	// default "dgxh100", whose offers carry eight GPUs' confidential-
	// computing evidence (≈ 60 KB sealed). "dgxa100" offers carry none
	// (≈ 3 KB): the market is then nvidia-a100-sxm4-40gb.
	Model string
	// Dir holds the nodes' repos; empty: a temporary directory, removed.
	Dir string
	// MemProfile, when set, is called after the core measures (after a
	// GC), where the per-node memory is read, for example to write a heap
	// profile.
	MemProfile func()
	// Logger for the harness's progress; default: discard. Nodes log
	// errors only, to the same handler.
	Logger *slog.Logger
}

// StampBits is the work of a simulated node's maker stamp (4096 hashes;
// a real daemon's is p2p.DefaultStampBits). The hostile peers are charged
// for their stamps at the real work (Config.AttackCores).
const StampBits = 12

func (c *Config) defaults() error {
	if c.Nodes == 0 {
		c.Nodes = 100
	}
	if c.Regions == 0 {
		c.Regions = 4
	}
	if c.Intra == 0 {
		c.Intra = 2 * time.Millisecond
	}
	if c.Inter == 0 {
		c.Inter = 20 * time.Millisecond
	}
	if c.ProviderShare == 0 {
		c.ProviderShare = 0.25
	}
	if c.Samples == 0 {
		c.Samples = 20
	}
	if c.BillingInterval == 0 {
		c.BillingInterval = time.Second
	}
	if c.OfferTTL == 0 {
		c.OfferTTL = 10 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.ConnHigh == 0 {
		c.ConnHigh = DefaultConnHigh
	}
	if c.Model == "" {
		c.Model = "dgxh100"
	}
	switch {
	case devnet.MarketOf(c.Model) == "":
		return fmt.Errorf("simnet: model %q, want one of %s", c.Model, strings.Join(gpu.SimModels(), ", "))
	case c.Nodes < 4 || c.Nodes > 2000:
		return fmt.Errorf("simnet: %d nodes, want 4..2000", c.Nodes)
	case c.Regions < 1 || c.Regions > 64 || c.Regions > c.Nodes:
		return fmt.Errorf("simnet: %d regions, want 1..64 and at most the nodes", c.Regions)
	case c.Intra < 0 || c.Inter < 0 || c.Inter > 40*time.Millisecond:
		return fmt.Errorf("simnet: latency intra %s inter %s, want inter 0..40ms", c.Intra, c.Inter)
	case c.ProviderShare <= 0 || c.ProviderShare >= 1:
		return fmt.Errorf("simnet: provider share %v, want in (0, 1)", c.ProviderShare)
	case c.Samples < 1:
		return fmt.Errorf("simnet: %d samples, want at least 1", c.Samples)
	case c.OfferTTL < 3*time.Second || c.OfferTTL > market.MaxOfferTTL:
		return fmt.Errorf("simnet: offer TTL %s, want 3s to %s", c.OfferTTL, market.MaxOfferTTL)
	case c.ConnHigh < 12:
		return fmt.Errorf("simnet: connection high watermark %d, want at least 12", c.ConnHigh)
	case c.Attack < 0 || c.Attack > 0.5:
		return fmt.Errorf("simnet: attack share %v, want 0..0.5", c.Attack)
	}
	if p := c.providers(); p < c.Regions || p >= c.Nodes-1 {
		return fmt.Errorf("simnet: %d providers of %d nodes: want at least one per region and two buyers", p, c.Nodes)
	}
	return nil
}

func (c *Config) providers() int { return int(float64(c.Nodes)*c.ProviderShare + 0.5) }

// scaled is a harness timeout d, stretched for networks above 300 nodes:
// one process on a few cores runs them all, so a bootstrap, a mesh or a
// publish takes longer in wall time as the nodes grow.
func (c *Config) scaled(d time.Duration) time.Duration {
	if c.Nodes <= 300 {
		return d
	}
	return d * time.Duration(c.Nodes) / 300
}

// RegionName is the name of region r (0-based).
func RegionName(r int) string {
	if r < len(DefaultRegions) {
		return DefaultRegions[r]
	}
	return fmt.Sprintf("CN-R%d", r+1)
}

// sim is one running simulation: the mocknet and its peers' regions.
type sim struct {
	cfg         Config
	market      string // the market of cfg.Model's GPUs
	log         *slog.Logger
	mn          mocknet.Mocknet
	region      map[peer.ID]int
	live        map[peer.ID]bool // hosts added and not removed
	all         []*cmHost        // every host added, for close
	mu          sync.Mutex
	stamps      *stampBudget // the hostile peers' stamps (attack.go)
	attackCores float64      // what the stamps were charged to (attack.go)
}

func newSim(cfg Config) *sim {
	mn := mocknet.New()
	// Links made later (LinkPeers) take these defaults; per-pair latency is
	// set on each link after it is made.
	mn.SetLinkDefaults(mocknet.LinkOptions{Latency: cfg.Inter})
	return &sim{cfg: cfg, market: devnet.MarketOf(cfg.Model), log: cfg.Logger, mn: mn, region: map[peer.ID]int{}, live: map[peer.ID]bool{}}
}

// latency is the one-way latency between two regions.
func (s *sim) latency(a, b int) time.Duration {
	if a == b {
		return s.cfg.Intra
	}
	return s.cfg.Inter
}

// rtt is the round trip between two peers' regions.
func (s *sim) rtt(a, b peer.ID) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return 2 * s.latency(s.region[a], s.region[b])
}

// addHosts adds n hosts with Ed25519 keys to the mocknet, host i in region
// i % Regions, and links each to every host already there with its pair's
// latency. net tells host sets apart in their addresses.
func (s *sim) addHosts(n int, net byte, keys []crypto.PrivKey) ([]host.Host, error) {
	hosts := make([]host.Host, n)
	for i := range n {
		var k crypto.PrivKey
		if keys != nil {
			k = keys[i]
		} else {
			var err error
			if k, _, err = crypto.GenerateEd25519Key(rand.Reader); err != nil {
				return nil, err
			}
		}
		h, err := s.addHost(k, i, net)
		if err != nil {
			return nil, err
		}
		hosts[i] = h
	}
	return hosts, nil
}

// addHost adds one host as index i of host set net and links it to every
// host in the mocknet.
func (s *sim) addHost(k crypto.PrivKey, i int, net byte) (host.Host, error) {
	r := i % s.cfg.Regions
	addr, err := ma.NewMultiaddr(fmt.Sprintf("/ip4/10.%d.%d.%d/tcp/4001", net, i/250, i%250+1))
	if err != nil {
		return nil, err
	}
	mh, err := s.mn.AddPeer(k, addr)
	if err != nil {
		return nil, fmt.Errorf("simnet: add host: %w", err)
	}
	h, err := withConnManager(mh, s.cfg.ConnHigh)
	if err != nil {
		mh.Close()
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.region[h.ID()] = r
	for other := range s.live {
		l, err := s.mn.LinkPeers(h.ID(), other)
		if err != nil {
			return nil, fmt.Errorf("simnet: link: %w", err)
		}
		l.SetOptions(mocknet.LinkOptions{Latency: s.latency(r, s.region[other])})
	}
	s.live[h.ID()] = true
	s.all = append(s.all, h)
	return h, nil
}

// DefaultConnHigh is Config.ConnHigh's default: a real node's high
// watermark (p2p.HostConfig's default, with its low of 64).
const DefaultConnHigh = 192

// cmHost is a mocknet host with a connection manager. Mocknet's hosts
// have none (every connection stays open until the run ends), so at
// scale each host would hold a connection, streams and DHT and gossipsub
// state for most of the network, where a real node trims back to its low
// watermark, keeping the peers that gossipsub's mesh and the DHT's near
// buckets protect.
type cmHost struct {
	host.Host
	cm   *connmgr.BasicConnMgr
	net  *connView
	once sync.Once
}

func withConnManager(h host.Host, high int) (*cmHost, error) {
	cm, err := connmgr.NewConnManager(high/3, high)
	if err != nil {
		return nil, fmt.Errorf("simnet: connection manager: %w", err)
	}
	h.Network().Notify(cm.Notifee())
	return &cmHost{Host: h, cm: cm, net: newConnView(h.Network())}, nil
}

// ConnManager is the host's connection manager.
func (h *cmHost) ConnManager() coreconnmgr.ConnManager { return h.cm }

// Network is the host's network, with connView's lock-free Connectedness.
func (h *cmHost) Network() corenet.Network { return h.net }

// Close closes the connection manager and the host.
func (h *cmHost) Close() error {
	h.once.Do(func() { h.cm.Close() })
	return h.Host.Close()
}

// close closes every host added and the mocknet.
func (s *sim) close() {
	s.mu.Lock()
	all := s.all
	s.all = nil
	s.mu.Unlock()
	for _, h := range all {
		h.once.Do(func() { h.cm.Close() })
	}
	s.mn.Close()
}

// removeHost closes a host and removes its links.
func (s *sim) removeHost(h host.Host) {
	s.mu.Lock()
	delete(s.live, h.ID())
	others := make([]peer.ID, 0, len(s.live))
	for p := range s.live {
		others = append(others, p)
	}
	s.mu.Unlock()
	h.Close()
	for _, other := range others {
		s.mn.UnlinkPeers(h.ID(), other)
	}
}

// Run builds the network, runs the floors and the measures, and returns the
// report. It stops everything it started before returning.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	start := time.Now()
	s := newSim(cfg)
	defer s.close()
	rep := &Report{Nodes: cfg.Nodes, Regions: cfg.Regions, Providers: cfg.providers(), Model: cfg.Model, Market: s.market,
		Intra: cfg.Intra.String(), Inter: cfg.Inter.String(), Samples: cfg.Samples}
	for r := range cfg.Regions {
		rep.RegionNames = append(rep.RegionNames, RegionName(r))
	}

	s.log.Info("floors: raw kad-dht, gossipsub and ping", "hosts", cfg.Nodes)
	// The floors run on a mocknet of their own, closed and dropped before
	// the nodes start: a mocknet never forgets a host it was given, so
	// on the nodes' mocknet the floors' closed hosts (their peerstores,
	// DHTs and gossipsub behind their handlers) would stay in memory
	// beside the nodes for the whole run.
	fs := newSim(cfg)
	fl, err := fs.runFloors(ctx)
	fs.close()
	fs = nil
	if err != nil {
		return nil, fmt.Errorf("simnet: floors: %w", err)
	}
	rep.Floors = fl
	runtime.GC()
	debug.FreeOSMemory()

	dir := cfg.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "suanli-simnet-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
	}
	s.log.Info("starting suanli nodes", "nodes", cfg.Nodes, "providers", cfg.providers())
	net, err := s.startNodes(ctx, dir)
	if net != nil {
		defer net.close()
	}
	if err != nil {
		return nil, err
	}
	rep.StartSeconds = time.Since(start).Seconds()
	if err := s.measure(ctx, net, rep); err != nil {
		return nil, err
	}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	rep.HeapPerNodeMiB = float64(ms.HeapInuse) / float64(cfg.Nodes) / (1 << 20)
	rep.SysPerNodeMiB = float64(ms.Sys) / float64(cfg.Nodes) / (1 << 20)
	rep.GoroutinesPerNode = float64(runtime.NumGoroutine()) / float64(cfg.Nodes)
	rep.StackPerNodeMiB = float64(ms.StackInuse) / float64(cfg.Nodes) / (1 << 20)
	conns := 0
	for _, h := range net.hosts {
		c := len(h.Network().Conns())
		conns += c
		rep.ConnsMax = max(rep.ConnsMax, c)
	}
	rep.ConnsPerNode = float64(conns) / float64(cfg.Nodes)
	if cfg.MemProfile != nil {
		cfg.MemProfile()
	}
	if cfg.Attack > 0 {
		if err := s.attack(ctx, net, rep); err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			rep.AttackError = err.Error()
		}
	}
	if cfg.Faults {
		// A fault run that fails still leaves the core measures to report.
		if err := s.faults(ctx, net, rep); err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			rep.FaultsError = err.Error()
		}
	}
	rep.Seconds = time.Since(start).Seconds()
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		rep.MaxRSSMiB = float64(ru.Maxrss) / 1024 // KiB on Linux
	}
	return rep, nil
}

// network is the running Suanli nodes.
type network struct {
	nodes     []*node.Node
	hosts     []host.Host
	keys      []crypto.PrivKey
	dirs      []string
	providers int
	opts      func(i int) []node.Option
	sim       *sim
}

func (n *network) close() {
	var wg sync.WaitGroup
	for i, nd := range n.nodes {
		if nd == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			nd.Close()
			n.hosts[i].Close()
		}()
	}
	wg.Wait()
}

func (s *sim) startNodes(ctx context.Context, dir string) (*network, error) {
	cfg := s.cfg
	net := &network{providers: cfg.providers(), sim: s}
	net.keys = make([]crypto.PrivKey, cfg.Nodes)
	for i := range net.keys {
		k, _, err := crypto.GenerateEd25519Key(rand.Reader)
		if err != nil {
			return nil, err
		}
		net.keys[i] = k
	}
	hosts, err := s.addHosts(cfg.Nodes, 1, net.keys)
	if err != nil {
		return nil, err
	}
	net.hosts = hosts
	net.nodes = make([]*node.Node, cfg.Nodes)
	// Bootstrap: the first node of each region (a provider).
	var boot []string
	for r := range cfg.Regions {
		for _, a := range hosts[r].Addrs() {
			boot = append(boot, a.String()+"/p2p/"+hosts[r].ID().String())
		}
	}
	nodeLog := slog.New(s.log.Handler()).With("sim", true)
	quiet := slog.New(levelHandler{slog.LevelError, nodeLog.Handler()})
	net.opts = func(i int) []node.Option {
		d := filepath.Join(dir, fmt.Sprintf("node-%03d", i))
		o := []node.Option{
			node.WithRepo(d), node.WithAutoInit(), node.WithHost(net.hosts[i]),
			node.WithAPI(""), node.WithLogger(quiet), node.WithOfferTTL(cfg.OfferTTL),
			node.WithBillingInterval(cfg.BillingInterval),
			node.WithRegion(RegionName(i % cfg.Regions)),
			node.WithSmallStore(), node.WithStampBits(StampBits),
		}
		var b []string
		for j, a := range boot {
			if j/len(hosts[0].Addrs()) != i {
				b = append(b, a)
			}
		}
		if len(b) > 0 {
			o = append(o, node.WithBootstrap(b...))
		}
		if i < net.providers {
			o = append(o, node.WithGPUSim(s.cfg.Model, int64(i+1)), node.WithPrice("2.49", "USD"))
		} else {
			o = append(o, node.WithoutGPU())
		}
		return o
	}
	net.dirs = make([]string, cfg.Nodes)
	// Start in parallel, a few at a time: Badger opens and key loads are
	// the slow part.
	var (
		wg   sync.WaitGroup
		sem  = make(chan struct{}, 8)
		mu   sync.Mutex
		errs []error
	)
	for i := range cfg.Nodes {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			nd, err := node.New(net.opts(i)...)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("node %d: %w", i, err))
				return
			}
			net.nodes[i] = nd
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return net, fmt.Errorf("simnet: %w", errors.Join(errs...))
	}
	// Every provider has published its offer.
	for i := range net.providers {
		if err := waitFor(ctx, cfg.scaled(3*time.Minute), func() bool { return net.nodes[i].Published() != nil }); err != nil {
			return net, fmt.Errorf("simnet: provider %d never published its offer: %w", i, err)
		}
	}
	// Offers published while the network was still forming went to the
	// peers closest to their keys then; republish once every node is up,
	// as a provider does at a third of its offer's life, so the measures
	// see the steady state, as the floor's providers (which provide after
	// the whole DHT is up) do.
	if err := parallel(net.providers, 8, func(i int) error {
		pctx, cancel := context.WithTimeout(ctx, cfg.scaled(time.Minute))
		defer cancel()
		return net.nodes[i].Publish(pctx)
	}); err != nil {
		return net, fmt.Errorf("simnet: republish: %w", err)
	}
	return net, nil
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, cond func() bool) error {
	return waitEvery(ctx, timeout, 5*time.Millisecond, cond)
}

func waitEvery(ctx context.Context, timeout, every time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(every)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// levelHandler drops records below a level.
type levelHandler struct {
	min slog.Level
	slog.Handler
}

func (h levelHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h levelHandler) WithAttrs(a []slog.Attr) slog.Handler {
	return levelHandler{h.min, h.Handler.WithAttrs(a)}
}

func (h levelHandler) WithGroup(g string) slog.Handler {
	return levelHandler{h.min, h.Handler.WithGroup(g)}
}

// Check reports whether the config (with its defaults) is one Run accepts.
func (c Config) Check() error { return c.defaults() }
