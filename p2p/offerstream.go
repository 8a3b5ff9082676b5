package p2p

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"golang.org/x/time/rate"

	"github.com/suanli/suanli/proto"
)

// OfferProtocol asks a provider for its current sealed offer: the asker
// opens a stream and closes its side; the provider writes the envelope
// (at most proto.MaxOfferSize bytes) and closes. A buyer that found a
// provider in the DHT asks it directly while the DHT's value lookup
// runs (DHT.FetchOfferFirst): one round trip to the source, not a walk of
// log N hops. The answer is checked exactly as a DHT record is.
const OfferProtocol = protocol.ID("/suanli/offer/1.0.0")

// Bounds on the offer protocol: how long one exchange may take, and how
// often one peer may ask (an answer is up to 64 KB for a request that
// costs nothing).
const (
	offerStreamTimeout = 10 * time.Second
	offerAnswerRate    = 1
	offerAnswerBurst   = 4
)

// ErrNoOffer is returned by RequestOffer when the peer has no offer to give
// (it is not a provider, or refused to answer so often).
var ErrNoOffer = errors.New("p2p: peer gave no offer")

// HandleOffer serves OfferProtocol on h: own returns this node's current
// sealed offer, or nil when it has none (the stream is then closed with
// nothing written). Each peer may ask offerAnswerRate times a second
// (burst offerAnswerBurst); one that asks more often is refused the same
// way, and refused is called (optional).
func HandleOffer(h host.Host, own func() []byte, refused func()) {
	var (
		mu     sync.Mutex
		askers = map[peer.ID]*rate.Limiter{}
	)
	h.SetStreamHandler(OfferProtocol, func(s network.Stream) {
		defer s.Close()
		s.SetDeadline(time.Now().Add(offerStreamTimeout))
		mu.Lock()
		allowed := AllowIn(askers, s.Conn().RemotePeer(), offerAnswerRate, offerAnswerBurst)
		mu.Unlock()
		var env []byte
		if allowed {
			env = own()
		}
		if !allowed || len(env) == 0 || len(env) > proto.MaxOfferSize {
			if !allowed && refused != nil {
				refused()
			}
			return // closed with nothing written: ErrNoOffer
		}
		if _, err := s.Write(env); err != nil {
			s.Reset()
		}
	})
}

// RequestOffer asks p for its sealed offer and returns the envelope's bytes,
// unchecked: the caller opens it (OpenOffer) and checks its signer.
func RequestOffer(ctx context.Context, h host.Host, p peer.ID) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, offerStreamTimeout)
	defer cancel()
	s, err := h.NewStream(ctx, p, OfferProtocol)
	if err != nil {
		return nil, fmt.Errorf("p2p: open offer stream: %w", err)
	}
	defer s.Close()
	if dl, ok := ctx.Deadline(); ok {
		s.SetDeadline(dl)
	}
	s.CloseWrite()
	env, err := io.ReadAll(io.LimitReader(s, proto.MaxOfferSize+1))
	if err != nil {
		s.Reset()
		return nil, fmt.Errorf("p2p: read offer: %w", err)
	}
	switch {
	case len(env) == 0:
		return nil, ErrNoOffer
	case len(env) > proto.MaxOfferSize:
		s.Reset()
		return nil, fmt.Errorf("p2p: offer from %s: more than %d bytes", p, proto.MaxOfferSize)
	}
	return env, nil
}
