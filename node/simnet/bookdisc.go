package simnet

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"

	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
)

// MeasureDiscoveryBook names the cold discovery of a market's sellers
// through its book (api.OffersFromBook).
const MeasureDiscoveryBook = "discovery from the book (cold node)"

// bookDiscovery starts fresh buyers that have never joined the market,
// one at a time, and times Offers from the book on each (join the
// market's topic: a provider-record lookup for a few of its peers, one
// sync; then the offers the open asks travelled with) until it lists
// every provider: the design that keeps cold discovery independent of
// the number of providers (no DHT value lookup per provider). Each late
// node is bootstrapped before the timer starts, as the cold buyers of
// MeasureDiscoveryCold are, and closed after its sample.
func (s *sim) bookDiscovery(ctx context.Context, net *network, rep *Report, samples int) error {
	quiet := slog.New(levelHandler{slog.LevelError, s.log.Handler()})
	var took []time.Duration
	incomplete := 0
	for k := range samples {
		d, err := s.lateDiscover(ctx, net, quiet, k)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.log.Warn("discovery from the book incomplete", "err", err, "goroutines", runtime.NumGoroutine())
			incomplete++
			continue
		}
		took = append(took, d)
	}
	note := fmt.Sprintf("a fresh node, bootstrapped, until Offers(from: book) lists all %d providers' offers (no DHT value lookups)", net.providers)
	if incomplete > 0 {
		note += fmt.Sprintf("; %d samples never listed them all within %s and are left out", incomplete, discoverWait)
	}
	rep.add(Measure{Name: MeasureDiscoveryBook, Stats: statsOf(took), FloorName: "kad-dht FindProviders", Floor: rep.Floors.FindProviders.P95, Compare: "p95", Goal: 3, Note: note}, false)
	return nil
}

// lateDiscover runs one sample of bookDiscovery on late node k.
func (s *sim) lateDiscover(ctx context.Context, net *network, quiet *slog.Logger, k int) (time.Duration, error) {
	dir, err := os.MkdirTemp(s.cfg.Dir, "suanli-simnet-late-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	key, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		return 0, err
	}
	i := net.providers + k // a buyer's region, round robin
	h, err := s.addHost(key, i, 4)
	if err != nil {
		return 0, err
	}
	defer s.removeHost(h)
	var boot []string
	for r := range s.cfg.Regions {
		for _, a := range net.hosts[r].Addrs() {
			boot = append(boot, a.String()+"/p2p/"+net.hosts[r].ID().String())
		}
	}
	nd, err := node.New(node.WithRepo(filepath.Join(dir, "repo")), node.WithAutoInit(),
		node.WithHost(h), node.WithAPI(""), node.WithLogger(quiet), node.WithoutGPU(),
		node.WithRegion(RegionName(i%s.cfg.Regions)), node.WithBootstrap(boot...),
		node.WithStampBits(StampBits)) // the network's: a replica takes no weaker stamp

	if err != nil {
		return 0, fmt.Errorf("late node: %w", err)
	}
	defer nd.Close()
	// Bootstrapped: connected beyond the bootstrap peers.
	if err := waitFor(ctx, time.Minute, func() bool { return len(h.Network().Peers()) > s.cfg.Regions }); err != nil {
		return 0, fmt.Errorf("late node never bootstrapped: %w", err)
	}
	answersBefore := refusals(net.nodes, "sync-request")
	dctx, cancel := context.WithTimeout(ctx, discoverWait)
	defer cancel()
	t0 := time.Now()
	for {
		offers, err := nd.Offers(dctx, api.OfferQuery{GPU: s.market, From: api.OffersFromBook})
		if err == nil && len(offers) >= net.providers {
			return time.Since(t0), nil
		}
		select {
		case <-dctx.Done():
			// What a user would ask first: did anyone answer, and what
			// did this node refuse of what came?
			_, orders, _ := nd.BookDigest(s.market, "USD")
			return 0, fmt.Errorf("found %d of %d offers (%v); the late node holds %d orders, has %d peers, refused %v; sync answers refused by the network meanwhile: %v",
				len(offers), net.providers, err, orders, len(h.Network().Peers()), refusals([]*node.Node{nd}, ""), since(refusals(net.nodes, "sync-request"), answersBefore))
		case <-time.After(5 * time.Millisecond):
		}
	}
}
