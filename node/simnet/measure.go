package simnet

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
)

// Names of the measures in a Report.
const (
	MeasureDiscoveryCold = "discovery (cold node)"
	MeasureDiscoveryWarm = "discovery (warm node)"
	MeasurePropagation   = "order propagation"
	MeasureCrossing      = "crossing -> agreed trade (RTT)"
	MeasureLeaseRunning  = "trade -> lease running"
	MeasureFirstReceipt  = "trade -> first countersigned receipt"
)

// pollEvery is how often replicas are polled; it bounds the resolution of
// the measures taken by polling.
const pollEvery = time.Millisecond

func (s *sim) measure(ctx context.Context, net *network, rep *Report) error {
	cfg := s.cfg
	rng := mrand.New(mrand.NewPCG(3, 4))
	fl := rep.Floors
	buyers := net.nodes[net.providers:]

	// Discovery: distinct buyers, each cold then warm.
	s.log.Info("measure: discovery")
	var cold, warm []time.Duration
	incomplete := 0
	order := rng.Perm(len(buyers))
	for k := range min(cfg.Samples, len(buyers)) {
		b := buyers[order[k]]
		for pass := range 2 {
			d, err := discover(ctx, s.market, b, net.providers)
			if err != nil {
				if ctx.Err() != nil {
					return err
				}
				s.log.Warn("discovery incomplete", "err", err)
				incomplete++
				continue
			}
			if pass == 0 {
				cold = append(cold, d)
			} else {
				warm = append(warm, d)
			}
		}
	}
	note := "until Offers lists every provider's offer"
	if incomplete > 0 {
		note += fmt.Sprintf("; %d lookups never listed them all within %s and are left out", incomplete, discoverWait)
	}
	rep.add(Measure{Name: MeasureDiscoveryCold, Stats: statsOf(cold), FloorName: "kad-dht FindProviders", Floor: fl.FindProviders.P95, Compare: "p95", Goal: 3, Note: note}, false)
	rep.add(Measure{Name: MeasureDiscoveryWarm, Stats: statsOf(warm), FloorName: "kad-dht FindProviders", Floor: fl.FindProviders.P95, Compare: "p95", Goal: 3,
		Note: "a warm node answers from its cache of validated offers and refreshes in the background"}, false)

	// Every node replicates the market's book.
	s.log.Info("measure: joining the market")
	if err := parallel(len(net.nodes), 8, func(i int) error {
		jctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		return net.nodes[i].JoinMarket(jctx, s.market)
	}); err != nil {
		return fmt.Errorf("simnet: join market: %w", err)
	}
	// Warm up until one bid reaches every replica (the mesh has formed).
	if err := waitEvery(ctx, 3*time.Minute, 10*time.Millisecond, func() bool {
		_, err := s.propagate(ctx, net, buyers[rng.IntN(len(buyers))], rng, 5*time.Second)
		return err == nil
	}); err != nil {
		return fmt.Errorf("simnet: book mesh never formed: %w", err)
	}
	s.log.Info("measure: order propagation")
	var prop []time.Duration
	for range cfg.Samples {
		d, err := s.propagate(ctx, net, buyers[rng.IntN(len(buyers))], rng, time.Minute)
		if err != nil {
			return fmt.Errorf("simnet: propagation: %w", err)
		}
		prop = append(prop, d)
	}
	rep.add(Measure{Name: MeasurePropagation, Stats: statsOf(prop), FloorName: "gossipsub + 1 verify", Floor: fl.Gossip.P99, Compare: "p99", Goal: 1.5,
		Note: fmt.Sprintf("a bid until every one of %d replicas holds it; replicas polled every %s", len(net.nodes), pollEvery)}, false)

	return s.trades(ctx, net, rep, rng, true)
}

// discoverWait bounds one discovery sample.
const discoverWait = 30 * time.Second

// discover times Offers on b until it lists every provider.
func discover(ctx context.Context, mkt string, b *node.Node, want int) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, discoverWait)
	defer cancel()
	t0 := time.Now()
	for {
		offers, err := b.Offers(ctx, api.OfferQuery{GPU: mkt})
		if err != nil {
			return 0, err
		}
		if len(offers) >= want {
			return time.Since(t0), nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("found %d of %d offers", len(offers), want)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// propagate places a resting bid on b and times it until every replica
// holds it.
func (s *sim) propagate(ctx context.Context, net *network, b *node.Node, rng *mrand.Rand, wait time.Duration) (time.Duration, error) {
	// Far under any ask, so it rests; the price makes the order unique.
	price := fmt.Sprintf("0.%02d", 1+rng.IntN(90))
	t0 := time.Now()
	o, err := b.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: s.market, Count: 1, Price: price, Duration: "1h", Expires: "10m"})
	if err != nil {
		return 0, err
	}
	left := make([]*node.Node, 0, len(net.nodes))
	for _, n := range net.nodes {
		if n != nil {
			left = append(left, n)
		}
	}
	err = waitEvery(ctx, wait, pollEvery, func() bool {
		keep := left[:0]
		for _, n := range left {
			if !n.HoldsOrder(s.market, "USD", o.ID) {
				keep = append(keep, n)
			}
		}
		left = keep
		return len(left) == 0
	})
	d := time.Since(t0)
	if err != nil {
		return 0, fmt.Errorf("%d replicas never got the bid: %w", len(left), err)
	}
	return d, nil
}

// trades makes buyers take providers' asks and times each trade's steps;
// with bookDisc it measures discovery from the book too, once the asks
// are placed.
func (s *sim) trades(ctx context.Context, net *network, rep *Report, rng *mrand.Rand, bookDisc bool) error {
	cfg := s.cfg
	s.log.Info("measure: asks")
	byID := map[peer.ID]*node.Node{}
	for _, n := range net.nodes {
		byID[n.PeerID()] = n
	}
	// Every provider places its ask at once, as independent providers
	// would: one after another, each placement waits for its node's
	// gossipsub loop, and at 1,000 nodes on 2 cores 250 such waits in a
	// row took longer than the whole measure.
	refusedBefore := bookRefusals(net)
	asks := make([]string, net.providers)
	errs := make([]error, net.providers)
	var wg sync.WaitGroup
	for i := range net.providers {
		wg.Go(func() {
			o, err := net.nodes[i].PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: s.market, Count: 4, Price: "2.00", Expires: "30m", MinDuration: "1s"})
			if err != nil {
				errs[i] = fmt.Errorf("simnet: ask of provider %d: %w", i, err)
				return
			}
			asks[i] = o.ID
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// Every replica validates each ask against its provider's offer,
	// which travels with the ask; count the replicas that got every ask.
	holdAll := func(n *node.Node) bool {
		for _, id := range asks {
			if !n.HoldsOrder(s.market, "USD", id) {
				return false
			}
		}
		return true
	}
	full := 0
	placed := time.Now()
	waitEvery(ctx, 30*time.Second, 50*time.Millisecond, func() bool {
		full = 0
		for _, n := range net.nodes {
			if holdAll(n) {
				full++
			}
		}
		return full == len(net.nodes)
	})
	rep.AskReplicas, rep.AskReplicasFull = len(net.nodes), full
	rep.AskRefusals = refusalsSince(net, refusedBefore)
	if full == len(net.nodes) {
		rep.AskAllSeconds = time.Since(placed).Seconds()
	}
	if bookDisc {
		s.log.Info("measure: discovery from the book")
		if err := s.bookDiscovery(ctx, net, rep, min(cfg.Samples, 20)); err != nil {
			return err
		}
	}
	buyers := net.nodes[net.providers:]
	samples := min(cfg.Samples, 4*net.providers, len(buyers))
	order := rng.Perm(len(buyers))
	var cross, running, receipt []time.Duration
	var rtts []float64
	sameRegion := 0 // samples whose parties share a region (the ratio's small RTT)
	for k := range samples {
		b := buyers[order[k]]
		// The taker's replica must hold an ask, or its bid would rest.
		if err := waitFor(ctx, time.Minute, func() bool {
			for _, id := range asks {
				if b.HoldsOrder(s.market, "USD", id) {
					return true
				}
			}
			return false
		}); err != nil {
			return fmt.Errorf("simnet: buyer never held an ask: %w", err)
		}
		t0 := time.Now()
		bid, err := b.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: s.market, Count: 1, Price: "2.50", Duration: "5s", Expires: "1m"})
		if err != nil {
			return fmt.Errorf("simnet: crossing bid: %w", err)
		}
		var tv api.TradeView
		if err := waitEvery(ctx, time.Minute, pollEvery, func() bool {
			v, err := b.Order(ctx, bid.ID)
			if err != nil || len(v.Fills) == 0 {
				return false
			}
			tv = v.Fills[0]
			return true
		}); err != nil {
			return fmt.Errorf("simnet: bid never filled: %w", err)
		}
		pid, err := peer.Decode(tv.Provider)
		if err != nil {
			return err
		}
		maker := byID[pid]
		if maker == nil {
			return fmt.Errorf("simnet: fill with unknown provider %s", tv.Provider)
		}
		if err := waitEvery(ctx, time.Minute, pollEvery, func() bool {
			os, _ := maker.Orders(ctx)
			for _, o := range os {
				for _, f := range o.Fills {
					if f.ID == tv.ID {
						return true
					}
				}
			}
			return false
		}); err != nil {
			return fmt.Errorf("simnet: maker never held the fill: %w", err)
		}
		agreed := time.Since(t0)
		rtt := s.rtt(b.PeerID(), pid)
		if rtt == 2*cfg.Intra {
			sameRegion++
		}
		cross = append(cross, agreed)
		rtts = append(rtts, float64(agreed)/float64(rtt))
		if err := waitEvery(ctx, time.Minute, pollEvery, func() bool {
			l, err := maker.Lease(ctx, tv.Lease)
			return err == nil && (l.State == "running" || l.Countersigned > 0)
		}); err != nil {
			return fmt.Errorf("simnet: lease %s never ran: %w", tv.Lease, err)
		}
		running = append(running, time.Since(t0)-agreed)
		if err := waitEvery(ctx, time.Minute, pollEvery, func() bool {
			l, err := maker.Lease(ctx, tv.Lease)
			if err != nil || l.Countersigned == 0 {
				return false
			}
			l, err = b.Lease(ctx, tv.Lease)
			return err == nil && l.Countersigned > 0
		}); err != nil {
			return fmt.Errorf("simnet: lease %s never had a countersigned receipt: %w", tv.Lease, err)
		}
		receipt = append(receipt, time.Since(t0)-agreed)
	}
	// Crossing in RTTs of the parties' link: the floor is one RTT.
	rs := make([]time.Duration, len(rtts))
	for i, r := range rtts {
		rs[i] = time.Duration(r * float64(time.Millisecond))
	}
	st := statsOf(rs)
	cm := Measure{Name: MeasureCrossing, Stats: st, FloorName: "1 RTT of the link", Floor: 1, Compare: "p50", Goal: 3,
		Note: fmt.Sprintf("in RTTs of the taker-maker link (p50 %.1f ms wall; %d of %d samples within one region); from PlaceOrder to both parties holding the doubly-signed fill",
			statsOf(cross).P50, sameRegion, len(rtts))}
	rep.add(cm, false)
	interval, fl := ms(cfg.BillingInterval), rep.Floors
	rep.add(Measure{Name: MeasureLeaseRunning, Stats: statsOf(running), FloorName: "1 RTT inter", Floor: fl.RTTInter.P50, Compare: "p50"}, false)
	rep.add(Measure{Name: MeasureFirstReceipt, Stats: statsOf(receipt), FloorName: "billing interval + 1 RTT", Floor: interval + fl.RTTInter.P50, Compare: "p50",
		Note: "the first receipt is due one billing interval after the lease starts"}, false)
	return nil
}
