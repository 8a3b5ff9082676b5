package p2p

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio/pbio"
	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/proto"
)

// Point-to-point protocols.
const (
	// TradeProtocol carries one Take and its TradeReply per stream.
	TradeProtocol = protocol.ID("/suanli/trade/1.0.0")
	// SyncProtocol carries one SyncRequest and the open orders and recent
	// fills of the market as a stream of BookMessages. 2.0.0: only
	// stamped makers' elements, each with its stamp beside it (package
	// exchange, carry.go); 1.0.0 carried all and refused a stamp beside a
	// cancel or a fill.
	SyncProtocol = protocol.ID("/suanli/book-sync/2.0.0")
)

// TradeTimeout bounds a whole take exchange on the maker's side; takers use
// their context, typically shorter, and skip makers that do not answer.
const TradeTimeout = 10 * time.Second

// Bounds on one sync answer, kept by both sides: at most maxSyncMessages
// messages and MaxSyncBytes bytes of them. A replica holds at most
// market.MaxRestingOrders orders and exchange.MaxRecentFills fills of a
// book, far below either.
const (
	maxSyncMessages = 20000
	MaxSyncBytes    = 16 << 20
)

// ErrSyncTooLarge is returned by RequestSync, with what it read, when an
// answer goes past MaxSyncBytes.
var ErrSyncTooLarge = errors.New("p2p: sync answer too large")

// TakeHandler answers a Take (its envelope bytes) from a peer.
type TakeHandler func(ctx context.Context, from peer.ID, take []byte) *proto.TradeReply

// HandleTakes serves TradeProtocol on h with fn.
func HandleTakes(h host.Host, fn TakeHandler) {
	h.SetStreamHandler(TradeProtocol, func(s network.Stream) {
		defer s.Close()
		s.SetDeadline(time.Now().Add(TradeTimeout))
		r := pbio.NewDelimitedReader(s, proto.MaxBookMessageSize+1024)
		var req proto.TradeRequest
		if err := r.ReadMsg(&req); err != nil || len(req.Take) == 0 {
			s.Reset()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), TradeTimeout)
		defer cancel()
		reply := fn(ctx, s.Conn().RemotePeer(), req.Take)
		if reply == nil {
			s.Reset()
			return
		}
		if err := pbio.NewDelimitedWriter(s).WriteMsg(reply); err != nil {
			s.Reset()
		}
	})
}

// ErrNoReply is returned when a maker closes a trade stream without answering.
var ErrNoReply = errors.New("p2p: maker did not answer the take")

// SendTake sends a sealed Take to the maker and waits for its reply.
func SendTake(ctx context.Context, h host.Host, maker peer.ID, take []byte) (*proto.TradeReply, error) {
	s, err := h.NewStream(ctx, maker, TradeProtocol)
	if err != nil {
		return nil, fmt.Errorf("p2p: open trade stream: %w", err)
	}
	defer s.Close()
	if dl, ok := ctx.Deadline(); ok {
		s.SetDeadline(dl)
	}
	if err := pbio.NewDelimitedWriter(s).WriteMsg(&proto.TradeRequest{Take: take}); err != nil {
		s.Reset()
		return nil, fmt.Errorf("p2p: send take: %w", err)
	}
	s.CloseWrite()
	var reply proto.TradeReply
	if err := pbio.NewDelimitedReader(s, 2*proto.MaxBookMessageSize).ReadMsg(&reply); err != nil {
		s.Reset()
		if errors.Is(err, io.EOF) || errors.Is(err, network.ErrReset) {
			return nil, fmt.Errorf("%w: %v", ErrNoReply, err)
		}
		return nil, fmt.Errorf("p2p: read trade reply: %w", err)
	}
	return &reply, nil
}

// SyncHandler returns the book messages (open orders, recent fills) the
// peer from should get for a market; an error refuses it (the stream is
// reset unanswered), as for a peer that asks too often.
type SyncHandler func(from peer.ID, market string) ([]*proto.BookMessage, error)

// HandleSync serves SyncProtocol on h with fn.
func HandleSync(h host.Host, fn SyncHandler) {
	h.SetStreamHandler(SyncProtocol, func(s network.Stream) {
		defer s.Close()
		s.SetDeadline(time.Now().Add(30 * time.Second))
		var req proto.SyncRequest
		if err := pbio.NewDelimitedReader(s, 256).ReadMsg(&req); err != nil {
			s.Reset()
			return
		}
		msgs, err := fn(s.Conn().RemotePeer(), req.Market)
		if err != nil {
			s.Reset()
			return
		}
		w := pbio.NewDelimitedWriter(s)
		size := 0
		for i, m := range msgs {
			if size += gproto.Size(m); i >= maxSyncMessages || size > MaxSyncBytes {
				break
			}
			if err := w.WriteMsg(m); err != nil {
				s.Reset()
				return
			}
		}
	})
}

// RequestSync asks p for a market's open orders and recent fills. The
// caller verifies each message as if it had been gossiped.
func RequestSync(ctx context.Context, h host.Host, p peer.ID, market string) ([][]byte, error) {
	s, err := h.NewStream(ctx, p, SyncProtocol)
	if err != nil {
		return nil, fmt.Errorf("p2p: open sync stream: %w", err)
	}
	defer s.Close()
	if dl, ok := ctx.Deadline(); ok {
		s.SetDeadline(dl)
	}
	if err := pbio.NewDelimitedWriter(s).WriteMsg(&proto.SyncRequest{Market: market}); err != nil {
		s.Reset()
		return nil, err
	}
	s.CloseWrite()
	r := pbio.NewDelimitedReader(s, MaxBookGossipSize)
	var out [][]byte
	size := 0
	for len(out) < maxSyncMessages {
		var m proto.BookMessage
		if err := r.ReadMsg(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return out, fmt.Errorf("p2p: read sync: %w", err)
		}
		b, err := marshalBook(&m)
		if err != nil {
			return out, err
		}
		if size += len(b); size > MaxSyncBytes {
			s.Reset()
			return out, ErrSyncTooLarge
		}
		out = append(out, b)
	}
	return out, nil
}

// ReconcileProtocol carries a set reconciliation of one market's book: a
// few rounds of proto.Reconcile each way on one stream (package exchange
// says what the rounds mean).
// 2.0.0 carries stamped makers' elements only, as SyncProtocol 2.0.0;
// 3.0.0 names an ask by the seq of the offer kept beside it too (an
// offer refreshed on one side is a difference), which 2.0.0 peers would
// see as a difference forever.
const ReconcileProtocol = protocol.ID("/suanli/book-reconcile/3.0.0")

// Bounds on a reconciliation, kept by both sides: one message at most
// MaxReconcileMessage bytes, a whole exchange at most ReconcileTimeout.
const (
	MaxReconcileMessage = 4 << 20
	ReconcileTimeout    = 30 * time.Second
)

// ReconcileConn is one side of a reconciliation stream.
type ReconcileConn struct {
	s network.Stream
	r pbio.ReadCloser
	w pbio.WriteCloser
}

func newReconcileConn(s network.Stream) *ReconcileConn {
	return &ReconcileConn{s: s, r: pbio.NewDelimitedReader(s, MaxReconcileMessage), w: pbio.NewDelimitedWriter(s)}
}

// Peer is the other side.
func (c *ReconcileConn) Peer() peer.ID { return c.s.Conn().RemotePeer() }

// Send writes one message.
func (c *ReconcileConn) Send(m *proto.Reconcile) error { return c.w.WriteMsg(m) }

// Recv reads one message.
func (c *ReconcileConn) Recv() (*proto.Reconcile, error) {
	var m proto.Reconcile
	if err := c.r.ReadMsg(&m); err != nil {
		return nil, err
	}
	return &m, nil
}

// Close ends the stream; Reset aborts it.
func (c *ReconcileConn) Close() error { return c.s.Close() }

// Reset aborts the stream.
func (c *ReconcileConn) Reset() error { return c.s.Reset() }

// HandleReconcile serves ReconcileProtocol on h: fn runs the responder's
// side of each stream, within ReconcileTimeout.
func HandleReconcile(h host.Host, fn func(c *ReconcileConn)) {
	h.SetStreamHandler(ReconcileProtocol, func(s network.Stream) {
		s.SetDeadline(time.Now().Add(ReconcileTimeout))
		c := newReconcileConn(s)
		defer c.Close()
		fn(c)
	})
}

// OpenReconcile opens a reconciliation stream to p, bounded by ctx's
// deadline or ReconcileTimeout, whichever is sooner.
func OpenReconcile(ctx context.Context, h host.Host, p peer.ID) (*ReconcileConn, error) {
	s, err := h.NewStream(ctx, p, ReconcileProtocol)
	if err != nil {
		return nil, fmt.Errorf("p2p: open reconcile stream: %w", err)
	}
	dl := time.Now().Add(ReconcileTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	s.SetDeadline(dl)
	return newReconcileConn(s), nil
}
