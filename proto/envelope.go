// Package proto holds Suanli's wire schemas (protobuf), the signed-envelope
// domains and payload types of every signed object, and CID and DHT-key helpers.
//
// Files: offer.proto and its generated offer.pb.go (the schemas); envelope.go
// (record types for libp2p signed envelopes); names.go (CIDs and DHT keys).
package proto

import (
	"crypto/sha256"
	"encoding/binary"

	"github.com/libp2p/go-libp2p/core/record"
	gproto "google.golang.org/protobuf/proto"
)

// Envelope domains and payload types. A domain is mixed into every signature,
// so an offer signature can never be replayed as another kind of object.
const (
	OfferDomain = "suanli-offer"
)

// OfferCodec is the payload type of a sealed Offer.
var OfferCodec = []byte("/suanli/offer/1")

// MaxOfferSize bounds a sealed offer envelope; larger records are refused.
const MaxOfferSize = 64 << 10

func init() {
	record.RegisterType(&OfferRecord{})
}

// OfferRecord adapts Offer to record.Record so it can be sealed into and
// consumed from a libp2p signed envelope.
type OfferRecord struct {
	Offer *Offer
}

var _ record.Record = (*OfferRecord)(nil)

// Domain implements record.Record.
func (r *OfferRecord) Domain() string { return OfferDomain }

// Codec implements record.Record.
func (r *OfferRecord) Codec() []byte { return OfferCodec }

// MarshalRecord implements record.Record with deterministic protobuf encoding.
func (r *OfferRecord) MarshalRecord() ([]byte, error) {
	return gproto.MarshalOptions{Deterministic: true}.Marshal(r.Offer)
}

// UnmarshalRecord implements record.Record.
func (r *OfferRecord) UnmarshalRecord(b []byte) error {
	o := new(Offer)
	if err := gproto.Unmarshal(b, o); err != nil {
		return err
	}
	r.Offer = o
	return nil
}

// EvidenceNonce is the nonce a provider's GPUs attest over when it builds the
// offer with the given seq: SHA-256("suanli-offer-evidence" ‖ provider ‖ seq).
// It binds the evidence to one provider, so another cannot copy it.
func EvidenceNonce(provider []byte, seq uint64) []byte {
	h := sha256.New()
	h.Write([]byte("suanli-offer-evidence"))
	h.Write(provider)
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], seq)
	h.Write(b[:])
	return h.Sum(nil)
}
