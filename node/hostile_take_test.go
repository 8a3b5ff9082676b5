package node_test

import (
	"context"
	"crypto/rand"
	"path/filepath"
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

// TestHostileTakeOutOfTurn sends a maker, in the take's place, every
// message that is not a take of its own (other signed kinds, a take
// signed by another key, garbage) and takes it must refuse (someone
// else's or no order, a wrong price, more GPUs than the ask). None holds
// a GPU or changes the ask; a message that is not a take gets no answer
// and is counted bad-envelope, a take that fails the checks gets a signed
// reject. Negative control: a well-formed take trades.
func TestHostileTakeOutOfTurn(t *testing.T) {
	net := startNet(t, 1, 1)
	ctx := marketCtx(t)
	provider := net.Providers[0]
	ask, err := provider.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: h100, Count: 2, Price: "2.40"})
	if err != nil {
		t.Fatal(err)
	}
	const price = 2_400_000
	r := newRawTaker(t, ctx, provider)
	otherKey, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	otherID, _ := peer.IDFromPrivateKey(otherKey)
	takeWith := func(key crypto.PrivKey, taker peer.ID, edit func(*proto.Take)) []byte {
		bid := hostileBid(taker, h100, price)
		bid.TimeInForce = proto.TimeInForce_TIME_IN_FORCE_IOC
		tk := &proto.Take{Taker: []byte(taker), Market: h100, MakerOrderId: ask.ID, TakerOrder: sealT(t, key, bid), Quantity: 1,
			PriceMicros: price, Currency: "USD", LeaseType: proto.LeaseType_LEASE_TYPE_SPOT, DurationS: bid.DurationS,
			CreatedUnixMs: time.Now().UnixMilli()}
		if edit != nil {
			edit(tk)
		}
		return sealT(t, key, tk)
	}
	cases := []struct {
		name   string
		msg    func() []byte
		answer bool   // a signed reject; else no answer at all
		reason string // counted as rejects{kind=take,reason}, when answered
	}{
		{"an accept in the take's place", func() []byte {
			return sealT(t, r.key, &proto.Accept{Maker: []byte(r.id), TakeId: "x", Lease: &proto.Lease{Id: "x"}, CreatedUnixMs: time.Now().UnixMilli()})
		}, false, ""},
		{"a reject in the take's place", func() []byte {
			return sealT(t, r.key, &proto.Reject{Maker: []byte(r.id), TakeId: "x", Reason: "no"})
		}, false, ""},
		{"an order in the take's place", func() []byte { return sealT(t, r.key, hostileBid(r.id, h100, price)) }, false, ""},
		{"a take signed by another key", func() []byte { return takeWith(otherKey, otherID, nil) }, false, ""},
		{"a take naming another taker", func() []byte {
			return takeWith(r.key, r.id, func(tk *proto.Take) { tk.Taker = []byte(otherID) })
		}, false, ""},
		{"garbage", func() []byte { return []byte{0xff, 0x01, 0x02} }, false, ""},
		{"a take of no order", func() []byte {
			return takeWith(r.key, r.id, func(tk *proto.Take) { tk.MakerOrderId = "bafkreinotanorder" })
		}, true, "not-open"},
		{"a take below the ask's price", func() []byte {
			return takeWith(r.key, r.id, func(tk *proto.Take) { tk.PriceMicros = price - 1 })
		}, true, "price"},
		{"a take of more GPUs than the ask", func() []byte {
			return takeWith(r.key, r.id, func(tk *proto.Take) { tk.Quantity = 3 })
		}, true, "quantity"},
		{"a take with another market's bid", func() []byte {
			return takeWith(r.key, r.id, func(tk *proto.Take) {
				bid := hostileBid(r.id, "nvidia-a100-sxm4-40gb", price)
				tk.TakerOrder = sealT(t, r.key, bid)
			})
		}, true, "taker-order"},
	}
	before := rejectsOf(t, ctx, provider, "take")
	unanswered := 0
	for _, c := range cases {
		was := rejectsOf(t, ctx, provider, "take")
		reply, err := p2p.SendTake(ctx, r.host, provider.PeerID(), c.msg())
		switch {
		case c.answer && (err != nil || reply.GetReject() == nil):
			t.Errorf("%s: %v, %v; want a signed reject", c.name, reply, err)
		case c.answer:
			rj, signer, err := p2p.Open[*proto.Reject](reply.GetReject(), proto.MaxBookMessageSize)
			if err != nil || signer != provider.PeerID() {
				t.Errorf("%s: reject does not open as the maker's: %v", c.name, err)
			} else {
				t.Logf("%s: refused: %s", c.name, rj.Reason)
			}
			if now := rejectsOf(t, ctx, provider, "take"); now[c.reason] != was[c.reason]+1 {
				t.Errorf("%s: rejects{kind=take,reason=%q} %v → %v, want one more", c.name, c.reason, was[c.reason], now[c.reason])
			}
		case err == nil:
			t.Errorf("%s: answered %v, want no answer", c.name, reply)
		default:
			unanswered++
		}
		if held, left := provider.HeldGPUs(), remaining(t, ctx, provider, ask.ID); held != 0 || left != 2 {
			t.Fatalf("%s: %d GPUs held, %d left on the ask; want 0 and 2", c.name, held, left)
		}
	}
	after := rejectsOf(t, ctx, provider, "take")
	if got := after["bad-envelope"] - before["bad-envelope"]; got != float64(unanswered) {
		t.Errorf("rejects{kind=take,reason=bad-envelope} rose by %v, want %d", got, unanswered)
	}

	// Negative control: a well-formed take trades.
	if a := r.send(t, ctx, provider, takeWith(r.key, r.id, nil)); a.GetAccept() == nil {
		t.Fatalf("a well-formed take: %v, want an accept", a)
	}
	if held, left := provider.HeldGPUs(), remaining(t, ctx, provider, ask.ID); held != 1 || left != 1 {
		t.Errorf("after a well-formed take: %d GPUs held, %d left; want 1 and 1", held, left)
	}
}

// sealT seals m with key, failing the test on error.
func sealT[M proto.Signed](t *testing.T, key crypto.PrivKey, m M) []byte {
	t.Helper()
	env, err := p2p.Seal(key, m, proto.MaxBookMessageSize)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// TestHostileTakeReplayAfterRestart: a take accepted before the maker
// restarts gets the same accept after it, from the maker's store, and
// holds nothing more: the lease's terms stay as first agreed. Negative
// control: the first take held its GPU, and still does.
func TestHostileTakeReplayAfterRestart(t *testing.T) {
	dir := t.TempDir()
	ctx := marketCtx(t)
	relay, err := node.New(node.WithRepo(filepath.Join(dir, "relay")), node.WithAutoInit(), node.WithListen("/ip4/127.0.0.1/tcp/0"),
		node.WithAPI(""), node.WithLogger(quiet), node.WithoutGPU())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Close() })
	opts := []node.Option{
		node.WithRepo(filepath.Join(dir, "provider")), node.WithAutoInit(), node.WithListen("/ip4/127.0.0.1/tcp/0"),
		node.WithAPI("127.0.0.1:0"), node.WithLogger(quiet), node.WithGPUSim("dgxh100", 1), node.WithRegion("CN-GZ"),
		node.WithPrice("2.40", "USD"), node.WithBootstrap(relay.Addrs()...),
	}
	start := func() *node.Node {
		p, err := node.New(opts...)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, "the provider's offer published", func() (bool, string) { return p.Published() != nil, "" })
		return p
	}
	provider := start()
	ask, err := provider.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: h100, Count: 2, Price: "2.40"})
	if err != nil {
		t.Fatal(err)
	}
	r := newRawTaker(t, ctx, provider)
	take := r.take(t, ask.ID, 1, 2_400_000, time.Now())
	first := r.send(t, ctx, provider, take)
	if first.GetAccept() == nil {
		t.Fatalf("first take: %v, want an accept", first)
	}
	if held := provider.HeldGPUs(); held != 1 {
		t.Fatalf("after one take of 1 GPU: %d held, want 1", held)
	}
	if err := provider.Close(); err != nil {
		t.Fatal(err)
	}

	provider = start()
	t.Cleanup(func() { provider.Close() })
	if err := r.host.Connect(ctx, peer.AddrInfo{ID: provider.PeerID(), Addrs: provider.Host().Addrs()}); err != nil {
		t.Fatal(err)
	}
	before := rejectsOf(t, ctx, provider, "take")
	again := r.send(t, ctx, provider, take)
	if !gproto.Equal(again, first) {
		t.Errorf("replay after a restart answered %v, want the first accept again", again)
	}
	if held := provider.HeldGPUs(); held != 1 {
		t.Errorf("after a replay across a restart: %d GPUs held, want 1", held)
	}
	if got := rejectsOf(t, ctx, provider, "take")["replay"] - before["replay"]; got != 1 {
		t.Errorf("rejects{kind=take,reason=replay} rose by %v, want 1", got)
	}
}
