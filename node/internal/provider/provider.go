package provider

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/suanli/suanli/gpu"
	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/internal/store"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// Default lease terms a provider offers until the order book sets them,
// and how often it samples its GPUs' telemetry.
const (
	DefaultMinLease   = time.Minute
	DefaultMaxLease   = 30 * 24 * time.Hour
	TelemetryInterval = 5 * time.Second
)

// Store is what the provider keeps in the node's store: its offer and
// its seq, the GPU holds and calendar blocks, and the terms of the leases
// holding GPUs. *store.Store implements it.
type Store interface {
	NextOfferSeq(atLeast uint64) (uint64, error)
	PutOffer(p peer.ID, env []byte) error
	GPUHolds(now time.Time) (map[string]store.Hold, error)
	GetLease(id string) (*proto.Lease, error)
	BusyBetween(from, end time.Time) (map[string]bool, error)
	ReservedGPUs(now time.Time) (map[string]bool, error)
}

// DHT publishes a sealed offer under the markets it serves. *p2p.DHT
// implements it.
type DHT interface {
	PublishOffer(ctx context.Context, env []byte, markets []string) error
}

// Resources is what the offer says each GPU is sold with, and the host's
// memory.
type Resources struct {
	MilliCPUsPerGPU, MemoryPerGPU, DiskPerGPU uint64
	HostMemory                                uint64
}

// Hooks is what the provider needs from the rest of the node. Each is
// called without any of the provider's locks held.
type Hooks struct {
	// Addrs are the node's full listen multiaddrs, carried in the offer.
	Addrs func() []string
	// Isolation is what the node's executors enforce, in the offer's
	// form (unspecified when unknown).
	Isolation func() proto.IsolationLevel
	// Resources is what each GPU is sold with.
	Resources func() Resources
	// JoinMarket replicates the book of a market the first offer serves,
	// so the provider can ask and take bids there.
	JoinMarket func(ctx context.Context, mkt string) error
	// Republished is told of an offer published after the first, at
	// most once per half its TTL, and the markets it serves: the node
	// brings the books' copies of its offer up to date
	// (exchange.Books.Refresh).
	Republished func(ctx context.Context, markets []string)
}

// Clock is the provider's time: Now for offer times and deadlines, After
// for the waits of its loops. SystemClock is the real one.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

// SystemClock is a Clock reading now (time.Now when nil) and waiting on
// real timers.
type SystemClock func() time.Time

// Now implements Clock.
func (c SystemClock) Now() time.Time {
	if c == nil {
		return time.Now()
	}
	return c()
}

// After implements Clock.
func (SystemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Config is a Provider's dependencies and settings.
type Config struct {
	Self  peer.ID
	Key   crypto.PrivKey // seals the offers
	GPUs  gpu.Backend    // nil: a buyer, that publishes nothing
	NoGPU error          // why GPUs is nil
	Store Store
	DHT   DHT
	Clock Clock // nil: SystemClock(nil)
	Log   *slog.Logger
	// Published counts the offers published (optional).
	Published prometheus.Counter
	// Telemetry is given each telemetry sample (optional).
	Telemetry func(at time.Time, tel []gpu.Telemetry)

	OfferTTL        time.Duration
	Region          string
	Price           market.Money
	Schedule        []*proto.PriceWindow // time-of-day prices
	ScheduleOffset  int32
	BillingInterval time.Duration // what the leases it signs bill at
	ChargeIncrement time.Duration // the unit leases charge GPU time in
	Hooks           Hooks
}

// Provider publishes this node's offer and keeps it fresh. Its methods
// are safe for concurrent use.
type Provider struct {
	cfg Config

	publishMu sync.Mutex    // one Publish at a time; taken before mu
	republish chan struct{} // capacity changed: publish now

	mu        sync.Mutex   // a leaf
	published *proto.Offer // last offer successfully published
	refreshed time.Time    // when Hooks.Republished was last called
}

// New makes the provider side of a node; Run starts publishing.
func New(cfg Config) *Provider {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock(nil)
	}
	return &Provider{cfg: cfg, republish: make(chan struct{}, 1)}
}

// Published is the last offer published, or nil.
func (p *Provider) Published() *proto.Offer {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.published
}

// Run publishes the offer and republishes it at a third of its TTL, when
// capacity changes, and, after a failure, with a backoff that a new peer
// (a value on peerUp) cuts short. It returns when ctx ends.
func (p *Provider) Run(ctx context.Context, peerUp <-chan struct{}) {
	backoff := time.Second
	for {
		wait := p.cfg.OfferTTL / 3
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := p.Publish(pctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			p.cfg.Log.Warn("publishing offer failed; will retry", "err", err, "in", backoff)
			wait, backoff = backoff, min(backoff*2, 30*time.Second)
		} else {
			backoff = time.Second
		}
		failing := err != nil
		fire := p.cfg.Clock.After(wait)
		due := p.cfg.Clock.Now().Add(wait)
		for waiting := true; waiting; {
			select {
			case <-ctx.Done():
				return
			case <-fire:
				waiting = false
			case <-p.republish: // a lease took or freed GPUs (capacity.go)
				waiting = false
			case <-peerUp:
				// A failing publish is retried within a second of a new
				// peer (a moment for the routing table to fill, so the
				// record does not land on the first peer only); once
				// published, a new peer changes nothing.
				if now := p.cfg.Clock.Now(); failing && due.Sub(now) > time.Second {
					fire = p.cfg.Clock.After(time.Second)
					due, backoff = now.Add(time.Second), time.Second
				}
			}
		}
	}
}

// SampleTelemetry reads the GPUs' telemetry every TelemetryInterval and
// hands it to Config.Telemetry, until ctx ends.
func (p *Provider) SampleTelemetry(ctx context.Context) {
	for {
		if tel, err := p.cfg.GPUs.Telemetry(); err == nil {
			if p.cfg.Telemetry != nil {
				p.cfg.Telemetry(p.cfg.Clock.Now(), tel)
			}
		} else {
			p.cfg.Log.Debug("telemetry failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-p.cfg.Clock.After(TelemetryInterval):
		}
	}
}

// Publish builds a fresh offer from the GPU inventory with the next seq,
// seals it and publishes it to the DHT. The first offer published joins
// the markets it serves.
func (p *Provider) Publish(ctx context.Context) error {
	if p.cfg.GPUs == nil {
		return fmt.Errorf("%w: %v", api.ErrNoGPUs, p.cfg.NoGPU)
	}
	p.publishMu.Lock()
	defer p.publishMu.Unlock()
	o, err := p.buildOffer(ctx)
	if err != nil {
		return err
	}
	env, err := p2p.SealOffer(p.cfg.Key, o)
	if err != nil {
		return err
	}
	if err := p.cfg.Store.PutOffer(p.cfg.Self, env); err != nil {
		return err
	}
	var markets []string
	for _, g := range o.Gpus {
		if !slices.Contains(markets, g.Market) {
			markets = append(markets, g.Market)
		}
	}
	if err := p.cfg.DHT.PublishOffer(ctx, env, markets); err != nil {
		return err
	}
	p.mu.Lock()
	first := p.published == nil
	p.published = o
	// The books' copies of the offer are refreshed once half a TTL has
	// passed: each refresh costs every replica a pull of the offer, and
	// a copy refreshed at every other republish (at a third of the TTL)
	// still has a third of its life left when the next comes.
	now := p.cfg.Clock.Now()
	refresh := !first && now.Sub(p.refreshed) >= p.cfg.OfferTTL/2
	if first || refresh {
		p.refreshed = now
	}
	p.mu.Unlock()
	if p.cfg.Published != nil {
		p.cfg.Published.Inc()
	}
	if first && p.cfg.Hooks.JoinMarket != nil {
		// A provider replicates the books of the markets it serves, so it
		// can ask and can take the bids that cross its asks.
		for _, m := range markets {
			if err := p.cfg.Hooks.JoinMarket(ctx, m); err != nil {
				p.cfg.Log.Warn("joining market failed", "market", m, "err", err)
			}
		}
	}
	if refresh && p.cfg.Hooks.Republished != nil {
		p.cfg.Hooks.Republished(ctx, markets)
	}
	p.cfg.Log.Info("offer published", "seq", o.Seq, "gpus", len(o.Gpus), "markets", markets,
		"price", p.cfg.Price.String(), "expires", time.UnixMilli(o.ExpiresUnixMs).UTC().Format(time.RFC3339))
	return nil
}

func (p *Provider) buildOffer(ctx context.Context) (*proto.Offer, error) {
	inv, err := p.cfg.GPUs.Inventory()
	if err != nil {
		return nil, fmt.Errorf("node: inventory: %w", err)
	}
	now := p.cfg.Clock.Now()
	// Seq never goes back, even if the store was lost: at least the clock.
	seq, err := p.cfg.Store.NextOfferSeq(uint64(now.UnixMilli()))
	if err != nil {
		return nil, fmt.Errorf("node: offer seq: %w", err)
	}
	o := &proto.Offer{
		Provider:      []byte(p.cfg.Self),
		Seq:           seq,
		CreatedUnixMs: now.UnixMilli(),
		ExpiresUnixMs: now.Add(p.cfg.OfferTTL).UnixMilli(),
		Region:        p.cfg.Region,
		Host: &proto.Host{
			Backend:           inv.Backend,
			DriverVersion:     inv.DriverVersion,
			CudaDriverVersion: inv.CUDADriverVersion,
			NvmlVersion:       inv.NVMLVersion,
			CpuCores:          uint32(runtime.NumCPU()),
		},
		Pricing: &proto.Pricing{
			Currency:        p.cfg.Price.Currency,
			OnDemandMicros:  p.cfg.Price.Micros,
			SpotFloorMicros: p.cfg.Price.Micros / 2,
			Schedule:        p.cfg.Schedule, UtcOffsetMinutes: p.cfg.ScheduleOffset,
			Reserved: []*proto.Discount{
				{MinDurationS: int64(7 * 24 * time.Hour / time.Second), BasisPoints: 1000},
				{MinDurationS: int64(30 * 24 * time.Hour / time.Second), BasisPoints: 2000},
			},
		},
		Terms: &proto.LeaseTerms{
			MinDurationS:      int64(DefaultMinLease / time.Second),
			MaxDurationS:      int64(DefaultMaxLease / time.Second),
			BillingIncrementS: int64(p.cfg.BillingInterval / time.Second), // what the leases it signs bill at
			ChargeIncrementS:  int64(p.cfg.ChargeIncrement / time.Second),
		},
		Attestation: proto.AttestationLevel_ATTESTATION_LEVEL_SELF_REPORTED,
	}
	h := p.cfg.Hooks
	if h.Addrs != nil {
		o.Addrs = h.Addrs()
	}
	if h.Isolation != nil {
		o.Isolation = h.Isolation()
	}
	if h.Resources != nil {
		r := h.Resources()
		o.Host.MilliCpusPerGpu, o.Host.MemoryBytesPerGpu, o.Host.DiskBytesPerGpu = r.MilliCPUsPerGPU, r.MemoryPerGPU, r.DiskPerGPU
		o.Host.MemoryBytes = r.HostMemory
	}
	for _, d := range inv.Devices {
		o.Gpus = append(o.Gpus, &proto.GPU{
			Uuid: d.UUID, Name: d.Name, Market: d.Market, MemoryBytes: d.MemoryBytes,
			PciBusId: d.PCIBusID, ComputeCapability: d.ComputeCapability, Architecture: d.Architecture,
			Serial: d.Serial, PowerLimitMw: d.PowerLimitMilliwatts, Ecc: d.ECC, MigEnabled: d.MIGEnabled,
		})
	}
	if sb, ok := p.cfg.GPUs.(*gpu.SlurmBackend); ok {
		// A cluster's scheduler places the leases: the offer says so,
		// with each GPU's node and how many nodes one lease may span.
		f, err := sb.Facts(ctx)
		if err != nil {
			return nil, fmt.Errorf("node: slurm facts: %w", err)
		}
		o.Scheduler, o.MaxNodes, o.Host.SchedulerVersion = f.Scheduler, uint32(max(f.MaxNodes, 1)), f.Version
		for _, g := range o.Gpus {
			g.Node = gpu.SlurmNodeOf(g.Uuid)
		}
	}
	if err := p.MarkLeased(o.Gpus, now); err != nil {
		return nil, err
	}
	if inv.ConfidentialComputing {
		if err := p.attachEvidence(o); err != nil {
			p.cfg.Log.Warn("confidential computing is on but evidence could not be attached; offering as self-reported", "err", err)
		}
	}
	return o, nil
}

// attachEvidence asks every GPU for evidence over the offer's own nonce and
// carries it with the certificates deduplicated. If the offer would outgrow
// its size limit, the evidence stays out (buyers challenge instead).
func (p *Provider) attachEvidence(o *proto.Offer) error {
	nonce := proto.EvidenceNonce(o.Provider, o.Seq)
	evs, err := p.cfg.GPUs.Attest(nonce)
	if err != nil {
		return err
	}
	byUUID := map[string]gpu.Evidence{}
	for _, e := range evs {
		byUUID[e.UUID] = e
	}
	certIndex := map[string]uint32{}
	var certs [][]byte
	gpus := make([]*proto.Evidence, len(o.Gpus))
	size := 0
	for i, g := range o.Gpus {
		e, ok := byUUID[g.Uuid]
		if !ok {
			return fmt.Errorf("no evidence for GPU %s", g.Uuid)
		}
		ev := &proto.Evidence{Report: e.Report}
		size += len(e.Report)
		rest := e.CertChain
		for {
			var blk *pem.Block
			blk, rest = pem.Decode(rest)
			if blk == nil {
				break
			}
			if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
				return fmt.Errorf("GPU %s certificate: %w", g.Uuid, err)
			}
			idx, ok := certIndex[string(blk.Bytes)]
			if !ok {
				idx = uint32(len(certs))
				certIndex[string(blk.Bytes)] = idx
				certs = append(certs, blk.Bytes)
				size += len(blk.Bytes)
			}
			ev.Chain = append(ev.Chain, idx)
		}
		if len(ev.Chain) == 0 {
			return fmt.Errorf("GPU %s: empty certificate chain", g.Uuid)
		}
		gpus[i] = ev
	}
	if size > 56<<10 {
		return fmt.Errorf("evidence is %d bytes, too large for an offer record", size)
	}
	for i, g := range o.Gpus {
		g.Evidence = gpus[i]
	}
	o.Certs, o.EvidenceNonce = certs, nonce
	o.Attestation = proto.AttestationLevel_ATTESTATION_LEVEL_CC_EVIDENCE
	return nil
}

var errNoOffer = errors.New("no published offer")
