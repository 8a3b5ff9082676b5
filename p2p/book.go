package p2p

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"
	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/proto"
)

// BookTopic is the gossipsub topic of a market's order book.
//
// Version 2: messages are signed by their gossip author (StrictSign),
// which version 1 did not do. Version 3: a cancel or a fill may carry a
// maker stamp, which version 2 refused. Versions do not mix.
func BookTopic(market string) string { return "/suanli/book/3/" + market }

// MaxBookGossipSize bounds one gossiped book message: a fill carries two
// envelopes of at most MaxBookMessageSize each, an ask its own and the
// sealed offer that backs it.
const MaxBookGossipSize = 2*proto.MaxBookMessageSize + proto.MaxOfferSize + 1024

// NewPubSub starts gossipsub on a host for the order books. Messages are
// signed by their author, the publishing host (pubsub's StrictSign): a
// book's validator holds every object to its author (an order and a cancel
// are published by their maker, a fill by one of its parties), so one
// peer cannot publish in the name of many keys it makes on the fly and
// spend the per-maker limits of each. Message IDs are the SHA-256 of the
// payload, so the same object relayed by two peers, or published by both
// parties of a fill, is one message. Peer scoring is on (BookScoreParams).
// ctx bounds its life.
func NewPubSub(ctx context.Context, h host.Host) (*pubsub.PubSub, error) {
	params, thresholds := BookScoreParams()
	ps, err := pubsub.NewGossipSub(ctx, h,
		pubsub.WithMessageSignaturePolicy(pubsub.StrictSign),
		pubsub.WithMessageIdFn(func(m *pb.Message) string {
			sum := sha256.Sum256(m.Data)
			return string(sum[:])
		}),
		pubsub.WithPeerScore(params, thresholds),
		pubsub.WithGossipSubParams(BookGossipParams()),
		pubsub.WithMaxMessageSize(MaxBookGossipSize+4096),
		// Orders arrive in bursts when a market opens; validation costs one
		// Ed25519 verify (~85 µs), so a deep queue is cheap and dropping
		// (which pubsub does silently) is what we most want to avoid.
		pubsub.WithValidateQueueSize(1024),
	)
	if err != nil {
		return nil, fmt.Errorf("p2p: gossipsub: %w", err)
	}
	return ps, nil
}

// BookGossipParams are gossipsub's defaults but for the gossip of IHAVEs:
// each heartbeat a node advertises the messages of the last heartbeats to
// Dlazy (6) peers outside its mesh, not to a quarter of them. Delivery is
// the mesh's (each message is pushed to D peers, 6 to 12); IHAVE gossip
// only repairs what a mesh lost, and 6 peers a heartbeat do that. A
// quarter of the peers grows with the network: at 300 nodes, each fill or
// order made every node send ~70 IHAVEs a heartbeat for three heartbeats,
// ~60 000 control messages the network over, most of them for a message
// every receiver already had, and each one handled by the receiver's
// pubsub loop (the CPU a market's trades then waited for).
func BookGossipParams() pubsub.GossipSubParams {
	p := pubsub.DefaultGossipSubParams()
	p.GossipFactor = 0
	return p
}

// BookScoreParams are gossipsub's peer-scoring parameters for book topics.
//
// What they do and why:
//   - InvalidMessageDeliveries (weight -100 per message², decaying to 1% in
//     an hour): a peer that forwards forged, malformed or out-of-bounds book
//     messages (validator Reject) is graylisted after a couple of them. This
//     is the penalty that matters in a market.
//   - FirstMessageDeliveries (weight +1, cap 50): a small reward for peers
//     that bring us new orders first, so useful relays stay in the mesh.
//   - TimeInMesh (0.01/s, cap 1 h): stable neighbours are preferred.
//   - MeshMessageDeliveries is off: market topics are quiet for minutes, and
//     a delivery-rate floor would penalize honest peers for silence.
//   - IP colocation is off: devnets and tests run many peers on 127.0.0.1,
//     and providers behind one NAT are normal for GPU farms.
//   - Behaviour penalty (-10 per broken promise², decaying over 10 min)
//     punishes peers that advertise messages (IHAVE) and never send them.
//
// Thresholds: stop gossiping to a peer below -100, stop publishing to it
// below -200, ignore it entirely below -300; accept peer exchange only from
// peers above 100.
func BookScoreParams() (*pubsub.PeerScoreParams, *pubsub.PeerScoreThresholds) {
	params := &pubsub.PeerScoreParams{
		Topics:                      map[string]*pubsub.TopicScoreParams{},
		AppSpecificScore:            func(peer.ID) float64 { return 0 },
		AppSpecificWeight:           1,
		IPColocationFactorWeight:    0,
		IPColocationFactorThreshold: 1,
		BehaviourPenaltyWeight:      -10,
		BehaviourPenaltyThreshold:   6,
		BehaviourPenaltyDecay:       pubsub.ScoreParameterDecay(10 * time.Minute),
		DecayInterval:               time.Second,
		DecayToZero:                 0.01,
		RetainScore:                 30 * time.Minute,
	}
	thresholds := &pubsub.PeerScoreThresholds{
		GossipThreshold:             -100,
		PublishThreshold:            -200,
		GraylistThreshold:           -300,
		AcceptPXThreshold:           100,
		OpportunisticGraftThreshold: 5,
	}
	return params, thresholds
}

// BookTopicScoreParams are the per-topic parameters, set on each market topic.
func BookTopicScoreParams() *pubsub.TopicScoreParams {
	return &pubsub.TopicScoreParams{
		TopicWeight:                    1,
		TimeInMeshWeight:               0.01,
		TimeInMeshQuantum:              time.Second,
		TimeInMeshCap:                  3600,
		FirstMessageDeliveriesWeight:   1,
		FirstMessageDeliveriesDecay:    pubsub.ScoreParameterDecay(10 * time.Minute),
		FirstMessageDeliveriesCap:      50,
		InvalidMessageDeliveriesWeight: -100,
		InvalidMessageDeliveriesDecay:  pubsub.ScoreParameterDecay(time.Hour),
		MeshMessageDeliveriesWeight:    0,
		MeshFailurePenaltyWeight:       0,
		SkipAtomicValidation:           true,
	}
}

// Reasons a book message is refused by DecodeBook.
var (
	ErrBookSchema = errors.New("p2p: book message malformed")
	ErrBookTopic  = errors.New("p2p: book message for another market")
	ErrBookFill   = errors.New("p2p: fill inconsistent")
	// ErrBookOffer: the offer beside an ask, or the order beside a cancel,
	// does not validate or is not the one it must be.
	ErrBookOffer = errors.New("p2p: attached offer or order invalid")
)

// BookKind says what a BookEvent carries.
type BookKind uint8

// Book event kinds.
const (
	KindOrder BookKind = iota + 1
	KindCancel
	KindFill
)

// BookEvent is a verified book message: every signature checked once, every
// signer shown to have the right to sign what it signed.
type BookEvent struct {
	Kind BookKind
	// Order (KindOrder): the domain order (ID = CID of Envelope), its wire
	// form and envelope. Envelope is the sealed Cancel of a KindCancel.
	Order      *market.Order
	OrderProto *proto.Order
	Envelope   []byte
	// Offer, OfferProvider and OfferEnvelope (an ask's, when it travelled
	// with one): the verified offer, its signer and its sealed bytes. An
	// ask's own offer is signed by its maker; a resale ask's by any
	// provider (the replica checks it is the resold lease's).
	Offer         *proto.Offer
	OfferProvider peer.ID
	OfferEnvelope []byte
	// OfferExpired: the offer beside the ask (Offer) has expired since
	// the ask was made, when it was valid. A replica hands on the offer an
	// ask travelled with for as long as the ask is open, and asks outlive
	// offers (their providers republish): the ask stands on the offer it
	// was made on, as it did on the replicas that got it in time.
	OfferExpired bool
	// Cancel (KindCancel), and the order it withdraws when that travelled
	// with it (verified: signed by the cancel's maker, its ID the one the
	// cancel names; it may have expired) and its sealed bytes.
	Cancel            *proto.Cancel
	CancelledOrder    *market.Order
	CancelledEnvelope []byte
	// Fill (KindFill): the domain fill (ID = CID of the Accept envelope),
	// the lease both parties signed, the Take and the taker's order.
	Fill       *market.Fill
	Lease      *proto.Lease
	Take       *proto.Take
	TakerOrder *market.Order
	Raw        *proto.Fill
	// OfferDigest (an ask's, when it travelled with the digest of its
	// offer instead of the offer): OfferDigestSize bytes, the SHA-256 of
	// the sealed offer, which the replica pulls from the relaying peer
	// when it holds none with this digest (AttachPulled).
	OfferDigest []byte
	// MakerStamp is the stamp that travelled beside the message,
	// StampSize bytes or none: beside an order or a cancel its maker's,
	// beside a fill one of its parties' (StampSigners says whose it can
	// be). Its work is not checked here (StampWork).
	MakerStamp []byte
}

// DecodeBook verifies a book message for the given market at now: size,
// schema, signatures, signer rights, market and the order rules (expiry in
// the future and at most 24 h ahead, price and quantity bounds). It does not
// look at any state; the replica then checks duplicates and offers.
func DecodeBook(data []byte, mkt string, now time.Time) (*BookEvent, error) {
	return (*Verified)(nil).DecodeBook(data, mkt, now)
}

// DecodeBook is the package's DecodeBook with the signatures v checked
// before remembered (see Verified).
func (v *Verified) DecodeBook(data []byte, mkt string, now time.Time) (*BookEvent, error) {
	if len(data) > MaxBookGossipSize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(data), MaxBookGossipSize)
	}
	var msg proto.BookMessage
	if err := gproto.Unmarshal(data, &msg); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBookSchema, err)
	}
	switch body := msg.Body.(type) {
	case *proto.BookMessage_Order:
		o, po, err := v.OpenOrder(body.Order, now)
		if err != nil {
			return nil, err
		}
		if o.Market != mkt {
			return nil, fmt.Errorf("%w: order for %q on the %q topic", ErrBookTopic, o.Market, mkt)
		}
		ev := &BookEvent{Kind: KindOrder, Order: o, OrderProto: po, Envelope: body.Order}
		if n := len(msg.MakerStamp); n > 0 && n != StampSize {
			return nil, fmt.Errorf("%w: maker stamp of %d bytes", ErrBookSchema, n)
		}
		ev.MakerStamp = msg.MakerStamp
		if len(msg.CancelledOrder) > 0 {
			return nil, fmt.Errorf("%w: an order with a cancelled order beside it", ErrBookSchema)
		}
		switch {
		case len(msg.Offer) > 0 && len(msg.OfferDigest) > 0:
			return nil, fmt.Errorf("%w: an offer and an offer digest beside one ask", ErrBookSchema)
		case len(msg.Offer) > 0:
			if err := v.attachOffer(ev, msg.Offer, now); err != nil {
				return nil, err
			}
		case len(msg.OfferDigest) > 0:
			if o.Side != market.Ask {
				return nil, fmt.Errorf("%w: an offer digest beside a bid", ErrBookOffer)
			}
			if len(msg.OfferDigest) != OfferDigestSize {
				return nil, fmt.Errorf("%w: offer digest of %d bytes", ErrBookSchema, len(msg.OfferDigest))
			}
			ev.OfferDigest = msg.OfferDigest
		}
		return ev, nil
	case *proto.BookMessage_Cancel:
		c, signer, err := OpenWith[*proto.Cancel](v, body.Cancel, proto.MaxBookMessageSize)
		if err != nil {
			return nil, err
		}
		if !bytes.Equal(c.Maker, []byte(signer)) {
			return nil, fmt.Errorf("%w: cancel names maker other than its signer %s", ErrSigner, signer)
		}
		if c.Market != mkt {
			return nil, fmt.Errorf("%w: cancel for %q on the %q topic", ErrBookTopic, c.Market, mkt)
		}
		if c.OrderId == "" || len(c.OrderId) > market.MaxOrderIDLen {
			return nil, fmt.Errorf("%w: cancel order id", ErrBookSchema)
		}
		if len(msg.Offer) > 0 || len(msg.OfferDigest) > 0 {
			return nil, fmt.Errorf("%w: a cancel with an offer beside it", ErrBookSchema)
		}
		if n := len(msg.MakerStamp); n > 0 && n != StampSize {
			return nil, fmt.Errorf("%w: maker stamp of %d bytes", ErrBookSchema, n)
		}
		ev := &BookEvent{Kind: KindCancel, Cancel: c, Envelope: body.Cancel, MakerStamp: msg.MakerStamp}
		if len(msg.CancelledOrder) > 0 {
			o, err := v.cancelledOrder(msg.CancelledOrder, c, signer)
			if err != nil {
				return nil, err
			}
			ev.CancelledOrder, ev.CancelledEnvelope = o, msg.CancelledOrder
		}
		return ev, nil
	case *proto.BookMessage_Fill:
		if len(msg.Offer) > 0 || len(msg.OfferDigest) > 0 || len(msg.CancelledOrder) > 0 {
			return nil, fmt.Errorf("%w: a fill with an offer or order beside it", ErrBookSchema)
		}
		if n := len(msg.MakerStamp); n > 0 && n != StampSize {
			return nil, fmt.Errorf("%w: maker stamp of %d bytes", ErrBookSchema, n)
		}
		ev, err := v.OpenFill(body.Fill, now)
		if err != nil {
			return nil, err
		}
		ev.MakerStamp = msg.MakerStamp
		if ev.Fill.Market != mkt {
			return nil, fmt.Errorf("%w: fill for %q on the %q topic", ErrBookTopic, ev.Fill.Market, mkt)
		}
		return ev, nil
	}
	return nil, fmt.Errorf("%w: empty body", ErrBookSchema)
}

// attachOffer verifies the offer that travelled beside the ask of ev and
// records it there: a sealed offer signed by the ask's maker (by anyone
// for a resale ask), valid now (OpenOffer at now) or, when it has expired
// since, valid while the ask was open (OfferExpired): when the ask was
// made, or when the offer was, if later (its provider refreshed it).
// An ask is checked against the offer it travels with wherever and
// whenever it arrives, so every replica decides the same: one that gets
// it late, by sync, after the offer's provider republished or left,
// accepts it as the replicas that got it on gossip did. It may outlive
// that offer by MaxOrderTTL at most, as any ask may outlive the offer
// current when it was made.
func (v *Verified) attachOffer(ev *BookEvent, env []byte, now time.Time) error {
	if ev.Order.Side != market.Ask {
		return fmt.Errorf("%w: an offer beside a bid", ErrBookOffer)
	}
	oe, err := v.openOffer(env, now)
	if errors.Is(err, market.ErrOfferExpired) {
		oe, err = v.openOfferAt(env, func(o *proto.Offer) time.Time {
			at := max(ev.Order.Created.UnixMilli(), o.CreatedUnixMs) // up to MaxClockSkew ahead of now (OpenOrder)
			return time.UnixMilli(min(at, now.UnixMilli()))
		})
		if err == nil {
			ev.OfferExpired = true
			if end := time.UnixMilli(oe.offer.ExpiresUnixMs).Add(market.MaxOrderTTL); ev.Order.Expires.After(end) {
				return fmt.Errorf("%w: ask expires %s, more than %s after its offer", ErrBookOffer,
					ev.Order.Expires.UTC().Format(time.RFC3339), market.MaxOrderTTL)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBookOffer, err)
	}
	// The interned offer and bytes: one copy however many asks carry it.
	o, signer, env := oe.offer, oe.signer, oe.env
	if len(ev.OrderProto.GetResell()) == 0 && signer.String() != ev.Order.Maker {
		return fmt.Errorf("%w: offer signed by %s beside an ask of %s", ErrBookOffer, signer, ev.Order.Maker)
	}
	ev.Offer, ev.OfferProvider, ev.OfferEnvelope = o, signer, env
	return nil
}

// AttachPulled verifies a sealed offer pulled for the ask of ev, which
// travelled with the offer's digest (ev.OfferDigest), and records it there
// as attachOffer would: the offer must be the one the digest names (the
// ask's author signed the digest) and pass attachOffer's checks.
func (v *Verified) AttachPulled(ev *BookEvent, env []byte, now time.Time) error {
	if ev.Kind != KindOrder || len(ev.OfferDigest) != OfferDigestSize {
		return fmt.Errorf("%w: no offer digest beside the order", ErrBookOffer)
	}
	if d := OfferDigest(env); !bytes.Equal(d[:], ev.OfferDigest) {
		return fmt.Errorf("%w: pulled offer does not match the ask's digest", ErrBookOffer)
	}
	return v.attachOffer(ev, env, now)
}

// cancelledOrder verifies the order that travelled beside cancel c signed
// by signer: signed by the same maker, and the very order c names. Its
// expiry is not checked: a cancel outlives nothing but its order.
func (v *Verified) cancelledOrder(env []byte, c *proto.Cancel, signer peer.ID) (*market.Order, error) {
	po, osigner, err := OpenWith[*proto.Order](v, env, proto.MaxBookMessageSize)
	if err != nil {
		return nil, fmt.Errorf("%w: cancelled order: %w", ErrBookOffer, err)
	}
	if osigner != signer || !bytes.Equal(po.Maker, []byte(signer)) {
		return nil, fmt.Errorf("%w: cancelled order not the cancel's maker's", ErrBookOffer)
	}
	o, err := OrderFromProto(po)
	if err != nil {
		return nil, fmt.Errorf("%w: cancelled order: %w", ErrBookOffer, err)
	}
	o.ID = proto.CIDOf(env).String()
	if o.ID != c.OrderId || o.Market != c.Market {
		return nil, fmt.Errorf("%w: cancel names order %s, not the one beside it", ErrBookOffer, c.OrderId)
	}
	return o, nil
}

// OpenOrder verifies a sealed order and converts it to the market's form
// with ID = CID of the envelope. It checks the signer is the maker and the
// market's order rules at now.
func OpenOrder(env []byte, now time.Time) (*market.Order, *proto.Order, error) {
	return (*Verified)(nil).OpenOrder(env, now)
}

// OpenOrder is the package's OpenOrder with the signatures v checked
// before remembered (see Verified).
func (v *Verified) OpenOrder(env []byte, now time.Time) (*market.Order, *proto.Order, error) {
	po, signer, err := OpenWith[*proto.Order](v, env, proto.MaxBookMessageSize)
	if err != nil {
		return nil, nil, err
	}
	if !bytes.Equal(po.Maker, []byte(signer)) {
		return nil, nil, fmt.Errorf("%w: order names maker other than its signer %s", ErrSigner, signer)
	}
	o, err := OrderFromProto(po)
	if err != nil {
		return nil, nil, err
	}
	o.ID = proto.CIDOf(env).String()
	if err := o.Validate(now); err != nil {
		return nil, nil, err
	}
	return o, po, nil
}

// OpenFill verifies a fill: the Take signed by its taker, the Accept signed
// by its maker and naming that very Take, the taker's order inside the Take
// signed by the taker, the lease between exactly those two parties at the
// Take's price and quantity.
func OpenFill(f *proto.Fill, now time.Time) (*BookEvent, error) {
	return (*Verified)(nil).OpenFill(f, now)
}

// OpenFill is the package's OpenFill with the signatures v checked before
// remembered (see Verified): a party to the fill checks only the other
// party's signature.
func (v *Verified) OpenFill(f *proto.Fill, now time.Time) (*BookEvent, error) {
	if f == nil {
		return nil, fmt.Errorf("%w: empty fill", ErrBookSchema)
	}
	take, taker, err := OpenWith[*proto.Take](v, f.Take, proto.MaxBookMessageSize)
	if err != nil {
		return nil, fmt.Errorf("fill take: %w", err)
	}
	acc, maker, err := OpenWith[*proto.Accept](v, f.Accept, proto.MaxBookMessageSize)
	if err != nil {
		return nil, fmt.Errorf("fill accept: %w", err)
	}
	if !bytes.Equal(take.Taker, []byte(taker)) || !bytes.Equal(acc.Maker, []byte(maker)) {
		return nil, fmt.Errorf("%w: fill take or accept names another signer", ErrSigner)
	}
	if taker == maker {
		return nil, fmt.Errorf("%w: taker and maker are the same peer", ErrBookFill)
	}
	if acc.TakeId != proto.CIDOf(f.Take).String() {
		return nil, fmt.Errorf("%w: accept names take %s, not this one", ErrBookFill, acc.TakeId)
	}
	// The taker's order was valid when the take was made; a fill may be
	// gossiped after the order expired, so only its signature matters here.
	tpo, tsigner, err := OpenWith[*proto.Order](v, take.TakerOrder, proto.MaxBookMessageSize)
	if err != nil {
		return nil, fmt.Errorf("fill taker order: %w", err)
	}
	if tsigner != taker {
		return nil, fmt.Errorf("%w: taker order signed by %s, not the taker %s", ErrSigner, tsigner, taker)
	}
	if !bytes.Equal(tpo.Maker, []byte(taker)) {
		return nil, fmt.Errorf("%w: taker order names another maker than its signer %s", ErrSigner, taker)
	}
	to, err := OrderFromProto(tpo)
	if err != nil {
		return nil, err
	}
	to.ID = proto.CIDOf(take.TakerOrder).String()
	l := acc.Lease
	if l == nil {
		return nil, fmt.Errorf("%w: accept without lease", ErrBookFill)
	}
	lt, err := leaseTypeFromProto(l.LeaseType)
	if err != nil {
		return nil, err
	}
	buyer, provider := taker, maker
	if to.Side == market.Ask {
		buyer, provider = maker, taker
	}
	switch {
	case !bytes.Equal(l.Buyer, []byte(buyer)) || !bytes.Equal(l.Provider, []byte(provider)):
		return nil, fmt.Errorf("%w: lease parties are not the taker and maker", ErrBookFill)
	case take.Market != to.Market || l.Market != to.Market:
		return nil, fmt.Errorf("%w: market differs between take, order and lease", ErrBookFill)
	case l.PriceMicros != take.PriceMicros || l.Currency != take.Currency || take.Currency != to.Currency:
		return nil, fmt.Errorf("%w: lease price differs from the take", ErrBookFill)
	case take.Quantity == 0 || int(take.Quantity) != len(l.Gpus):
		return nil, fmt.Errorf("%w: %d GPUs leased for a take of %d", ErrBookFill, len(l.Gpus), take.Quantity)
	case take.PriceMicros <= 0 || take.PriceMicros > market.MaxPriceMicros:
		return nil, fmt.Errorf("%w: price %d", ErrBookFill, take.PriceMicros)
	case l.Id != acc.TakeId:
		return nil, fmt.Errorf("%w: lease id is not the take id", ErrBookFill)
	case take.Quantity > to.Quantity || take.Quantity > market.MaxOrderQuantity:
		return nil, fmt.Errorf("%w: take of %d GPUs for an order of %d", ErrBookFill, take.Quantity, to.Quantity)
	case l.LeaseType != take.LeaseType || l.DurationS != take.DurationS:
		return nil, fmt.Errorf("%w: lease type or duration differs from the take", ErrBookFill)
	case take.MakerOrderId == "" || len(take.MakerOrderId) > market.MaxOrderIDLen || take.MakerOrderId == to.ID:
		return nil, fmt.Errorf("%w: maker order id %q", ErrBookFill, take.MakerOrderId)
	case len(take.Gpus) > 0 && !slices.Equal(take.Gpus, l.Gpus):
		return nil, fmt.Errorf("%w: lease GPUs differ from the GPUs the provider took with", ErrBookFill)
	}
	if _, err := market.LookupCurrency(take.Currency); err != nil {
		return nil, err
	}
	if (to.Side == market.Bid && take.PriceMicros > to.Price) || (to.Side == market.Ask && take.PriceMicros < to.Price) {
		return nil, fmt.Errorf("%w: trade price %d outside the taker's limit %d", ErrBookFill, take.PriceMicros, to.Price)
	}
	fill := &market.Fill{
		ID:        proto.CIDOf(f.Accept).String(),
		Market:    to.Market,
		Currency:  to.Currency,
		Quantity:  take.Quantity,
		Price:     take.PriceMicros,
		LeaseType: lt,
		Time:      time.UnixMilli(acc.CreatedUnixMs),
		Buyer:     buyer.String(),
		Provider:  provider.String(),
	}
	if to.Side == market.Bid {
		fill.BidID, fill.AskID = to.ID, take.MakerOrderId
	} else {
		fill.BidID, fill.AskID = take.MakerOrderId, to.ID
	}
	if fill.Time.Sub(now) > market.MaxClockSkew {
		return nil, fmt.Errorf("%w: fill from %s in the future", ErrBookFill, fill.Time)
	}
	// A book remembers applied fill IDs for MaxOrderTTL after the fill's
	// time; an older (or backdated) fill could be replayed once forgotten.
	if fill.Time.Before(time.UnixMilli(take.CreatedUnixMs)) || now.Sub(fill.Time) > market.MaxOrderTTL {
		return nil, fmt.Errorf("%w: fill from %s is before its take or older than books remember fills", ErrBookFill, fill.Time)
	}
	return &BookEvent{Kind: KindFill, Fill: fill, Lease: l, Take: take, TakerOrder: to, Raw: f}, nil
}

// OrderFromProto converts a wire order to the market's form (without ID).
func OrderFromProto(po *proto.Order) (*market.Order, error) {
	maker, err := peer.IDFromBytes(po.Maker)
	if err != nil {
		return nil, fmt.Errorf("%w: maker: %v", ErrBookSchema, err)
	}
	o := &market.Order{
		Maker:       maker.String(),
		Market:      po.Market,
		Currency:    po.Currency,
		Quantity:    po.Quantity,
		Price:       po.PriceMicros,
		MinDuration: time.Duration(po.MinDurationS) * time.Second,
		MaxDuration: time.Duration(po.MaxDurationS) * time.Second,
		Duration:    time.Duration(po.DurationS) * time.Second,
		Created:     time.UnixMilli(po.CreatedUnixMs),
		Expires:     time.UnixMilli(po.ExpiresUnixMs),
		Nonce:       po.Nonce,
		PostOnly:    po.PostOnly,
		AllOrNone:   po.AllOrNone,
		ClientKey:   po.ClientKey,
	}
	if po.StartUnixMs != 0 {
		o.Start = time.UnixMilli(po.StartUnixMs)
	}
	switch po.Side {
	case proto.Side_SIDE_BID:
		o.Side = market.Bid
	case proto.Side_SIDE_ASK:
		o.Side = market.Ask
	default:
		return nil, fmt.Errorf("%w: side %v", ErrBookSchema, po.Side)
	}
	switch po.TimeInForce {
	case proto.TimeInForce_TIME_IN_FORCE_GTC:
		o.TimeInForce = market.GTC
	case proto.TimeInForce_TIME_IN_FORCE_IOC:
		o.TimeInForce = market.IOC
	default:
		return nil, fmt.Errorf("%w: time in force %v", ErrBookSchema, po.TimeInForce)
	}
	if o.LeaseType, err = leaseTypeFromProto(po.LeaseType); err != nil {
		return nil, err
	}
	if c := po.Constraints; c != nil {
		o.Constraints.Regions = c.Regions
		o.Constraints.MinAttestation = c.MinAttestation
		o.Constraints.MinMemoryBytes = c.MinMemoryBytes
		for _, lt := range c.LeaseTypes {
			t, err := leaseTypeFromProto(lt)
			if err != nil {
				return nil, err
			}
			o.Constraints.LeaseTypes = append(o.Constraints.LeaseTypes, t)
		}
	}
	return o, nil
}

// LeaseTypeToProto converts a market lease type to its wire form.
func LeaseTypeToProto(t market.LeaseType) proto.LeaseType {
	switch t {
	case market.Spot:
		return proto.LeaseType_LEASE_TYPE_SPOT
	case market.OnDemand:
		return proto.LeaseType_LEASE_TYPE_ON_DEMAND
	case market.Reserved:
		return proto.LeaseType_LEASE_TYPE_RESERVED
	}
	return proto.LeaseType_LEASE_TYPE_UNSPECIFIED
}

func leaseTypeFromProto(t proto.LeaseType) (market.LeaseType, error) {
	switch t {
	case proto.LeaseType_LEASE_TYPE_SPOT:
		return market.Spot, nil
	case proto.LeaseType_LEASE_TYPE_ON_DEMAND:
		return market.OnDemand, nil
	case proto.LeaseType_LEASE_TYPE_RESERVED:
		return market.Reserved, nil
	}
	return 0, fmt.Errorf("%w: lease type %v", ErrBookSchema, t)
}

// BookReason is a short label for why a book message was refused.
func BookReason(err error) string {
	switch {
	case errors.Is(err, ErrBookOffer):
		return "bad-offer"
	case errors.Is(err, ErrTooLarge):
		return "too-large"
	case errors.Is(err, ErrEnvelope):
		return "bad-envelope"
	case errors.Is(err, ErrSigner):
		return "wrong-signer"
	case errors.Is(err, ErrBookSchema):
		return "schema"
	case errors.Is(err, ErrBookTopic):
		return "wrong-topic"
	case errors.Is(err, ErrBookFill):
		return "bad-fill"
	}
	return market.Reason(err)
}

// MarshalBook encodes a book message deterministically for gossip.
func MarshalBook(m *proto.BookMessage) ([]byte, error) { return marshalBook(m) }

func marshalBook(m *proto.BookMessage) ([]byte, error) {
	return gproto.MarshalOptions{Deterministic: true}.Marshal(m)
}

// StampSigners are the identities whose maker stamp may travel beside
// msg: the signer of an order or of a cancel (its maker), both signers of
// a fill (its take's and its accept's: the two parties). They are read
// from the envelopes without verifying anything, so that a replica can
// decide whether to look at a message before it spends a verify on it;
// DecodeBook checks the signatures after, and that an order's or a
// cancel's signer is its maker. Nil for a message without a body or with
// an envelope that does not parse.
func StampSigners(msg *proto.BookMessage) []peer.ID {
	signer := func(env []byte) (peer.ID, bool) {
		e, err := record.UnmarshalEnvelope(env)
		if err != nil {
			return "", false
		}
		id, err := peer.IDFromPublicKey(e.PublicKey)
		return id, err == nil
	}
	var envs [][]byte
	switch body := msg.GetBody().(type) {
	case *proto.BookMessage_Order:
		envs = [][]byte{body.Order}
	case *proto.BookMessage_Cancel:
		envs = [][]byte{body.Cancel}
	case *proto.BookMessage_Fill:
		envs = [][]byte{body.Fill.GetTake(), body.Fill.GetAccept()}
	}
	var out []peer.ID
	for _, env := range envs {
		id, ok := signer(env)
		if !ok {
			return nil
		}
		out = append(out, id)
	}
	return out
}
