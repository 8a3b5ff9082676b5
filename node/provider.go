package node

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/event"

	"github.com/suanli/suanli/gpu"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// Default lease terms a provider offers until the order book sets them.
const (
	defaultMinLease         = time.Minute
	defaultMaxLease         = 30 * 24 * time.Hour
	defaultBillingIncrement = time.Minute
	telemetryInterval       = 5 * time.Second
)

// run is the node's background life: join the network, then (as a provider)
// publish the offer and keep republishing it before it expires, and sample
// GPU telemetry for the metrics.
func (n *Node) run() {
	n.bootstrap()
	if n.gpus == nil {
		return
	}
	n.spawn(n.sampleTelemetry)
	n.spawn(n.replenishLoop)
	// A publish that failed for want of peers is retried soon after a peer
	// is identified, not only when its backoff ends: the first offer of a
	// provider started long before its peers goes out when they come.
	peerUp := make(chan struct{}, 1)
	if sub, err := n.host.EventBus().Subscribe(new(event.EvtPeerIdentificationCompleted)); err == nil {
		defer sub.Close()
		// Drained at once: a subscriber that falls behind blocks the
		// host's identify, and the loop below is busy while it publishes.
		n.spawn(func() {
			for range sub.Out() {
				select {
				case peerUp <- struct{}{}:
				default:
				}
			}
		})
	}
	backoff := time.Second
	for {
		wait := n.offerTTL / 3
		ctx, cancel := context.WithTimeout(n.ctx, time.Minute)
		err := n.Publish(ctx)
		cancel()
		if err != nil {
			if n.ctx.Err() != nil {
				return
			}
			n.log.Warn("publishing offer failed; will retry", "err", err, "in", backoff)
			wait, backoff = backoff, min(backoff*2, 30*time.Second)
		} else {
			backoff = time.Second
		}
		failing := err != nil
		timer := time.NewTimer(wait)
		due := time.Now().Add(wait)
		for waiting := true; waiting; {
			select {
			case <-n.ctx.Done():
				timer.Stop()
				return
			case <-timer.C:
				waiting = false
			case <-n.republish: // a lease took or freed GPUs (capacity.go)
				waiting = false
			case <-peerUp:
				// A failing publish is retried within a second of a new
				// peer (a moment for the routing table to fill, so the
				// record does not land on the first peer only); once
				// published, a new peer changes nothing.
				if failing && time.Until(due) > time.Second {
					timer.Reset(time.Second)
					due, backoff = time.Now().Add(time.Second), time.Second
				}
			}
		}
		timer.Stop()
	}
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

func (n *Node) sampleTelemetry() {
	t := time.NewTicker(telemetryInterval)
	defer t.Stop()
	for {
		if tel, err := n.gpus.Telemetry(); err == nil {
			n.metrics.observe(tel)
			n.telHist.add(n.now(), tel)
		} else {
			n.log.Debug("telemetry failed", "err", err)
		}
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Publish builds a fresh offer from the GPU inventory with the next seq,
// seals it and publishes it to the DHT. The run loop calls it on a timer;
// integrators may call it after changing what they offer.
func (n *Node) Publish(ctx context.Context) error {
	if n.gpus == nil {
		return fmt.Errorf("%w: %v", api.ErrNoGPUs, n.noGPU)
	}
	n.publishMu.Lock()
	defer n.publishMu.Unlock()
	o, err := n.buildOffer()
	if err != nil {
		return err
	}
	env, err := p2p.SealOffer(n.key, o)
	if err != nil {
		return err
	}
	if err := n.store.PutOffer(n.host.ID(), env); err != nil {
		return err
	}
	var markets []string
	for _, g := range o.Gpus {
		if !slices.Contains(markets, g.Market) {
			markets = append(markets, g.Market)
		}
	}
	if err := n.dht.PublishOffer(ctx, env, markets); err != nil {
		return err
	}
	n.mu.Lock()
	first := n.published == nil
	n.published = o
	n.mu.Unlock()
	n.metrics.published.Inc()
	if first {
		// A provider replicates the books of the markets it serves, so it
		// can ask and can take the bids that cross its asks.
		for _, m := range markets {
			if err := n.JoinMarket(ctx, m); err != nil {
				n.log.Warn("joining market failed", "market", m, "err", err)
			}
		}
	}
	n.log.Info("offer published", "seq", o.Seq, "gpus", len(o.Gpus), "markets", markets,
		"price", n.price.String(), "expires", time.UnixMilli(o.ExpiresUnixMs).UTC().Format(time.RFC3339))
	return nil
}

func (n *Node) buildOffer() (*proto.Offer, error) {
	inv, err := n.gpus.Inventory()
	if err != nil {
		return nil, fmt.Errorf("node: inventory: %w", err)
	}
	now := n.now()
	// Seq never goes back, even if the store was lost: at least the clock.
	seq, err := n.store.NextOfferSeq(uint64(now.UnixMilli()))
	if err != nil {
		return nil, fmt.Errorf("node: offer seq: %w", err)
	}
	o := &proto.Offer{
		Provider:      []byte(n.host.ID()),
		Seq:           seq,
		CreatedUnixMs: now.UnixMilli(),
		ExpiresUnixMs: now.Add(n.offerTTL).UnixMilli(),
		Region:        n.region,
		Host: &proto.Host{
			Backend:           inv.Backend,
			DriverVersion:     inv.DriverVersion,
			CudaDriverVersion: inv.CUDADriverVersion,
			NvmlVersion:       inv.NVMLVersion,
			CpuCores:          uint32(runtime.NumCPU()),
		},
		Pricing: &proto.Pricing{
			Currency:        n.price.Currency,
			OnDemandMicros:  n.price.Micros,
			SpotFloorMicros: n.price.Micros / 2,
			Schedule:        n.schedule, UtcOffsetMinutes: n.scheduleOffset,
			Reserved: []*proto.Discount{
				{MinDurationS: int64(7 * 24 * time.Hour / time.Second), BasisPoints: 1000},
				{MinDurationS: int64(30 * 24 * time.Hour / time.Second), BasisPoints: 2000},
			},
		},
		Terms: &proto.LeaseTerms{
			MinDurationS:      int64(defaultMinLease / time.Second),
			MaxDurationS:      int64(defaultMaxLease / time.Second),
			BillingIncrementS: int64(n.billingInterval / time.Second), // what the leases it signs bill at
			ChargeIncrementS:  int64(n.chargeIncrement / time.Second),
		},
		Attestation: proto.AttestationLevel_ATTESTATION_LEVEL_SELF_REPORTED,
		Addrs:       n.Addrs(),
	}
	if n.isolation != nil {
		o.Isolation = isolationProto(n.isolation.Level)
	}
	per := n.resourcesPerGPU()
	o.Host.MilliCpusPerGpu, o.Host.MemoryBytesPerGpu, o.Host.DiskBytesPerGpu = uint64(per.milliCPUs), per.ram, per.disk
	o.Host.MemoryBytes = hostMemory()
	for _, d := range inv.Devices {
		o.Gpus = append(o.Gpus, &proto.GPU{
			Uuid: d.UUID, Name: d.Name, Market: d.Market, MemoryBytes: d.MemoryBytes,
			PciBusId: d.PCIBusID, ComputeCapability: d.ComputeCapability, Architecture: d.Architecture,
			Serial: d.Serial, PowerLimitMw: d.PowerLimitMilliwatts, Ecc: d.ECC, MigEnabled: d.MIGEnabled,
		})
	}
	if err := n.markLeased(o.Gpus, now); err != nil {
		return nil, err
	}
	if inv.ConfidentialComputing {
		if err := n.attachEvidence(o); err != nil {
			n.log.Warn("confidential computing is on but evidence could not be attached; offering as self-reported", "err", err)
		}
	}
	return o, nil
}

// attachEvidence asks every GPU for evidence over the offer's own nonce and
// carries it with the certificates deduplicated. If the offer would outgrow
// its size limit, the evidence stays out (buyers challenge instead).
func (n *Node) attachEvidence(o *proto.Offer) error {
	nonce := proto.EvidenceNonce(o.Provider, o.Seq)
	evs, err := n.gpus.Attest(nonce)
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
