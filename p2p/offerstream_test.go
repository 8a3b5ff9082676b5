package p2p_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/routing"

	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// TestFetchOfferDirect: a buyer gets a provider's offer from the provider
// itself (OfferProtocol) even when the DHT holds no record of it, and
// refuses what a peer serves signed by someone else.
func TestFetchOfferDirect(t *testing.T) {
	ctx := dhtContext(t)
	nodes := newDHTNetwork(ctx, t, 3)
	prov, thief, buyer := nodes[0], nodes[1], nodes[2]
	env := seal(t, prov.key, liveOffer(prov, 7))

	t.Run("no record anywhere", func(t *testing.T) {
		// Nobody serves OfferProtocol yet and nothing was published: the
		// error is the DHT's not-found, with the provider's reason beside it.
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := buyer.d.FetchOfferFirst(cctx, prov.id())
		if !errors.Is(err, routing.ErrNotFound) || !strings.Contains(err.Error(), "from the provider") {
			t.Fatalf("FetchOfferFirst before the provider serves = %v, want not found (from the provider: ...)", err)
		}
	})

	p2p.HandleOffer(prov.h, func() []byte { return env }, nil)
	t.Run("from the provider", func(t *testing.T) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		f, err := buyer.d.FetchOfferFirst(cctx, prov.id())
		if err != nil {
			t.Fatalf("FetchOfferFirst = %v, want the provider's own answer", err)
		}
		if f.Provider != prov.id() || f.Offer.Seq != 7 || !bytes.Equal(f.Envelope, env) {
			t.Fatalf("FetchOfferFirst = %s seq %d, want %s seq 7 and its envelope", f.Provider, f.Offer.Seq, prov.id())
		}
	})

	t.Run("the provider is asked before the DHT", func(t *testing.T) {
		// The DHT holds an older record (seq 6) than the provider serves
		// (seq 7). The search starts only when the provider has not
		// answered within DirectHedge, so a provider that answers gives
		// its own, newer offer every time. (With both started at once,
		// as before the hedge, a fetch could return either.) Three
		// fetches: the provider answers a peer 4 times in a burst and the
		// subtest above used one.
		if err := prov.d.PublishOffer(ctx, seal(t, prov.key, liveOffer(prov, 6)), []string{h100}); err != nil {
			t.Fatalf("PublishOffer(seq 6) = %v", err)
		}
		for i := range 3 {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			f, err := buyer.d.FetchOfferFirst(cctx, prov.id())
			cancel()
			if err != nil || f.Offer.Seq != 7 {
				t.Fatalf("fetch %d: FetchOfferFirst = seq %v, %v; want the provider's seq 7", i, f.Offer.GetSeq(), err)
			}
		}
	})

	t.Run("a silent provider: the DHT answers after the hedge", func(t *testing.T) {
		// The provider accepts the request and never answers: the DHT's
		// record is the answer, once DirectHedge has passed.
		stall := make(chan struct{})
		defer close(stall)
		prov.h.SetStreamHandler(p2p.OfferProtocol, func(s network.Stream) {
			defer s.Reset()
			select {
			case <-stall:
			case <-ctx.Done():
			}
		})
		defer p2p.HandleOffer(prov.h, func() []byte { return env }, nil)
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		start := time.Now()
		f, err := buyer.d.FetchOfferFirst(cctx, prov.id())
		if err != nil || f.Offer.Seq != 6 {
			t.Fatalf("FetchOfferFirst of a silent provider = seq %v, %v; want the DHT's seq 6", f.Offer.GetSeq(), err)
		}
		if took := time.Since(start); took < p2p.DirectHedge {
			t.Errorf("answered in %v, before the hedge of %v: the DHT was searched at once", took, p2p.DirectHedge)
		}
	})

	t.Run("another's offer is refused", func(t *testing.T) {
		p2p.HandleOffer(thief.h, func() []byte { return env }, nil)
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		f, err := buyer.d.FetchOfferFirst(cctx, thief.id())
		if err == nil || !strings.Contains(err.Error(), p2p.ErrOfferSigner.Error()) {
			t.Fatalf("FetchOfferFirst(thief serving %s's offer) = %v, %v; want a wrong-signer refusal", prov.id(), f.Provider, err)
		}
	})
}

// offerPeers is an asker a connected to a peer b, and an offer sealed by
// b's key for b to serve.
func offerPeers(t *testing.T) (context.Context, host.Host, host.Host, []byte) {
	t.Helper()
	ctx := dhtContext(t)
	a, _ := newLoopbackHost(t)
	b, k := newLoopbackHost(t)
	connectMesh(ctx, t, a, b)
	return ctx, a, b, seal(t, k, &proto.Offer{Seq: 1})
}

// TestHandleOfferLimits: one peer asking in a loop is answered at the
// limiter's rate and each refusal is counted; a provider with no offer,
// or an answer past proto.MaxOfferSize, gives ErrNoOffer or an error.
func TestHandleOfferLimits(t *testing.T) {
	ctx, a, b, env := offerPeers(t)
	var refused atomic.Int64
	p2p.HandleOffer(b, func() []byte { return env }, func() { refused.Add(1) })

	const asks = 20
	start := time.Now()
	got := 0
	for range asks {
		e, err := p2p.RequestOffer(ctx, a, b.ID())
		if err == nil {
			if !bytes.Equal(e, env) {
				t.Fatalf("RequestOffer answered %d bytes, want the served envelope", len(e))
			}
			got++
		}
	}
	elapsed := time.Since(start)
	// Burst 4, then 1 a second.
	if most := 4 + int(elapsed/time.Second) + 1; got > most || got < 4 {
		t.Errorf("%d of %d asks answered in %v; want 4..%d", got, asks, elapsed, most)
	}
	if int(refused.Load()) != asks-got {
		t.Errorf("refused counted %d, want %d", refused.Load(), asks-got)
	}

	// No offer: reset, ErrNoOffer.
	c, _ := newLoopbackHost(t)
	connectMesh(ctx, t, a, c)
	p2p.HandleOffer(c, func() []byte { return nil }, nil)
	if _, err := p2p.RequestOffer(ctx, a, c.ID()); !errors.Is(err, p2p.ErrNoOffer) {
		t.Errorf("RequestOffer of a buyer = %v, want ErrNoOffer", err)
	}

	// A peer that writes past the bound is cut off by the asker.
	d, _ := newLoopbackHost(t)
	connectMesh(ctx, t, a, d)
	d.SetStreamHandler(p2p.OfferProtocol, func(s network.Stream) {
		defer s.Close()
		s.Write(make([]byte, proto.MaxOfferSize+10))
	})
	if e, err := p2p.RequestOffer(ctx, a, d.ID()); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("RequestOffer of an oversized answer = %d bytes, %v; want a size error", len(e), err)
	}
}

// TestOfferDigestProtocol: a peer answers a digest with the offer it holds
// under it, and nothing for one it does not hold (ErrNoOffer); an answer
// that is not the offer asked for is refused (ErrOfferDigest), and a
// request cut short gets no answer. Each asker is rationed: past the
// burst, refusals are counted and answered with nothing.
func TestOfferDigestProtocol(t *testing.T) {
	ctx, a, b, env := offerPeers(t)
	d := p2p.OfferDigest(env)
	var refused atomic.Int64
	p2p.HandleOfferDigest(b, func(got [p2p.OfferDigestSize]byte) []byte {
		if got == d {
			return env
		}
		return nil
	}, func() { refused.Add(1) })

	start := time.Now() // b's ration refills from its first answer on
	if e, err := p2p.RequestOfferDigest(ctx, a, b.ID(), d); err != nil || !bytes.Equal(e, env) {
		t.Fatalf("RequestOfferDigest(held) = %d bytes, %v; want the envelope", len(e), err)
	}
	other := p2p.OfferDigest([]byte("another offer"))
	if _, err := p2p.RequestOfferDigest(ctx, a, b.ID(), other); !errors.Is(err, p2p.ErrNoOffer) {
		t.Fatalf("RequestOfferDigest(not held) = %v, want ErrNoOffer", err)
	}

	// A liar answers every digest with the offer it has.
	c, _ := newLoopbackHost(t)
	connectMesh(ctx, t, a, c)
	p2p.HandleOfferDigest(c, func([p2p.OfferDigestSize]byte) []byte { return env }, nil)
	if e, err := p2p.RequestOfferDigest(ctx, a, c.ID(), other); !errors.Is(err, p2p.ErrOfferDigest) {
		t.Fatalf("RequestOfferDigest of a liar = %d bytes, %v; want ErrOfferDigest", len(e), err)
	}
	// Negative control: the liar's answer to the digest it matches.
	if _, err := p2p.RequestOfferDigest(ctx, a, c.ID(), d); err != nil {
		t.Fatalf("RequestOfferDigest of the liar's own offer = %v", err)
	}

	// A request of 5 bytes: no answer.
	s, err := a.NewStream(ctx, b.ID(), p2p.OfferDigestProtocol)
	if err != nil {
		t.Fatal(err)
	}
	s.Write([]byte("short"))
	s.CloseWrite()
	s.SetDeadline(time.Now().Add(10 * time.Second))
	if got, _ := io.ReadAll(s); len(got) != 0 {
		t.Fatalf("a short request was answered with %d bytes", len(got))
	}
	s.Close()

	// The ration: the first three asks above used 2 of b's burst of 400.
	const asks = 460
	got := 0
	for range asks {
		if _, err := p2p.RequestOfferDigest(ctx, a, b.ID(), d); err == nil {
			got++
		} else if !errors.Is(err, p2p.ErrNoOffer) {
			t.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	if most := 398 + int(50*elapsed.Seconds()) + 1; got > most || got < 398 { // elapsed since the first answer
		t.Errorf("%d of %d asks answered in %v; want 398..%d", got, asks, elapsed, most)
	}
	if int(refused.Load()) != asks-got {
		t.Errorf("refused counted %d, want %d", refused.Load(), asks-got)
	}
}
