package p2p_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	recordpb "github.com/libp2p/go-libp2p/core/record/pb"
	"github.com/libp2p/go-libp2p/core/routing"
	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// dhtTimeout bounds every DHT test; conditions are polled until then.
const dhtTimeout = 60 * time.Second

// rejects counts the reasons an OfferValidator refused records; the DHT
// calls it from its own goroutines.
type rejects struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *rejects) add(reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.n[reason]++
}

func (r *rejects) count(reason string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[reason]
}

type dhtNode struct {
	key crypto.PrivKey
	h   host.Host
	d   *p2p.DHT
	rej *rejects
}

func (n *dhtNode) id() peer.ID { return n.h.ID() }

func newLoopbackHost(t *testing.T) (host.Host, crypto.PrivKey) {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatalf("GenerateEd25519Key: %v", err)
	}
	h, err := p2p.NewHost(p2p.HostConfig{Key: k, Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatalf("NewHost: %v", err)
	}
	t.Cleanup(func() { h.Close() })
	return h, k
}

func addrInfo(h host.Host) peer.AddrInfo { return peer.AddrInfo{ID: h.ID(), Addrs: h.Addrs()} }

// newDHTNetwork starts n loopback hosts with server-mode DHTs, each
// bootstrapped from all the others, and waits until every routing table
// holds every other node.
//
// The hosts are connected one pair at a time before any DHT exists: TCP
// with SO_REUSEPORT dials from the listen port, so two nodes dialling each
// other at once (as kad-dht does with its bootstrap peers at start-up) can
// make one simultaneous-open TCP connection on which both sides play the
// TLS/noise client and the handshake fails (see connectMesh).
func newDHTNetwork(ctx context.Context, t *testing.T, n int) []*dhtNode {
	t.Helper()
	nodes := make([]*dhtNode, n)
	hosts := make([]host.Host, n)
	for i := range nodes {
		h, k := newLoopbackHost(t)
		nodes[i] = &dhtNode{key: k, h: h, rej: &rejects{}}
		hosts[i] = h
	}
	connectMesh(ctx, t, hosts...)
	for i, nd := range nodes {
		var boot []peer.AddrInfo
		for j, other := range nodes {
			if j != i {
				boot = append(boot, addrInfo(other.h))
			}
		}
		d, err := p2p.NewDHT(p2p.DHTConfig{
			Host:      nd.h,
			Validator: p2p.OfferValidator{OnReject: nd.rej.add},
			Bootstrap: boot,
		})
		if err != nil {
			t.Fatalf("NewDHT: %v", err)
		}
		t.Cleanup(func() { d.Close() }) // runs before the host's Close
		nd.d = d
	}
	for _, nd := range nodes {
		if err := nd.d.Bootstrap(ctx); err != nil {
			t.Fatalf("Bootstrap(%s) = %v, want nil", nd.id(), err)
		}
	}
	waitFor(ctx, t, "full routing tables", func() error {
		for _, nd := range nodes {
			if got := nd.d.RoutingTableSize(); got < n-1 {
				return fmt.Errorf("node %s has %d peers, want %d; %s", nd.id(), got, n-1, connReport(nd.h, hosts))
			}
		}
		return nil
	})
	return nodes
}

// connectMesh connects every pair of hosts, one dial at a time, and fails
// the test if any dial fails.
func connectMesh(ctx context.Context, t *testing.T, hosts ...host.Host) {
	t.Helper()
	for i, h := range hosts {
		for _, other := range hosts[i+1:] {
			if err := h.Connect(ctx, addrInfo(other)); err != nil {
				t.Fatalf("Connect(%s -> %s) = %v, want nil", h.ID(), other.ID(), err)
			}
		}
	}
}

// connReport describes h's view of the other hosts, for failure messages.
func connReport(h host.Host, hosts []host.Host) string {
	var out []string
	for _, other := range hosts {
		if other.ID() == h.ID() {
			continue
		}
		protos, _ := h.Peerstore().GetProtocols(other.ID())
		out = append(out, fmt.Sprintf("%s: %v, %d conns, protocols %v",
			other.ID(), h.Network().Connectedness(other.ID()), len(h.Network().ConnsToPeer(other.ID())), protos))
	}
	return fmt.Sprint(out)
}

// waitFor polls cond until it returns nil or ctx ends, then fails with the
// last error cond returned.
func waitFor(ctx context.Context, t *testing.T, what string, cond func() error) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v (last: %v)", what, ctx.Err(), err)
		case <-tick.C:
		}
	}
}

func dhtContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), dhtTimeout)
	t.Cleanup(cancel)
	return ctx
}

// liveOffer is a test offer valid on the real clock.
func liveOffer(n *dhtNode, seq uint64) *proto.Offer {
	return testOffer(n.id(), seq, time.Now())
}

// fetchSeq polls nd.FetchOffer(p) until it returns the offer with seq.
func fetchSeq(ctx context.Context, t *testing.T, nd *dhtNode, p peer.ID, seq uint64) p2p.Found {
	t.Helper()
	var f p2p.Found
	waitFor(ctx, t, fmt.Sprintf("%s to see seq %d of %s", nd.id(), seq, p), func() error {
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		got, err := nd.d.FetchOffer(callCtx, p)
		if err != nil {
			return err
		}
		if got.Offer.Seq != seq {
			return fmt.Errorf("FetchOffer(%s) seq = %d, want %d", p, got.Offer.Seq, seq)
		}
		f = got
		return nil
	})
	return f
}

func TestDHTPublishFindOffers(t *testing.T) {
	ctx := dhtContext(t)
	nodes := newDHTNetwork(ctx, t, 3)
	prov, buyer := nodes[0], nodes[2]

	want := liveOffer(prov, 1)
	env := seal(t, prov.key, want)
	if err := prov.d.PublishOffer(ctx, env, []string{h100}); err != nil {
		t.Fatalf("PublishOffer = %v, want nil", err)
	}

	for _, market := range []string{h100, p2p.AnyMarket, ""} {
		t.Run("market="+market, func(t *testing.T) {
			waitFor(ctx, t, "FindOffers to find the provider", func() error {
				callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				found, err := buyer.d.FindOffers(callCtx, p2p.FindConfig{Market: market})
				if err != nil {
					return fmt.Errorf("FindOffers(%q) = %v", market, err)
				}
				if len(found) != 1 {
					return fmt.Errorf("FindOffers(%q) found %d offers, want 1", market, len(found))
				}
				f := found[0]
				if f.Provider != prov.id() {
					t.Fatalf("FindOffers(%q) provider = %s, want %s", market, f.Provider, prov.id())
				}
				if string(f.Envelope) != string(env) {
					t.Fatalf("FindOffers(%q) envelope differs from the published one", market)
				}
				if !gproto.Equal(f.Offer, want) {
					t.Fatalf("FindOffers(%q) offer = %v, want %v", market, f.Offer, want)
				}
				return nil
			})
		})
	}

	t.Run("market nobody provides", func(t *testing.T) {
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		found, err := buyer.d.FindOffers(callCtx, p2p.FindConfig{Market: "nvidia-a100-sxm4-40gb"})
		if err != nil || len(found) != 0 {
			t.Errorf("FindOffers(a100) = %d offers, %v, want 0, nil", len(found), err)
		}
	})

	t.Run("FetchOffer", func(t *testing.T) {
		f := fetchSeq(ctx, t, buyer, prov.id(), 1)
		if f.Provider != prov.id() || !gproto.Equal(f.Offer, want) {
			t.Errorf("FetchOffer(%s) = %s %v, want %s %v", prov.id(), f.Provider, f.Offer, prov.id(), want)
		}
	})
}

func TestDHTRepublishHigherSeq(t *testing.T) {
	ctx := dhtContext(t)
	nodes := newDHTNetwork(ctx, t, 3)
	prov := nodes[0]

	first := seal(t, prov.key, liveOffer(prov, 1))
	if err := prov.d.PublishOffer(ctx, first, []string{h100}); err != nil {
		t.Fatalf("PublishOffer(seq 1) = %v, want nil", err)
	}
	for _, nd := range nodes[1:] {
		fetchSeq(ctx, t, nd, prov.id(), 1)
	}

	second := seal(t, prov.key, liveOffer(prov, 2))
	if err := prov.d.PublishOffer(ctx, second, []string{h100}); err != nil {
		t.Fatalf("PublishOffer(seq 2) = %v, want nil", err)
	}
	for _, nd := range nodes {
		f := fetchSeq(ctx, t, nd, prov.id(), 2)
		if string(f.Envelope) != string(second) {
			t.Errorf("FetchOffer(%s) from %s returned other bytes than the seq-2 envelope", prov.id(), nd.id())
		}
	}

	// The older offer cannot come back, not even from its own provider.
	if err := prov.d.PublishOffer(ctx, first, []string{h100}); err == nil {
		t.Errorf("PublishOffer(seq 1 after seq 2) = nil, want an error")
	}
	for _, nd := range nodes[1:] {
		fetchSeq(ctx, t, nd, prov.id(), 2)
	}
}

// TestDHTPublishForeignOffer: a node may only publish an offer its own key
// signed, under its own key; others never return a foreign one.
func TestDHTPublishForeignOffer(t *testing.T) {
	ctx := dhtContext(t)
	nodes := newDHTNetwork(ctx, t, 3)
	prov, thief, buyer := nodes[0], nodes[1], nodes[2]

	env := seal(t, prov.key, liveOffer(prov, 1))
	err := thief.d.PublishOffer(ctx, env, []string{h100})
	if !errors.Is(err, p2p.ErrOfferSigner) {
		t.Fatalf("PublishOffer(offer signed by %s) on %s = %v, want %v", prov.id(), thief.id(), err, p2p.ErrOfferSigner)
	}
	if got := thief.rej.count("wrong-signer"); got != 1 {
		t.Errorf("thief's OnReject(wrong-signer) count = %d, want 1", got)
	}
	callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if f, err := buyer.d.FetchOffer(callCtx, thief.id()); !errors.Is(err, routing.ErrNotFound) {
		t.Errorf("FetchOffer(%s) = %v, %v, want %v", thief.id(), f.Offer, err, routing.ErrNotFound)
	}
}

// acceptAll is the validator of a malicious DHT node: it stores and sends
// anything.
type acceptAll struct{}

func (acceptAll) Validate(string, []byte) error        { return nil }
func (acceptAll) Select(string, [][]byte) (int, error) { return 0, nil }

// TestDHTRefusesBadRecordsOnReceipt runs a raw kad-dht server with a
// validator that accepts anything, so its PUT_VALUE messages carry forged
// records to the honest servers, which must refuse them on receipt and
// never hand them out.
func TestDHTRefusesBadRecordsOnReceipt(t *testing.T) {
	ctx := dhtContext(t)
	nodes := newDHTNetwork(ctx, t, 3)
	prov, buyer := nodes[0], nodes[2]

	eh, ek := newLoopbackHost(t)
	for _, nd := range nodes {
		connectMesh(ctx, t, eh, nd.h)
	}
	evil, err := dht.New(eh,
		dht.Mode(dht.ModeServer),
		dht.ProtocolPrefix(p2p.ProtocolPrefix),
		dht.NamespacedValidator(proto.OfferNamespace, acceptAll{}),
	)
	if err != nil {
		t.Fatalf("dht.New: %v", err)
	}
	t.Cleanup(func() { evil.Close() })
	waitFor(ctx, t, "the evil node in every routing table", func() error {
		if got := evil.RoutingTable().Size(); got < len(nodes) {
			return fmt.Errorf("evil node has %d peers, want %d", got, len(nodes))
		}
		for _, nd := range nodes {
			if got := nd.d.RoutingTableSize(); got < len(nodes) {
				return fmt.Errorf("node %s has %d peers, want %d", nd.id(), got, len(nodes))
			}
		}
		return nil
	})

	good := seal(t, prov.key, liveOffer(prov, 1))
	if err := prov.d.PublishOffer(ctx, good, []string{h100}); err != nil {
		t.Fatalf("PublishOffer = %v, want nil", err)
	}
	fetchSeq(ctx, t, buyer, prov.id(), 1)

	flip := func(env []byte) []byte {
		env = append([]byte(nil), env...)
		env[len(env)-1] ^= 0x01 // last byte of the signature
		return env
	}
	forged := liveOffer(prov, 99)
	forged.Pricing.OnDemandMicros = 1
	tampered := editEnvelope(t, good, func(e *recordpb.Envelope) { e.Payload = marshalOffer(t, forged) })

	for _, tc := range []struct {
		name   string
		key    peer.ID // whose offer key the record is put under
		value  []byte
		reason string
		want   uint64 // seq honest nodes return afterwards; 0: not found
	}{
		{"bad signature under its own key", eh.ID(), flip(seal(t, ek, testOffer(eh.ID(), 1, time.Now()))), "bad-envelope", 0},
		{"offer of another peer under its own key", eh.ID(), good, "wrong-signer", 0},
		{"own offer claiming the victim's key", prov.id(), seal(t, ek, testOffer(eh.ID(), 99, time.Now())), "wrong-signer", 1},
		{"victim's offer with a tampered payload", prov.id(), tampered, "bad-envelope", 1},
		{"victim's offer with a bad signature", prov.id(), flip(seal(t, prov.key, forged)), "bad-envelope", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := make([]int, len(nodes))
			for i, nd := range nodes {
				before[i] = nd.rej.count(tc.reason)
			}
			if err := evil.PutValue(ctx, proto.OfferKey(tc.key), tc.value); err != nil {
				t.Fatalf("evil PutValue = %v, want nil (it ignores refusals)", err)
			}
			waitFor(ctx, t, "every honest server to refuse the PUT", func() error {
				for i, nd := range nodes {
					if got := nd.rej.count(tc.reason); got <= before[i] {
						return fmt.Errorf("node %s OnReject(%s) count = %d, want > %d", nd.id(), tc.reason, got, before[i])
					}
				}
				return nil
			})
			for _, nd := range nodes {
				if nd.id() == tc.key {
					continue
				}
				callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
				f, err := nd.d.FetchOffer(callCtx, tc.key)
				cancel()
				switch {
				case tc.want == 0 && !errors.Is(err, routing.ErrNotFound):
					t.Errorf("FetchOffer(%s) from %s = %v, %v, want %v", tc.key, nd.id(), f.Offer, err, routing.ErrNotFound)
				case tc.want != 0 && err != nil:
					t.Errorf("FetchOffer(%s) from %s = %v, want seq %d", tc.key, nd.id(), err, tc.want)
				case tc.want != 0 && (f.Offer.Seq != tc.want || string(f.Envelope) != string(good)):
					t.Errorf("FetchOffer(%s) from %s = seq %d, want the published seq %d", tc.key, nd.id(), f.Offer.Seq, tc.want)
				}
			}
		})
	}
}

// TestDHTMutualBootstrap starts nodes the way node.New does: each DHT is
// created with the others as bootstrap peers before any connection exists,
// then bootstrapped. kad-dht dials its bootstrap peers at start-up and
// Bootstrap dials them again, so two nodes dial each other at once; with
// TCP SO_REUSEPORT that could become one simultaneous-open TCP connection
// on which both sides send a TLS ClientHello, the dial failed, and the pair
// stayed unconnected. NewHost disables port reuse; this keeps it so.
func TestDHTMutualBootstrap(t *testing.T) {
	rounds, n := 100, 3
	if testing.Short() {
		rounds = 10
	}
	for round := range rounds {
		t.Run(fmt.Sprint("round-", round), func(t *testing.T) {
			ctx := dhtContext(t)
			hosts := make([]host.Host, n)
			for i := range hosts {
				hosts[i], _ = newLoopbackHost(t)
			}
			dhts := make([]*p2p.DHT, n)
			for i, h := range hosts {
				var boot []peer.AddrInfo
				for j, other := range hosts {
					if j != i {
						boot = append(boot, addrInfo(other))
					}
				}
				d, err := p2p.NewDHT(p2p.DHTConfig{Host: h, Bootstrap: boot})
				if err != nil {
					t.Fatalf("NewDHT: %v", err)
				}
				t.Cleanup(func() { d.Close() })
				dhts[i] = d
			}
			// kad-dht is now dialling its bootstrap peers; node.New would
			// call Bootstrap, which dials them too. Dial each pair once.
			for i, h := range hosts {
				for _, other := range hosts[i+1:] {
					if err := h.Connect(ctx, addrInfo(other)); err != nil {
						t.Errorf("Connect(%s -> %s) = %v, want nil", h.ID(), other.ID(), err)
					}
				}
			}
			for _, d := range dhts {
				if err := d.Bootstrap(ctx); err != nil {
					t.Errorf("Bootstrap = %v, want nil", err)
				}
			}
		})
	}
}
