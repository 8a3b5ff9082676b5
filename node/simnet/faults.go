package simnet

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"

	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
)

// Names of the fault measures in a Report.
const (
	MeasurePartitionProp = "partition: propagation within a side"
	MeasureHealConverge  = "heal: until every book converged"
	MeasureHealProp      = "after heal: order propagation"
	MeasureChurnProp     = "churn: propagation to live nodes"
	MeasureChurnRejoin   = "churn: rejoined node until its book converged"
)

// faults partitions east from west, places bids on both sides, heals, and
// waits until every replica holds the same book; then churns a share of
// buyers (closed, bids placed, restarted on the same repo and key) and
// waits for the restarted replicas to converge.
func (s *sim) faults(ctx context.Context, net *network, rep *Report) error {
	cfg := s.cfg
	rng := mrand.New(mrand.NewPCG(5, 6))
	fl := rep.Floors
	if cfg.Regions < 2 {
		return fmt.Errorf("a partition needs two regions")
	}
	east := func(i int) bool { return i%cfg.Regions < (cfg.Regions+1)/2 }
	var sides [2][]int
	for i := range net.nodes {
		if east(i) {
			sides[0] = append(sides[0], i)
		} else {
			sides[1] = append(sides[1], i)
		}
	}
	// Bids every replica holds, to be cancelled on the east side while it
	// is cut off: the west learns of the cancels only after the heal.
	var cancels []cancelled
	for k := range max(2, cfg.Samples/2) {
		var eastBuyers []int
		for _, i := range sides[0] {
			if i >= net.providers {
				eastBuyers = append(eastBuyers, i)
			}
		}
		if len(eastBuyers) == 0 {
			break
		}
		i := eastBuyers[k%len(eastBuyers)]
		o, err := net.nodes[i].PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: s.market, Count: 1, Price: fmt.Sprintf("0.%02d", 91+k%9), Duration: "1h", Expires: "10m"})
		if err != nil {
			return fmt.Errorf("bid to cancel: %w", err)
		}
		cancels = append(cancels, cancelled{node: i, id: o.ID})
	}
	if err := waitEvery(ctx, time.Minute, 10*time.Millisecond, func() bool { return heldBy(s.market, net.nodes, cancels) == len(cancels)*len(net.nodes) }); err != nil {
		return fmt.Errorf("bids to cancel never reached every replica: %w", err)
	}
	s.log.Info("fault: partition east from west", "east", len(sides[0]), "west", len(sides[1]))
	for _, a := range sides[0] {
		for _, b := range sides[1] {
			pa, pb := net.hosts[a].ID(), net.hosts[b].ID()
			s.mn.UnlinkPeers(pa, pb)
			s.mn.DisconnectPeers(pa, pb)
		}
	}
	var during []time.Duration
	for k := range cfg.Samples {
		side := sides[k%2]
		var buyers []*node.Node
		var all []*node.Node
		for _, i := range side {
			all = append(all, net.nodes[i])
			if i >= net.providers {
				buyers = append(buyers, net.nodes[i])
			}
		}
		d, err := s.propagateTo(ctx, all, buyers[rng.IntN(len(buyers))], rng, time.Minute)
		if err != nil {
			return fmt.Errorf("propagation during partition: %w", err)
		}
		during = append(during, d)
	}
	rep.add(Measure{Name: MeasurePartitionProp, Stats: statsOf(during), FloorName: "gossipsub + 1 verify", Floor: fl.Gossip.P99, Compare: "p99",
		Note: "each side's replicas only; the floor is the whole network's"}, true)
	for _, c := range cancels {
		if _, err := net.nodes[c.node].CancelOrder(ctx, c.id); err != nil {
			return fmt.Errorf("cancel during partition: %w", err)
		}
	}
	rep.PartitionCancels = len(cancels)

	s.log.Info("fault: heal")
	t0 := time.Now()
	for _, a := range sides[0] {
		for _, b := range sides[1] {
			pa, pb := net.hosts[a].ID(), net.hosts[b].ID()
			l, err := s.mn.LinkPeers(pa, pb)
			if err != nil {
				return err
			}
			l.SetOptions(mocknet.LinkOptions{Latency: s.latency(a%cfg.Regions, b%cfg.Regions)})
		}
	}
	// The cut connections come back as the nodes' bootstrap peers would be
	// redialled: every node dials the first node of each region it lost.
	// All at once, as the nodes would: one after the other, the dials
	// alone took seconds at 100 nodes, and that is not the books' doing.
	parallel(len(net.hosts), 32, func(i int) error {
		for r := range cfg.Regions {
			if r != i && east(r) != east(i) {
				net.hosts[i].Connect(ctx, peer.AddrInfo{ID: net.hosts[r].ID(), Addrs: net.hosts[r].Addrs()})
			}
		}
		return nil
	})
	converged := waitEvery(ctx, 3*time.Minute, 20*time.Millisecond, func() bool { return sameBooks(s.market, net.nodes) && heldBy(s.market, net.nodes, cancels) == 0 }) == nil
	rep.Converged = &converged
	rep.CancelledLeft = heldBy(s.market, net.nodes, cancels)
	rep.add(Measure{Name: MeasureHealConverge, Stats: statsOf([]time.Duration{time.Since(t0)}),
		Note: fmt.Sprintf("converged: %v (same open orders and fills on every replica, none holding the %d bids cancelled on one side)", converged, len(cancels))}, true)
	if !converged {
		return nil
	}
	var after []time.Duration
	buyers := net.nodes[net.providers:]
	for range cfg.Samples {
		d, err := s.propagate(ctx, net, buyers[rng.IntN(len(buyers))], rng, time.Minute)
		if err != nil {
			return fmt.Errorf("propagation after heal: %w", err)
		}
		after = append(after, d)
	}
	rep.add(Measure{Name: MeasureHealProp, Stats: statsOf(after), FloorName: "gossipsub + 1 verify", Floor: fl.Gossip.P99, Compare: "p99"}, true)
	return s.churn(ctx, net, rep, rng)
}

// churn closes a share of buyers, measures propagation to the others,
// restarts them on their repos and keys, and times their convergence.
func (s *sim) churn(ctx context.Context, net *network, rep *Report, rng *mrand.Rand) error {
	cfg := s.cfg
	buyers := len(net.nodes) - net.providers
	n := max(1, int(float64(buyers)*0.1))
	out := map[int]bool{}
	for _, j := range rng.Perm(buyers)[:n] {
		out[net.providers+j] = true
	}
	s.log.Info("fault: churn", "nodes", n)
	for i := range out {
		net.nodes[i].Close()
		s.removeHost(net.hosts[i])
		net.nodes[i] = nil
	}
	var live, liveBuyers []*node.Node
	for i, nd := range net.nodes {
		if nd != nil {
			live = append(live, nd)
			if i >= net.providers {
				liveBuyers = append(liveBuyers, nd)
			}
		}
	}
	var during []time.Duration
	for range cfg.Samples {
		d, err := s.propagateTo(ctx, live, liveBuyers[rng.IntN(len(liveBuyers))], rng, time.Minute)
		if err != nil {
			return fmt.Errorf("propagation during churn: %w", err)
		}
		during = append(during, d)
	}
	rep.add(Measure{Name: MeasureChurnProp, Stats: statsOf(during), FloorName: "gossipsub + 1 verify", Floor: rep.Floors.Gossip.P99, Compare: "p99",
		Note: fmt.Sprintf("%d of %d buyers down", n, buyers)}, true)

	t0 := time.Now()
	for i := range out {
		h, err := s.addHost(net.keys[i], i, 1)
		if err != nil {
			return err
		}
		net.hosts[i] = h
		nd, err := node.New(net.opts(i)...)
		if err != nil {
			return fmt.Errorf("restart node %d: %w", i, err)
		}
		net.nodes[i] = nd
		jctx, cancel := context.WithTimeout(ctx, time.Minute)
		err = nd.JoinMarket(jctx, s.market)
		cancel()
		if err != nil {
			return fmt.Errorf("restarted node %d: join market: %w", i, err)
		}
	}
	converged := waitEvery(ctx, 3*time.Minute, 20*time.Millisecond, func() bool { return sameBooks(s.market, net.nodes) }) == nil
	if rep.Converged != nil {
		converged = converged && *rep.Converged
	}
	rep.Converged = &converged
	rep.add(Measure{Name: MeasureChurnRejoin, Stats: statsOf([]time.Duration{time.Since(t0)}),
		Note: fmt.Sprintf("%d nodes restarted on their repos; converged: %v", n, converged)}, true)
	return nil
}

// cancelled is a bid node cancels during the partition.
type cancelled struct {
	node int
	id   string
}

// heldBy counts the (replica, bid) pairs in which a live replica holds
// one of the bids.
func heldBy(mkt string, nodes []*node.Node, bids []cancelled) int {
	n := 0
	for _, nd := range nodes {
		if nd == nil {
			continue
		}
		for _, c := range bids {
			if nd.HoldsOrder(mkt, "USD", c.id) {
				n++
			}
		}
	}
	return n
}

// sameBooks reports whether every node's replica of mkt has the same
// open orders and fills.
func sameBooks(mkt string, nodes []*node.Node) bool {
	var first string
	for i, n := range nodes {
		d, _, _ := n.BookDigest(mkt, "USD")
		if i == 0 {
			first = d
		} else if d != first {
			return false
		}
	}
	return true
}

// propagateTo is propagate over a subset of the nodes.
func (s *sim) propagateTo(ctx context.Context, nodes []*node.Node, b *node.Node, rng *mrand.Rand, wait time.Duration) (time.Duration, error) {
	return s.propagate(ctx, &network{nodes: nodes}, b, rng, wait)
}
