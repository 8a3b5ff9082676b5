package p2p

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	record2 "github.com/libp2p/go-libp2p-record"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/proto"
)

// Reasons a signed object is refused before the market rules look at it.
var (
	// ErrTooLarge is returned when an envelope exceeds its kind's size limit.
	ErrTooLarge = errors.New("p2p: signed object too large")
	// ErrEnvelope is returned when bytes are not a valid signed envelope of
	// the expected kind: malformed, bad signature, other domain or type.
	ErrEnvelope = errors.New("p2p: envelope invalid")
	// ErrSigner is returned when an object is signed by a peer other than
	// the one it names (an offer's provider, an order's maker...).
	ErrSigner = errors.New("p2p: signed by the wrong peer")

	// Offer-specific names kept for readability at call sites.
	ErrOfferTooLarge = ErrTooLarge
	ErrOfferEnvelope = ErrEnvelope
	ErrOfferSigner   = ErrSigner
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
	return Seal(key, o, proto.MaxOfferSize)
}

// OpenOffer verifies a sealed offer: size, envelope signature over the very
// bytes received, signer = provider field, then the market's rules at now.
// It returns the offer and its signer. The offer is shared with every
// other caller that opened the same bytes (intern.go): do not modify it.
func OpenOffer(b []byte, now time.Time) (*proto.Offer, peer.ID, error) {
	return (*Verified)(nil).OpenOffer(b, now)
}

// OpenOffer is the package's OpenOffer with the signatures v checked
// before remembered (see Verified): an offer seen before costs a hash and
// its rules at now, not a verify.
func (v *Verified) OpenOffer(b []byte, now time.Time) (*proto.Offer, peer.ID, error) {
	e, err := v.openOffer(b, now)
	if err != nil {
		return nil, "", err
	}
	return e.offer, e.signer, nil
}

// openOffer is OpenOffer, interned: the signature is checked as this
// node would (v: once per node; a nil v: every time), so the nodes of a
// simulation do not share verifies; only the decoded offer and its bytes
// are shared.
func (v *Verified) openOffer(b []byte, now time.Time) (*openedOffer, error) {
	return v.openOfferAt(b, func(*proto.Offer) time.Time { return now })
}

// openOfferAt is openOffer with the offer checked at the time at gives
// for it.
func (v *Verified) openOfferAt(b []byte, at func(*proto.Offer) time.Time) (*openedOffer, error) {
	o, signer, err := OpenWith[*proto.Offer](v, b, proto.MaxOfferSize)
	if err != nil {
		return nil, err
	}
	key := sha256.Sum256(b)
	e := internedOffer(key, b)
	if e == nil {
		e = &openedOffer{env: b, offer: o, signer: signer}
		if err := checkOffer(e, at(o)); err != nil {
			return nil, err
		}
		return internOffer(key, b, o, signer), nil
	}
	if err := checkOffer(e, at(e.offer)); err != nil {
		return nil, err
	}
	return e, nil
}

// checkOffer checks an opened offer against its signer and the market's
// rules at now.
func checkOffer(e *openedOffer, now time.Time) error {
	o := e.offer
	if !bytes.Equal(o.Provider, []byte(e.signer)) {
		return fmt.Errorf("%w: provider field is not the signer %s", ErrOfferSigner, e.signer)
	}
	if err := market.ValidateOffer(o, now); err != nil {
		return err
	}
	if _, ok := proto.IsolationLevel_name[int32(o.Isolation)]; !ok {
		return fmt.Errorf("%w: isolation level %d is none of the known levels", market.ErrOfferSchema, o.Isolation)
	}
	return nil
}

// OfferValidator is the DHT record validator of the /suanli-offer/ namespace.
// Every DHT server must register it, or it refuses the records.
type OfferValidator struct {
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// OnReject, when set, is told the reason of every refused record.
	OnReject func(reason string)
	// Verified, when set, is the node's cache of checked signatures: a
	// record validated before (a put of the same offer, the old record
	// beside a new one in Select) costs a hash.
	Verified *Verified
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
	o, signer, err := v.Verified.OpenOffer(value, v.now())
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
