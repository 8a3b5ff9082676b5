package proto

import (
	"crypto/sha256"

	"github.com/libp2p/go-libp2p/core/record"
)

// Envelope domains of lease settlement (see receipt.proto). A domain is
// mixed into every signature, so a receipt signature can never be replayed as
// a countersignature or a payment acknowledgement, nor the reverse.
const (
	ReceiptDomain     = "suanli-receipt"
	CountersignDomain = "suanli-countersign"
	PaymentAckDomain  = "suanli-payment-ack"
	PreemptionDomain  = "suanli-preemption"
)

// Payload types of lease settlement, one per kind.
var (
	ReceiptCodec     = []byte("/suanli/receipt/1")
	CountersignCodec = []byte("/suanli/countersign/1")
	PaymentAckCodec  = []byte("/suanli/payment-ack/1")
	PreemptionCodec  = []byte("/suanli/preemption/1")
)

// MaxReceiptSize bounds a sealed Receipt, Countersign or PaymentAck; larger
// ones are refused unread. A receipt carries one usage entry (about 70 bytes)
// per leased GPU, and a lease holds at most 1024 GPUs.
const MaxReceiptSize = 128 << 10

// ReceiptHashSize is the length of a ReceiptHash.
const ReceiptHashSize = sha256.Size

func (*Receipt) EnvelopeDomain() string     { return ReceiptDomain }
func (*Receipt) EnvelopeCodec() []byte      { return ReceiptCodec }
func (*Countersign) EnvelopeDomain() string { return CountersignDomain }
func (*Countersign) EnvelopeCodec() []byte  { return CountersignCodec }
func (*PaymentAck) EnvelopeDomain() string  { return PaymentAckDomain }
func (*PaymentAck) EnvelopeCodec() []byte   { return PaymentAckCodec }
func (*Preemption) EnvelopeDomain() string  { return PreemptionDomain }
func (*Preemption) EnvelopeCodec() []byte   { return PreemptionCodec }

func init() {
	record.RegisterType(&Record[*Receipt]{})
	record.RegisterType(&Record[*Countersign]{})
	record.RegisterType(&Record[*PaymentAck]{})
	record.RegisterType(&Record[*Preemption]{})
}

// ReceiptHash names a receipt: SHA-256 of its sealed envelope bytes, exactly
// as signed and carried. The next receipt's prev_hash and the buyer's
// countersignature both hold it.
func ReceiptHash(envelope []byte) []byte {
	sum := sha256.Sum256(envelope)
	return sum[:]
}
