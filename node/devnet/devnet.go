// Package devnet runs a whole local Suanli market in one process: providers
// on simulated DGX machines and buyers, each a real node with its own repo,
// libp2p host on 127.0.0.1, DHT and Badger store.
package devnet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
)

// Machine is one simulated provider's hardware, region and price.
type Machine struct {
	Model    string // gpu.SimModels name, e.g. dgxh100
	Region   string
	Price    string // decimal per GPU-hour
	Currency string
}

// Machines is the mix providers are drawn from, round robin: four models in
// cheap "west" (CN-NM) and low-latency "east" (CN-SH, CN-GZ) regions and
// abroad, priced near 2026 rental rates per GPU-hour.
var Machines = []Machine{
	{"dgxh100", "CN-GZ", "2.49", "USD"},
	{"dgxa100", "CN-NM", "1.39", "USD"},
	{"dgxh200", "US-CA", "3.89", "USD"},
	{"dgxb200", "CN-SH", "5.99", "USD"},
	{"dgxh100", "CN-NM", "2.39", "USD"},
	{"dgxh200", "CN-SH", "4.19", "USD"},
	{"dgxa100", "US-CA", "1.49", "USD"},
	{"dgxh100", "US-CA", "2.69", "USD"},
}

// Config sizes a devnet.
type Config struct {
	Providers int
	Buyers    int
	// Dir holds the nodes' repos; empty means a new temporary directory,
	// removed on Close.
	Dir string
	// OfferTTL of the providers' offers; default 10 minutes.
	OfferTTL time.Duration
	// BillingInterval of the leases providers sign; default 1 s, so a
	// devnet lease produces receipts within seconds.
	BillingInterval time.Duration
	// Logger for the nodes; default discards everything below Warn.
	Logger *slog.Logger
	// NodeOptions are added to every node's options.
	NodeOptions []node.Option
	// Slurm, when set, makes the first provider sell this Slurm
	// cluster's GPUs (leases run as its jobs) instead of a simulated
	// machine.
	Slurm *node.SlurmConfig
}

// Net is a running devnet.
type Net struct {
	Providers []*node.Node
	Buyers    []*node.Node
	// Machines[i] is what Providers[i] simulates.
	Machines []Machine
	dir      string
	ownDir   bool
}

// Start starts the providers, then the buyers. The first provider is the
// bootstrap peer of every other node.
// StampBits is the work of a devnet node's maker stamp: 256 hashes, not a
// real daemon's 2^24 at every start of a fresh devnet.
const StampBits = 8

func Start(ctx context.Context, cfg Config) (_ *Net, err error) {
	if cfg.Providers < 1 {
		return nil, errors.New("devnet: at least one provider")
	}
	if cfg.Buyers < 0 {
		return nil, errors.New("devnet: negative buyers")
	}
	net := &Net{dir: cfg.Dir}
	if net.dir == "" {
		if net.dir, err = os.MkdirTemp("", "suanli-devnet-"); err != nil {
			return nil, err
		}
		net.ownDir = true
	}
	defer func() {
		if err != nil {
			net.Close()
		}
	}()
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	ttl := cfg.OfferTTL
	if ttl == 0 {
		ttl = 10 * time.Minute
	}
	billing := cfg.BillingInterval
	if billing == 0 {
		billing = time.Second
	}
	base := func(name string) []node.Option {
		return append([]node.Option{
			node.WithRepo(filepath.Join(net.dir, name)), node.WithAutoInit(),
			node.WithListen("/ip4/127.0.0.1/tcp/0"), node.WithAPI("127.0.0.1:0"),
			node.WithLogger(log), node.WithOfferTTL(ttl), node.WithBillingInterval(billing),
			node.WithStampBits(StampBits),
		}, cfg.NodeOptions...)
	}
	var boot []string
	for i := range cfg.Providers {
		m := Machines[i%len(Machines)]
		gpus := node.WithGPUSim(m.Model, int64(i+1))
		if i == 0 && cfg.Slurm != nil {
			gpus = node.WithSlurm(*cfg.Slurm)
		}
		opts := append(base(fmt.Sprintf("provider-%02d", i)), gpus, node.WithRegion(m.Region), node.WithPrice(m.Price, m.Currency))
		if i == 0 && cfg.Slurm != nil {
			opts = append(opts, node.WithExecutors(node.ExecReserve, node.ExecSlurm))
		}
		if boot != nil {
			opts = append(opts, node.WithBootstrap(boot...))
		}
		n, err := node.New(opts...)
		if err != nil {
			return nil, fmt.Errorf("devnet: provider %d: %w", i, err)
		}
		net.Providers = append(net.Providers, n)
		net.Machines = append(net.Machines, m)
		if boot == nil {
			boot = n.Addrs()
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, cfg.Buyers)
	buyers := make([]*node.Node, cfg.Buyers)
	for i := range cfg.Buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			opts := append(base(fmt.Sprintf("buyer-%02d", i)), node.WithoutGPU(), node.WithBootstrap(boot...))
			n, err := node.New(opts...)
			mu.Lock()
			defer mu.Unlock()
			buyers[i], errs[i] = n, err
		}()
	}
	wg.Wait()
	for i, n := range buyers {
		if n != nil {
			net.Buyers = append(net.Buyers, n)
		}
		if errs[i] != nil {
			return nil, fmt.Errorf("devnet: buyer %d: %w", i, errs[i])
		}
	}
	return net, nil
}

// Nodes are all nodes, providers first.
func (n *Net) Nodes() []*node.Node {
	return append(append([]*node.Node{}, n.Providers...), n.Buyers...)
}

// WaitPublished waits until every provider has published its offer.
func (n *Net) WaitPublished(ctx context.Context) error {
	for {
		done := 0
		for _, p := range n.Providers {
			if p.Published() != nil {
				done++
			}
		}
		if done == len(n.Providers) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("devnet: %d of %d providers published: %w", done, len(n.Providers), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// WaitFound polls buyer b's search for q until it returns want offers.
func WaitFound(ctx context.Context, b api.API, q api.OfferQuery, want int) ([]api.OfferView, error) {
	var last []api.OfferView
	var lastErr error
	for {
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		last, lastErr = b.Offers(qctx, q)
		cancel()
		if lastErr == nil && len(last) >= want {
			return last, nil
		}
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("devnet: found %d of %d offers (last error: %v): %w", len(last), want, lastErr, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Close stops every node and removes a temporary directory.
func (n *Net) Close() error {
	var wg sync.WaitGroup
	errs := make([]error, 0)
	var mu sync.Mutex
	for _, nd := range n.Nodes() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := nd.Close(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if n.ownDir {
		os.RemoveAll(n.dir)
	}
	return errors.Join(errs...)
}
