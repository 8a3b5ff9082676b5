package proto

import "github.com/libp2p/go-libp2p/core/record"

// Envelope domains of resale (see resale.proto).
const (
	HandoverDomain           = "suanli-handover"
	PremiumDomain            = "suanli-premium"
	PremiumCountersignDomain = "suanli-premium-countersign"
)

// Payload types of resale, one per kind.
var (
	HandoverCodec           = []byte("/suanli/handover/1")
	PremiumCodec            = []byte("/suanli/premium/1")
	PremiumCountersignCodec = []byte("/suanli/premium-countersign/1")
)

func (*Handover) EnvelopeDomain() string           { return HandoverDomain }
func (*Handover) EnvelopeCodec() []byte            { return HandoverCodec }
func (*Premium) EnvelopeDomain() string            { return PremiumDomain }
func (*Premium) EnvelopeCodec() []byte             { return PremiumCodec }
func (*PremiumCountersign) EnvelopeDomain() string { return PremiumCountersignDomain }
func (*PremiumCountersign) EnvelopeCodec() []byte  { return PremiumCountersignCodec }

func init() {
	record.RegisterType(&Record[*Handover]{})
	record.RegisterType(&Record[*Premium]{})
	record.RegisterType(&Record[*PremiumCountersign]{})
}
