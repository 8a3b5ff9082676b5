package p2p

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	record2 "github.com/libp2p/go-libp2p-record"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/proto"
)

// Reasons a signed offer is refused before the market rules look at it.
var (
	ErrOfferTooLarge = errors.New("p2p: offer record too large")
	ErrOfferEnvelope = errors.New("p2p: offer envelope invalid")
	ErrOfferSigner   = errors.New("p2p: offer signed by another peer")
)

// RejectReason is a short label for why an offer was refused, for metrics.
func RejectReason(err error) string {
	switch {
	case errors.Is(err, ErrOfferTooLarge):
		return "too-large"
	case errors.Is(err, ErrOfferEnvelope):
		return "bad-envelope"
	case errors.Is(err, ErrOfferSigner):
		return "wrong-signer"
	case errors.Is(err, proto.ErrBadKey):
		return "bad-key"
	}
	return market.OfferReason(err)
}

// SealOffer signs an offer with the provider's key into a libp2p signed
// envelope and returns the envelope bytes, the exact bytes that travel.
func SealOffer(key crypto.PrivKey, o *proto.Offer) ([]byte, error) {
	env, err := record.Seal(&proto.OfferRecord{Offer: o}, key)
	if err != nil {
		return nil, fmt.Errorf("p2p: seal offer: %w", err)
	}
	b, err := env.Marshal()
	if err != nil {
		return nil, fmt.Errorf("p2p: marshal offer envelope: %w", err)
	}
	if len(b) > proto.MaxOfferSize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrOfferTooLarge, len(b), proto.MaxOfferSize)
	}
	return b, nil
}

// OpenOffer verifies a sealed offer: size, envelope signature over the very
// bytes received, signer = provider field, then the market's rules at now.
// It returns the offer and its signer.
func OpenOffer(b []byte, now time.Time) (*proto.Offer, peer.ID, error) {
	if len(b) > proto.MaxOfferSize {
		return nil, "", fmt.Errorf("%w: %d bytes, limit %d", ErrOfferTooLarge, len(b), proto.MaxOfferSize)
	}
	env, rec, err := record.ConsumeEnvelope(b, proto.OfferDomain)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrOfferEnvelope, err)
	}
	or, ok := rec.(*proto.OfferRecord)
	if !ok || or.Offer == nil {
		return nil, "", fmt.Errorf("%w: payload is %T, not an offer", ErrOfferEnvelope, rec)
	}
	signer, err := peer.IDFromPublicKey(env.PublicKey)
	if err != nil {
		return nil, "", fmt.Errorf("%w: signer key: %v", ErrOfferEnvelope, err)
	}
	if !bytes.Equal(or.Offer.Provider, []byte(signer)) {
		return nil, "", fmt.Errorf("%w: provider field is not the signer %s", ErrOfferSigner, signer)
	}
	if err := market.ValidateOffer(or.Offer, now); err != nil {
		return nil, "", err
	}
	return or.Offer, signer, nil
}

// OfferValidator is the DHT record validator of the /suanli-offer/ namespace.
// Every DHT server must register it, or it refuses the records.
type OfferValidator struct {
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// OnReject, when set, is told the reason of every refused record.
	OnReject func(reason string)
}

var _ record2.Validator = OfferValidator{}

func (v OfferValidator) now() time.Time {
	if v.Now != nil {
		return v.Now()
	}
	return time.Now()
}

// Validate accepts a record only if it is an offer signed by the very peer
// its key names, unexpired and not too far in the future.
func (v OfferValidator) Validate(key string, value []byte) error {
	_, err := v.open(key, value)
	if err != nil && v.OnReject != nil {
		v.OnReject(RejectReason(err))
	}
	return err
}

func (v OfferValidator) open(key string, value []byte) (*proto.Offer, error) {
	p, err := proto.ParseOfferKey(key)
	if err != nil {
		return nil, err
	}
	o, signer, err := OpenOffer(value, v.now())
	if err != nil {
		return nil, err
	}
	if signer != p {
		return nil, fmt.Errorf("%w: key names %s, signed by %s", ErrOfferSigner, p, signer)
	}
	return o, nil
}

// Select picks the offer with the highest seq; among equal seqs the later
// created, then the smaller bytes, so every node picks the same one. Invalid
// values are never selected.
func (v OfferValidator) Select(key string, values [][]byte) (int, error) {
	best := -1
	var bestOffer *proto.Offer
	for i, val := range values {
		o, err := v.open(key, val)
		if err != nil {
			continue
		}
		if best < 0 || newer(o, val, bestOffer, values[best]) {
			best, bestOffer = i, o
		}
	}
	if best < 0 {
		return 0, fmt.Errorf("p2p: no valid offer among %d records for %q", len(values), key)
	}
	return best, nil
}

func newer(a *proto.Offer, ab []byte, b *proto.Offer, bb []byte) bool {
	if a.Seq != b.Seq {
		return a.Seq > b.Seq
	}
	if a.CreatedUnixMs != b.CreatedUnixMs {
		return a.CreatedUnixMs > b.CreatedUnixMs
	}
	return bytes.Compare(ab, bb) < 0
}
