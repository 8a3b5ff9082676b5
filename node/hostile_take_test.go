package node_test

import (
	"context"
	"crypto/rand"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// rawTaker is a raw libp2p host with its own key, outside any node,
// connected to one maker: it signs and sends takes as it likes.
type rawTaker struct {
	key  crypto.PrivKey
	id   peer.ID
	host host.Host
}

func newRawTaker(t *testing.T, ctx context.Context, maker *node.Node) *rawTaker {
	t.Helper()
	key, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	h, err := p2p.NewHost(p2p.HostConfig{Key: key, Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	if err := h.Connect(ctx, peer.AddrInfo{ID: maker.PeerID(), Addrs: maker.Host().Addrs()}); err != nil {
		t.Fatal(err)
	}
	return &rawTaker{key: key, id: h.ID(), host: h}
}

// take is a signed take of qty GPUs of ask at price micro-units, with the
// taker's own IOC bid, created at created.
func (r *rawTaker) take(t *testing.T, ask string, qty uint32, price int64, created time.Time) []byte {
	t.Helper()
	bid := hostileBid(r.id, h100, price)
	bid.Quantity, bid.TimeInForce = qty, proto.TimeInForce_TIME_IN_FORCE_IOC
	bidEnv, err := p2p.Seal(r.key, bid, proto.MaxBookMessageSize)
	if err != nil {
		t.Fatal(err)
	}
	tk := &proto.Take{
		Taker: []byte(r.id), Market: h100, MakerOrderId: ask, TakerOrder: bidEnv, Quantity: qty,
		PriceMicros: price, Currency: "USD", LeaseType: proto.LeaseType_LEASE_TYPE_SPOT,
		DurationS: bid.DurationS, CreatedUnixMs: created.UnixMilli(),
	}
	env, err := p2p.Seal(r.key, tk, proto.MaxBookMessageSize)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// send sends a take to maker and returns the reply.
func (r *rawTaker) send(t *testing.T, ctx context.Context, maker *node.Node, take []byte) *proto.TradeReply {
	t.Helper()
	reply, err := p2p.SendTake(ctx, r.host, maker.PeerID(), take)
	if err != nil {
		t.Fatalf("send take: %v", err)
	}
	return reply
}

// remaining is what is left of a node's own order.
func remaining(t *testing.T, ctx context.Context, n *node.Node, id string) uint32 {
	t.Helper()
	o, err := n.Order(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return o.Remaining
}

// TestHostileTakeReplay: a raw peer takes 1 GPU of a 4-GPU ask and then
// sends the same signed take again, in turn and four at once. Every
// replay gets the first accept, byte for byte, and costs the provider
// nothing: 1 GPU held, 3 left on the ask, each replay counted as
// rejects{kind="take",reason="replay"}. A stale take and one from the
// future are refused and hold nothing. Negative control: a new take of
// the same peer is accepted and holds one more GPU.
func TestHostileTakeReplay(t *testing.T) {
	net := startNet(t, 1, 1)
	ctx := marketCtx(t)
	provider := net.Providers[0]
	if provider.APIAddr() == "" {
		t.Fatal("devnet node has no API")
	}
	ask, err := provider.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: h100, Count: 4, Price: "2.40"})
	if err != nil {
		t.Fatal(err)
	}
	const price = 2_400_000
	if held := provider.HeldGPUs(); held != 0 {
		t.Fatalf("provider holds %d GPUs before any take", held)
	}
	before := rejectsOf(t, ctx, provider, "take")
	r := newRawTaker(t, ctx, provider)

	take := r.take(t, ask.ID, 1, price, time.Now())
	first := r.send(t, ctx, provider, take)
	if first.GetAccept() == nil {
		t.Fatalf("first take: %v, want an accept", first)
	}
	if held, left := provider.HeldGPUs(), remaining(t, ctx, provider, ask.ID); held != 1 || left != 3 {
		t.Fatalf("after one take of 1 GPU: %d held, %d left on the ask; want 1 and 3", held, left)
	}

	// The same take again: in turn, then four at once.
	replays := 1
	again := r.send(t, ctx, provider, take)
	if !gproto.Equal(again, first) {
		t.Errorf("replay answered %v, want the first accept again", again)
	}
	var wg sync.WaitGroup
	answers := make([]*proto.TradeReply, 4)
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if a, err := p2p.SendTake(ctx, r.host, provider.PeerID(), take); err == nil {
				answers[i] = a
			}
		}()
	}
	wg.Wait()
	for i, a := range answers {
		if !gproto.Equal(a, first) {
			t.Errorf("concurrent replay %d answered %v, want the first accept again", i, a)
		}
	}
	replays += len(answers)
	if held, left := provider.HeldGPUs(), remaining(t, ctx, provider, ask.ID); held != 1 || left != 3 {
		t.Errorf("after %d replays: %d GPUs held, %d left on the ask; want 1 and 3", replays, held, left)
	}

	// Stale and future takes: refused, counted, nothing held.
	for _, c := range []struct {
		name    string
		created time.Time
	}{
		{"stale", time.Now().Add(-market.MaxClockSkew - 10*time.Second)},
		{"future", time.Now().Add(market.MaxClockSkew + 10*time.Second)},
	} {
		a := r.send(t, ctx, provider, r.take(t, ask.ID, 1, price, c.created))
		if a.GetReject() == nil {
			t.Errorf("%s take: %v, want a reject", c.name, a)
		}
	}
	if held, left := provider.HeldGPUs(), remaining(t, ctx, provider, ask.ID); held != 1 || left != 3 {
		t.Errorf("after stale takes: %d GPUs held, %d left on the ask; want 1 and 3", held, left)
	}
	after := rejectsOf(t, ctx, provider, "take")
	if got := after["replay"] - before["replay"]; got != float64(replays) {
		t.Errorf("rejects{kind=take,reason=replay} rose by %v, want %d", got, replays)
	}
	if got := after["stale"] - before["stale"]; got != 2 {
		t.Errorf("rejects{kind=take,reason=stale} rose by %v, want 2", got)
	}

	// Negative control: a new take of the same peer trades.
	second := r.send(t, ctx, provider, r.take(t, ask.ID, 1, price, time.Now()))
	if second.GetAccept() == nil {
		t.Fatalf("a new take: %v, want an accept", second)
	}
	if held, left := provider.HeldGPUs(), remaining(t, ctx, provider, ask.ID); held != 2 || left != 2 {
		t.Errorf("after a second take: %d GPUs held, %d left on the ask; want 2 and 2", held, left)
	}
}
