package simnet

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/ipfs/go-cid"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"
	mh "github.com/multiformats/go-multihash"
)

// Floors are what raw libp2p does on the same mocknet with the same number
// of hosts, regions and providers as the Suanli nodes.
type Floors struct {
	// FindProviders: a raw kad-dht node finds every provider of one key
	// (FindProvidersAsync drained to its end), from a random non-provider.
	FindProviders Stats `json:"find_providers"`
	// FoundAll counts the lookups that found every provider.
	FoundAll int `json:"found_all"`
	// Gossip: a message published on a raw gossipsub topic whose validator
	// does one Ed25519 verify, until every subscriber has it.
	Gossip Stats `json:"gossip"`
	// RTT per link class, measured with libp2p ping.
	RTTIntra Stats `json:"rtt_intra"`
	RTTInter Stats `json:"rtt_inter"`
}

const floorTopic = "/simnet/floor/1"

// runFloors measures the floors on hosts it adds to s's mocknet; it
// closes its DHTs and gossipsub, the caller the mocknet.
func (s *sim) runFloors(ctx context.Context) (Floors, error) {
	cfg := s.cfg
	var fl Floors
	// The hosts stay on s's mocknet, which the caller closes.
	hosts, err := s.addHosts(cfg.Nodes, 2, nil)
	if err != nil {
		return fl, err
	}
	dhts := make([]*dht.IpfsDHT, len(hosts))
	for i, h := range hosts {
		var boot []peer.AddrInfo
		for r := range cfg.Regions {
			if r != i {
				boot = append(boot, peer.AddrInfo{ID: hosts[r].ID(), Addrs: hosts[r].Addrs()})
			}
		}
		d, err := dht.New(h, dht.Mode(dht.ModeServer), dht.ProtocolPrefix("/simnet-floor"), dht.BootstrapPeers(boot...))
		if err != nil {
			return fl, err
		}
		dhts[i] = d
		defer d.Close()
	}
	// Join like the Suanli nodes do: dial the bootstrap peers, refresh.
	if err := parallel(len(hosts), 8, func(i int) error {
		for r := range cfg.Regions {
			if r != i {
				if err := hosts[i].Connect(ctx, peer.AddrInfo{ID: hosts[r].ID(), Addrs: hosts[r].Addrs()}); err != nil {
					return err
				}
			}
		}
		return dhts[i].Bootstrap(ctx)
	}); err != nil {
		return fl, fmt.Errorf("dht bootstrap: %w", err)
	}
	if err := parallel(len(hosts), 16, func(i int) error {
		select {
		case <-dhts[i].ForceRefresh():
			// A refresh that could not fill every bucket still leaves
			// the table as full as the network allows.
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}); err != nil {
		return fl, fmt.Errorf("dht refresh: %w", err)
	}

	s.log.Info("floors: DHT refreshed; ping")
	// RTT per link class.
	pinger := make([]*ping.PingService, len(hosts))
	for i, h := range hosts {
		pinger[i] = ping.NewPingService(h)
	}
	rng := mrand.New(mrand.NewPCG(1, 2))
	var intra, inter []time.Duration
	failed := 0
	for len(intra) < cfg.Samples || (cfg.Regions > 1 && len(inter) < cfg.Samples) {
		a, b := rng.IntN(len(hosts)), rng.IntN(len(hosts))
		if a == b {
			continue
		}
		same := a%cfg.Regions == b%cfg.Regions
		if (same && len(intra) >= cfg.Samples) || (!same && len(inter) >= cfg.Samples) {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		res := <-pinger[a].Ping(pctx, hosts[b].ID())
		if res.Error == nil {
			// The first ping on a new connection includes the stream
			// setup; ping again on the open connection.
			res = <-pinger[a].Ping(pctx, hosts[b].ID())
		}
		cancel()
		if res.Error != nil {
			// A ping that timed out on a starved machine (hundreds of
			// hosts on two cores) is tried again on another pair; a
			// network where pings keep failing is an error.
			if failed++; failed > cfg.Samples {
				return fl, fmt.Errorf("ping: %d failed, the last: %w", failed, res.Error)
			}
			s.log.Warn("floors: ping failed; another pair", "err", res.Error)
			continue
		}
		if same {
			intra = append(intra, res.RTT)
		} else {
			inter = append(inter, res.RTT)
		}
	}
	fl.RTTIntra, fl.RTTInter = statsOf(intra), statsOf(inter)

	// Raw kad-dht: the same share of providers provide one key.
	key, err := floorKey()
	if err != nil {
		return fl, err
	}
	providers := cfg.providers()
	s.log.Info("floors: provide and find providers", "providers", providers)
	if err := parallel(providers, 8, func(i int) error {
		pctx, cancel := context.WithTimeout(ctx, cfg.scaled(time.Minute))
		defer cancel()
		return dhts[i].Provide(pctx, key, true)
	}); err != nil {
		return fl, fmt.Errorf("provide: %w", err)
	}
	var finds []time.Duration
	for k := range cfg.Samples {
		i := providers + rng.IntN(len(hosts)-providers)
		_ = k
		fctx, cancel := context.WithTimeout(ctx, cfg.scaled(time.Minute))
		t0 := time.Now()
		n := 0
		for range dhts[i].FindProvidersAsync(fctx, key, 0) {
			n++
		}
		finds = append(finds, time.Since(t0))
		cancel()
		if n >= providers {
			fl.FoundAll++
		}
	}
	fl.FindProviders = statsOf(finds)

	// Raw gossipsub with one Ed25519 verify per message.
	s.log.Info("floors: gossipsub")
	g, err := s.gossipFloor(ctx, hosts, rng)
	if err != nil {
		return fl, err
	}
	fl.Gossip = g
	return fl, nil
}

func floorKey() (cid.Cid, error) {
	h, err := mh.Sum([]byte("simnet floor key"), mh.SHA2_256, -1)
	if err != nil {
		return cid.Undef, err
	}
	return cid.NewCidV1(cid.Raw, h), nil
}

// gossipFloor publishes Samples messages from random hosts and measures
// until every subscriber has each.
func (s *sim) gossipFloor(ctx context.Context, hosts []host.Host, rng *mrand.Rand) (Stats, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type arrival struct {
		mu   sync.Mutex
		seen map[string]int
		done map[string]chan struct{}
	}
	arr := &arrival{seen: map[string]int{}, done: map[string]chan struct{}{}}
	topics := make([]*pubsub.Topic, len(hosts))
	for i, h := range hosts {
		ps, err := pubsub.NewGossipSub(ctx, h)
		if err != nil {
			return Stats{}, err
		}
		if err := ps.RegisterTopicValidator(floorTopic, func(_ context.Context, _ peer.ID, m *pubsub.Message) bool {
			d := m.Data
			if len(d) != ed25519.PublicKeySize+ed25519.SignatureSize+16 {
				return false
			}
			pub, sig, body := d[:32], d[32:96], d[96:]
			return ed25519.Verify(pub, body, sig)
		}); err != nil {
			return Stats{}, err
		}
		t, err := ps.Join(floorTopic)
		if err != nil {
			return Stats{}, err
		}
		sub, err := t.Subscribe()
		if err != nil {
			return Stats{}, err
		}
		topics[i] = t
		go func() {
			for {
				m, err := sub.Next(ctx)
				if err != nil {
					return
				}
				id := string(m.Data[96:])
				arr.mu.Lock()
				arr.seen[id]++
				if arr.seen[id] == len(hosts) {
					if c, ok := arr.done[id]; ok {
						close(c)
					}
				}
				arr.mu.Unlock()
			}
		}()
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return Stats{}, err
	}
	publish := func(i int, wait time.Duration) (time.Duration, error) {
		body := make([]byte, 16)
		rand.Read(body)
		msg := append(append(append([]byte{}, pub...), ed25519.Sign(priv, body)...), body...)
		done := make(chan struct{})
		arr.mu.Lock()
		arr.done[string(body)] = done
		arr.mu.Unlock()
		t0 := time.Now()
		if err := topics[i].Publish(ctx, msg); err != nil {
			return 0, err
		}
		select {
		case <-done:
			return time.Since(t0), nil
		case <-time.After(wait):
			return 0, errors.New("gossip floor: a message did not reach every subscriber")
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	// Warm up until the mesh carries a message to everyone.
	if err := waitEvery(ctx, s.cfg.scaled(2*time.Minute), 10*time.Millisecond, func() bool {
		_, err := publish(rng.IntN(len(hosts)), s.cfg.scaled(3*time.Second))
		return err == nil
	}); err != nil {
		return Stats{}, fmt.Errorf("gossip floor mesh never formed: %w", err)
	}
	var ds []time.Duration
	for range s.cfg.Samples {
		d, err := publish(rng.IntN(len(hosts)), s.cfg.scaled(30*time.Second))
		if err != nil {
			return Stats{}, err
		}
		ds = append(ds, d)
	}
	return statsOf(ds), nil
}

// parallel runs f(0..n-1), at most conc at a time, and joins the errors.
func parallel(n, conc int, f func(i int) error) error {
	var (
		wg   sync.WaitGroup
		sem  = make(chan struct{}, conc)
		mu   sync.Mutex
		errs []error
	)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := f(i); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
