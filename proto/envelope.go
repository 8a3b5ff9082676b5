// Package proto holds Suanli's wire schemas (protobuf), the signed-envelope
// domains and payload types of every signed object, and CID and DHT-key helpers.
//
// Files: offer.proto, book.proto, attest.proto and receipt.proto with their
// generated .pb.go (the schemas); envelope.go (the record type that puts
// any signed kind into a libp2p signed envelope, with its domain and
// payload type); receipt_envelope.go (the same for receipts,
// countersignatures and payment acknowledgements); names.go (CIDs and DHT
// keys).
package proto

import (
	"crypto/sha256"
	"encoding/binary"

	"github.com/libp2p/go-libp2p/core/record"
	gproto "google.golang.org/protobuf/proto"
)

// Envelope domains. A domain is mixed into every signature, so a signature
// over one kind of object can never be replayed as another.
const (
	OfferDomain  = "suanli-offer"
	OrderDomain  = "suanli-order"
	CancelDomain = "suanli-cancel"
	TakeDomain   = "suanli-take"
	AcceptDomain = "suanli-accept"
	RejectDomain = "suanli-reject"
)

// Payload types, one per kind.
var (
	OfferCodec  = []byte("/suanli/offer/1")
	OrderCodec  = []byte("/suanli/order/1")
	CancelCodec = []byte("/suanli/cancel/1")
	TakeCodec   = []byte("/suanli/take/1")
	AcceptCodec = []byte("/suanli/accept/1")
	RejectCodec = []byte("/suanli/reject/1")
)

// Size limits of sealed envelopes; larger ones are refused unread.
const (
	MaxOfferSize = 64 << 10
	// MaxBookMessageSize bounds anything on a book topic or trade stream.
	MaxBookMessageSize = 16 << 10
)

// Signed is a message kind that travels in a signed envelope.
type Signed interface {
	gproto.Message
	// EnvelopeDomain is the signature domain of the kind.
	EnvelopeDomain() string
	// EnvelopeCodec is the envelope payload type of the kind.
	EnvelopeCodec() []byte
}

func (*Offer) EnvelopeDomain() string  { return OfferDomain }
func (*Offer) EnvelopeCodec() []byte   { return OfferCodec }
func (*Order) EnvelopeDomain() string  { return OrderDomain }
func (*Order) EnvelopeCodec() []byte   { return OrderCodec }
func (*Cancel) EnvelopeDomain() string { return CancelDomain }
func (*Cancel) EnvelopeCodec() []byte  { return CancelCodec }
func (*Take) EnvelopeDomain() string   { return TakeDomain }
func (*Take) EnvelopeCodec() []byte    { return TakeCodec }
func (*Accept) EnvelopeDomain() string { return AcceptDomain }
func (*Accept) EnvelopeCodec() []byte  { return AcceptCodec }
func (*Reject) EnvelopeDomain() string { return RejectDomain }
func (*Reject) EnvelopeCodec() []byte  { return RejectCodec }

func init() {
	record.RegisterType(&Record[*Offer]{})
	record.RegisterType(&Record[*Order]{})
	record.RegisterType(&Record[*Cancel]{})
	record.RegisterType(&Record[*Take]{})
	record.RegisterType(&Record[*Accept]{})
	record.RegisterType(&Record[*Reject]{})
}

// Record adapts a signed kind to record.Record, so it can be sealed into and
// consumed from a libp2p signed envelope. Marshalling is deterministic.
type Record[M Signed] struct {
	Msg M
}

// OfferRecord is the record of an Offer.
type OfferRecord = Record[*Offer]

// Domain implements record.Record.
func (r *Record[M]) Domain() string { return r.Msg.EnvelopeDomain() }

// Codec implements record.Record.
func (r *Record[M]) Codec() []byte { return r.Msg.EnvelopeCodec() }

// MarshalRecord implements record.Record.
func (r *Record[M]) MarshalRecord() ([]byte, error) {
	return gproto.MarshalOptions{Deterministic: true}.Marshal(r.Msg)
}

// UnmarshalRecord implements record.Record.
func (r *Record[M]) UnmarshalRecord(b []byte) error {
	m := r.Msg.ProtoReflect().Type().New().Interface().(M)
	if err := gproto.Unmarshal(b, m); err != nil {
		return err
	}
	r.Msg = m
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
