package p2p

import (
	"context"
	"crypto/sha256"
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
	serveOffers(h, OfferProtocol, 0, func([]byte) []byte { return own() }, offerAnswerRate, offerAnswerBurst, refused)
}

// RequestOffer asks p for its sealed offer and returns the envelope's bytes,
// unchecked: the caller opens it (OpenOffer) and checks its signer.
func RequestOffer(ctx context.Context, h host.Host, p peer.ID) ([]byte, error) {
	return requestOffer(ctx, h, p, OfferProtocol, nil)
}

// OfferDigestProtocol asks a peer for any sealed offer it holds, by the
// SHA-256 of its envelope (OfferDigest): the asker writes the 32-byte
// digest and closes its side; the peer writes the envelope (at most
// proto.MaxOfferSize bytes), or nothing when it holds no offer with that
// digest, and closes. Gossip carries an ask with its offer's digest
// (proto.BookMessage.offer_digest); a replica without that offer asks the
// peer that relayed the ask, which held the offer to validate it.
const OfferDigestProtocol = protocol.ID("/suanli/offer-digest/1.0.0")

// OfferDigestSize is the size of an offer digest.
const OfferDigestSize = sha256.Size

// Bounds on the digest protocol, per asking peer: a node that has just
// joined pulls one offer per provider, from whichever neighbour relayed
// its first ask, so a burst of some hundreds is normal; past it an answer
// of up to 64 KB for 32 bytes asked is rationed.
const (
	offerDigestRate  = 50
	offerDigestBurst = 400
)

// ErrOfferDigest is returned by RequestOfferDigest when the answer is not
// the offer asked for (its SHA-256 is another).
var ErrOfferDigest = errors.New("p2p: answer does not match the offer digest")

// OfferDigest is the digest that names a sealed offer on
// OfferDigestProtocol and beside an ask.
func OfferDigest(env []byte) [OfferDigestSize]byte { return sha256.Sum256(env) }

// HandleOfferDigest serves OfferDigestProtocol on h: held returns the
// sealed offer with the digest asked for, or nil. Each peer may ask
// offerDigestRate times a second (burst offerDigestBurst); past it, or for
// a digest not held, the stream is closed with nothing written, and a
// refusal for the rate calls refused (optional).
func HandleOfferDigest(h host.Host, held func(digest [OfferDigestSize]byte) []byte, refused func()) {
	serveOffers(h, OfferDigestProtocol, OfferDigestSize, func(req []byte) []byte {
		return held([OfferDigestSize]byte(req))
	}, offerDigestRate, offerDigestBurst, refused)
}

// RequestOfferDigest asks p for the sealed offer whose SHA-256 is digest
// and returns its bytes, checked against the digest (ErrOfferDigest) but
// not opened: the caller opens it and checks its signer. ErrNoOffer: p
// holds no such offer or refused to answer so often.
func RequestOfferDigest(ctx context.Context, h host.Host, p peer.ID, digest [OfferDigestSize]byte) ([]byte, error) {
	env, err := requestOffer(ctx, h, p, OfferDigestProtocol, digest[:])
	if err != nil {
		return nil, err
	}
	if OfferDigest(env) != digest {
		return nil, fmt.Errorf("%w: from %s", ErrOfferDigest, p)
	}
	return env, nil
}

// serveOffers serves one of the offer protocols: a request of exactly
// reqSize bytes (none for OfferProtocol), answered with answer(req), the
// asking peer rationed to r a second (burst).
func serveOffers(h host.Host, pid protocol.ID, reqSize int, answer func(req []byte) []byte, r rate.Limit, burst int, refused func()) {
	var (
		mu     sync.Mutex
		askers = map[peer.ID]*rate.Limiter{}
	)
	h.SetStreamHandler(pid, func(s network.Stream) {
		defer s.Close()
		s.SetDeadline(time.Now().Add(offerStreamTimeout))
		req := make([]byte, reqSize)
		if _, err := io.ReadFull(s, req); err != nil {
			s.Reset()
			return
		}
		mu.Lock()
		allowed := AllowIn(askers, s.Conn().RemotePeer(), r, burst)
		mu.Unlock()
		var env []byte
		if allowed {
			env = answer(req)
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

// requestOffer opens pid to p, writes req, closes its side and reads the
// answer: an offer's envelope of at most proto.MaxOfferSize bytes, or
// ErrNoOffer for none.
func requestOffer(ctx context.Context, h host.Host, p peer.ID, pid protocol.ID, req []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, offerStreamTimeout)
	defer cancel()
	s, err := h.NewStream(ctx, p, pid)
	if err != nil {
		return nil, fmt.Errorf("p2p: open offer stream: %w", err)
	}
	defer s.Close()
	if dl, ok := ctx.Deadline(); ok {
		s.SetDeadline(dl)
	}
	if len(req) > 0 {
		if _, err := s.Write(req); err != nil {
			s.Reset()
			return nil, fmt.Errorf("p2p: ask for offer: %w", err)
		}
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
