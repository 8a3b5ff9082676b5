package node_test

import (
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// TestRefusedFillEvidence: a raw peer rests a bid for 1 GPU on a node's
// book, then signs accepts of two takes of it by two other peers. The
// second fill overfills the bid: the node's book refuses it and keeps it
// as evidence against its signers, which a third party can verify.
func TestRefusedFillEvidence(t *testing.T) {
	net := startNet(t, 1, 1)
	ctx := marketCtx(t)
	target := net.Buyers[0]
	if _, err := target.Book(ctx, h100, "USD"); err != nil {
		t.Fatal(err)
	}
	maker := newHostile(t, ctx, target, h100)
	bid := hostileBid(maker.id, h100, 2_000_000)
	bidEnv, err := p2p.Seal(maker.key, bid, proto.MaxBookMessageSize)
	if err != nil {
		t.Fatal(err)
	}
	bidID := proto.CIDOf(bidEnv).String()
	publish := func(m *proto.BookMessage) {
		t.Helper()
		data, err := p2p.MarshalBook(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := maker.topic.Publish(ctx, data); err != nil {
			t.Fatal(err)
		}
	}
	publish(&proto.BookMessage{Body: &proto.BookMessage_Order{Order: bidEnv}})
	waitFor(t, ctx, "the bid in the target's book", func() (bool, string) {
		b, err := target.Book(ctx, h100, "USD")
		return err == nil && len(b.Bids) == 1, sprint(b, err)
	})

	// fill is a take of the bid by a fresh provider key, accepted by the maker.
	fill := func(gpu string) (*proto.Fill, peer.ID) {
		key, _, _ := crypto.GenerateEd25519Key(rand.Reader)
		id, _ := peer.IDFromPrivateKey(key)
		now := time.Now()
		ask := &proto.Order{Maker: []byte(id), Side: proto.Side_SIDE_ASK, Market: h100, Currency: "USD", Quantity: 1,
			PriceMicros: 1_900_000, LeaseType: proto.LeaseType_LEASE_TYPE_SPOT, MinDurationS: 60, MaxDurationS: 7200,
			CreatedUnixMs: now.UnixMilli(), ExpiresUnixMs: now.Add(time.Hour).UnixMilli(), Nonce: uint64(now.UnixNano()),
			TimeInForce: proto.TimeInForce_TIME_IN_FORCE_IOC}
		askEnv, err := p2p.Seal(key, ask, proto.MaxBookMessageSize)
		if err != nil {
			t.Fatal(err)
		}
		take := &proto.Take{Taker: []byte(id), Market: h100, MakerOrderId: bidID, TakerOrder: askEnv, Quantity: 1,
			PriceMicros: bid.PriceMicros, Currency: "USD", LeaseType: proto.LeaseType_LEASE_TYPE_SPOT, DurationS: bid.DurationS,
			CreatedUnixMs: now.UnixMilli(), Gpus: []string{gpu}}
		takeEnv, err := p2p.Seal(key, take, proto.MaxBookMessageSize)
		if err != nil {
			t.Fatal(err)
		}
		takeID := proto.CIDOf(takeEnv).String()
		acc := &proto.Accept{Maker: []byte(maker.id), TakeId: takeID, CreatedUnixMs: now.UnixMilli(), Lease: &proto.Lease{
			Id: takeID, Provider: []byte(id), Buyer: []byte(maker.id), Gpus: []string{gpu}, PriceMicros: bid.PriceMicros,
			Currency: "USD", LeaseType: proto.LeaseType_LEASE_TYPE_SPOT, DurationS: bid.DurationS, BillingIntervalS: 60,
			StartUnixMs: now.UnixMilli(), Market: h100}}
		accEnv, err := p2p.Seal(maker.key, acc, proto.MaxBookMessageSize)
		if err != nil {
			t.Fatal(err)
		}
		return &proto.Fill{Take: takeEnv, Accept: accEnv}, id
	}
	first, _ := fill("GPU-first")
	publish(&proto.BookMessage{Body: &proto.BookMessage_Fill{Fill: first}})
	waitFor(t, ctx, "the first fill to take the bid", func() (bool, string) {
		b, err := target.Book(ctx, h100, "USD")
		return err == nil && len(b.Bids) == 0, sprint(b, err)
	})
	second, seller := fill("GPU-second")
	if _, err := p2p.OpenFill(second, time.Now()); err != nil {
		t.Fatalf("the second fill is not well signed: %v", err)
	}
	publish(&proto.BookMessage{Body: &proto.BookMessage_Fill{Fill: second}})

	var evs []api.EvidenceView
	waitFor(t, ctx, "the overfill kept as evidence against the maker", func() (bool, string) {
		var err error
		evs, err = target.Evidence(ctx, maker.id.String())
		return err == nil && len(evs) == 1, sprint(evs, err)
	})
	e := evs[0]
	if e.Kind != node.EvidenceRefusedFill || !strings.HasPrefix(e.Reason, "overfill") || len(e.Peers) != 2 || e.Peers[1] != seller.String() {
		t.Errorf("evidence = %+v, want a refused overfill signed by the maker and %s", e, seller)
	}
	file, err := target.ExportEvidence(ctx, e.ID)
	if err != nil {
		t.Fatal(err)
	}
	proof, err := node.VerifyEvidence(file)
	if err != nil || !strings.Contains(proof.Proves, "both signed fill") || !strings.Contains(proof.Proves, "overfill") {
		t.Errorf("VerifyEvidence = %+v, %v", proof, err)
	}
}
