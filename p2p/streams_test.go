package p2p_test

// Tests of the point-to-point protocols over two real loopback hosts. No
// fixed sleeps: every wait is bounded by a context deadline.

import (
	"bytes"
	"context"
	"crypto/rand"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// bookStreamTimeout bounds every exchange; a hang fails the test instead of
// the whole run.
const bookStreamTimeout = 20 * time.Second

// bookHost starts a TCP host on 127.0.0.1 that the test closes.
func bookHost(t *testing.T) host.Host {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatalf("GenerateEd25519Key: %v", err)
	}
	h, err := p2p.NewHost(p2p.HostConfig{Key: k, Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatalf("NewHost = %v", err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// bookHosts starts two hosts and connects a to b.
func bookHosts(t *testing.T) (a, b host.Host) {
	t.Helper()
	a, b = bookHost(t), bookHost(t)
	ctx := bookCtx(t, bookStreamTimeout)
	if err := a.Connect(ctx, peer.AddrInfo{ID: b.ID(), Addrs: b.Addrs()}); err != nil {
		t.Fatalf("Connect = %v", err)
	}
	return a, b
}

func bookCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// bookRecv waits for a value on ch until ctx ends.
func bookRecv[T any](ctx context.Context, t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		t.Fatalf("waiting for %s: %v", what, ctx.Err())
	}
	panic("unreachable")
}

type bookTakeSeen struct {
	from peer.ID
	take []byte
}

func TestStreamTakeRoundTrip(t *testing.T) {
	tr := bookNewTrade(t, proto.Side_SIDE_BID)
	_, take, accept := tr.seal(t)
	reject := bookSeal(t, tr.maker.key, &proto.Reject{
		Maker: []byte(tr.maker.id), TakeId: proto.CIDOf(take).String(), Reason: "not-resting",
	})
	tests := []struct {
		name  string
		reply *proto.TradeReply
	}{
		{"accept", &proto.TradeReply{Body: &proto.TradeReply_Accept{Accept: accept}}},
		{"reject", &proto.TradeReply{Body: &proto.TradeReply_Reject{Reject: reject}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			taker, maker := bookHosts(t)
			seen := make(chan bookTakeSeen, 1)
			p2p.HandleTakes(maker, func(ctx context.Context, from peer.ID, b []byte) *proto.TradeReply {
				seen <- bookTakeSeen{from, bytes.Clone(b)}
				return tt.reply
			})
			ctx := bookCtx(t, bookStreamTimeout)
			reply, err := p2p.SendTake(ctx, taker, maker.ID(), take)
			if err != nil {
				t.Fatalf("SendTake = %v, want nil", err)
			}
			if !gproto.Equal(reply, tt.reply) {
				t.Errorf("SendTake = %v, want %v", reply, tt.reply)
			}
			got := bookRecv(ctx, t, seen, "the maker's handler")
			if got.from != taker.ID() {
				t.Errorf("handler from = %s, want the taker %s", got.from, taker.ID())
			}
			if !bytes.Equal(got.take, take) {
				t.Errorf("handler take = %x, want %x", got.take, take)
			}
			// An accept that crossed the stream makes a fill every replica takes.
			if a := reply.GetAccept(); a != nil {
				ev, err := p2p.DecodeBook(bookFillMsg(t, take, a), bookMkt, bookNow)
				if err != nil {
					t.Fatalf("DecodeBook(fill of the streamed accept) = %v, want nil", err)
				}
				if want := proto.CIDOf(accept).String(); ev.Fill.ID != want {
					t.Errorf("DecodeBook(fill).Fill.ID = %s, want %s", ev.Fill.ID, want)
				}
			}
		})
	}
}

// TestStreamTakeNoReply: a maker whose handler gives no answer resets the
// stream, and the taker gets an error at once, not at its deadline.
func TestStreamTakeNoReply(t *testing.T) {
	taker, maker := bookHosts(t)
	called := make(chan struct{}, 1)
	p2p.HandleTakes(maker, func(context.Context, peer.ID, []byte) *proto.TradeReply {
		called <- struct{}{}
		return nil
	})
	ctx := bookCtx(t, bookStreamTimeout)
	reply, err := p2p.SendTake(ctx, taker, maker.ID(), []byte("a take"))
	if err == nil {
		t.Fatalf("SendTake = %v, nil; want an error", reply)
	}
	if ctx.Err() != nil {
		t.Errorf("SendTake = %v after its deadline, want an error before it", err)
	}
	bookRecv(ctx, t, called, "the maker's handler")
	t.Logf("SendTake = %v", err)
}

// TestStreamTakeEmpty: an empty take is refused before the handler runs.
func TestStreamTakeEmpty(t *testing.T) {
	taker, maker := bookHosts(t)
	var calls atomic.Int32
	p2p.HandleTakes(maker, func(context.Context, peer.ID, []byte) *proto.TradeReply {
		calls.Add(1)
		return &proto.TradeReply{}
	})
	ctx := bookCtx(t, bookStreamTimeout)
	if reply, err := p2p.SendTake(ctx, taker, maker.ID(), nil); err == nil {
		t.Fatalf("SendTake(empty) = %v, nil; want an error", reply)
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("handler ran %d times for an empty take, want 0", n)
	}
}

// TestStreamTakeSilentMaker: a maker that never answers cannot hold the
// taker past its context deadline.
func TestStreamTakeSilentMaker(t *testing.T) {
	taker, maker := bookHosts(t)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // runs before the hosts close
	p2p.HandleTakes(maker, func(ctx context.Context, _ peer.ID, _ []byte) *proto.TradeReply {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	outer := bookCtx(t, bookStreamTimeout)
	ctx, cancel := context.WithTimeout(outer, 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := p2p.SendTake(ctx, taker, maker.ID(), []byte("a take"))
		done <- err
	}()
	err := bookRecv(outer, t, done, "SendTake to return at its deadline")
	if err == nil {
		t.Fatalf("SendTake to a silent maker = nil, want an error")
	}
	if dl, _ := ctx.Deadline(); time.Now().Before(dl) {
		t.Errorf("SendTake = %v %s before its deadline, want it to wait for the maker", err, time.Until(dl))
	}
}

func TestStreamTakeNoHandler(t *testing.T) {
	taker, maker := bookHosts(t)
	ctx := bookCtx(t, bookStreamTimeout)
	if reply, err := p2p.SendTake(ctx, taker, maker.ID(), []byte("a take")); err == nil {
		t.Fatalf("SendTake to a host without the trade protocol = %v, nil; want an error", reply)
	}
	if _, err := p2p.RequestSync(ctx, taker, maker.ID(), bookMkt); err == nil {
		t.Fatalf("RequestSync to a host without the sync protocol = nil, want an error")
	}
}

// bookSyncMessages are n orders of the maker (distinct nonces), a cancel
// and a fill, as a replica would answer a sync.
func bookSyncMessages(t *testing.T, n int) []*proto.BookMessage {
	maker := bookKey(t, bookMakerSeed)
	var msgs []*proto.BookMessage
	for i := range n {
		o := bookOrder(maker.id, proto.Side_SIDE_ASK)
		o.Nonce = uint64(i)
		o.PriceMicros += int64(i)
		msgs = append(msgs, &proto.BookMessage{Body: &proto.BookMessage_Order{Order: bookSeal(t, maker.key, o)}})
	}
	_, take, accept := bookNewTrade(t, proto.Side_SIDE_BID).seal(t)
	msgs = append(msgs,
		&proto.BookMessage{Body: &proto.BookMessage_Cancel{Cancel: bookSeal(t, maker.key, bookCancel(t, maker))}},
		&proto.BookMessage{Body: &proto.BookMessage_Fill{Fill: &proto.Fill{Take: take, Accept: accept}}},
	)
	return msgs
}

func TestStreamSync(t *testing.T) {
	tests := []struct {
		name string
		n    int // orders besides a cancel and a fill; -1: an empty answer
	}{
		{"empty", -1},
		{"one order, cancel, fill", 1},
		{"200 orders, cancel, fill", 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var msgs []*proto.BookMessage
			if tt.n >= 0 {
				msgs = bookSyncMessages(t, tt.n)
			}
			client, server := bookHosts(t)
			asked := make(chan string, 1)
			p2p.HandleSync(server, func(from peer.ID, market string) ([]*proto.BookMessage, error) {
				if from != client.ID() {
					t.Errorf("sync handler asked by %s, want the client %s", from, client.ID())
				}
				asked <- market
				return msgs, nil
			})
			ctx := bookCtx(t, bookStreamTimeout)
			got, err := p2p.RequestSync(ctx, client, server.ID(), bookMkt)
			if err != nil {
				t.Fatalf("RequestSync = %d messages, %v; want nil error", len(got), err)
			}
			if m := bookRecv(ctx, t, asked, "the sync handler"); m != bookMkt {
				t.Errorf("sync handler market = %q, want %q", m, bookMkt)
			}
			if len(got) != len(msgs) {
				t.Fatalf("RequestSync = %d messages, want %d", len(got), len(msgs))
			}
			for i, m := range msgs {
				if want := bookMarshal(t, m); !bytes.Equal(got[i], want) {
					t.Fatalf("RequestSync[%d] = %x, want %x", i, got[i], want)
				}
				// What a sync brings is verified as if gossiped.
				if _, err := p2p.DecodeBook(got[i], bookMkt, bookNow); err != nil {
					t.Fatalf("DecodeBook(RequestSync[%d]) = %v, want nil", i, err)
				}
			}
		})
	}
}
