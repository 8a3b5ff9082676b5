package p2p

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/suanli/suanli/proto"
)

// Lease protocols.
const (
	// ReceiptProtocol carries one settlement message per stream and its
	// answer: a sealed Receipt (answered by a sealed Countersign or a
	// refusal), a sealed PaymentAck, or a close notice.
	ReceiptProtocol = protocol.ID("/suanli/receipt/1.0.0")
	// ExecProtocol carries a buyer's exec request for a lease, then the
	// workload's stdout and stderr and its exit status, as frames.
	ExecProtocol = protocol.ID("/suanli/exec/1.0.0")
)

// Frame kinds. A frame is a kind byte, a uvarint length and that many bytes.
const (
	FrameReceipt     byte = 'R' // sealed proto.Receipt
	FramePayment     byte = 'P' // sealed proto.PaymentAck
	FrameClose       byte = 'X' // CloseNotice
	FrameCountersign byte = 'C' // sealed proto.Countersign
	FrameOK          byte = 'K' // accepted, no body
	FrameRefuse      byte = 'E' // refused; the body is the reason
	FrameExec        byte = 'Q' // exec request (JSON, see node)
	FrameStdout      byte = 'o'
	FrameStderr      byte = 'e'
	FrameExit        byte = 'x' // exit status (JSON, see node)
	FrameStarted     byte = 's' // the workload runs: what it is and where to reach it (JSON, see node)
	FramePreempt     byte = 'N' // sealed proto.Preemption: a spot lease is interrupted
)

// MaxFrameSize bounds one frame's body.
const MaxFrameSize = proto.MaxReceiptSize + 1024

// ReceiptTimeout bounds one exchange on the receipt protocol.
const ReceiptTimeout = 10 * time.Second

// ErrFrame is returned for a malformed or oversized frame.
var ErrFrame = errors.New("p2p: malformed frame")

// WriteFrame writes one frame to w.
func WriteFrame(w io.Writer, kind byte, body []byte) error {
	if len(body) > MaxFrameSize {
		return fmt.Errorf("%w: %d bytes", ErrTooLarge, len(body))
	}
	b := binary.AppendUvarint([]byte{kind}, uint64(len(body)))
	_, err := w.Write(append(b, body...))
	return err
}

// ReadFrame reads one frame from r.
func ReadFrame(r *bufio.Reader) (kind byte, body []byte, err error) {
	if kind, err = r.ReadByte(); err != nil {
		return 0, nil, err
	}
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %v", ErrFrame, err)
	}
	if n > MaxFrameSize {
		return 0, nil, fmt.Errorf("%w: %d bytes, limit %d", ErrFrame, n, MaxFrameSize)
	}
	body = make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, nil, fmt.Errorf("%w: %v", ErrFrame, err)
	}
	return kind, body, nil
}

// ReceiptHandler answers one settlement message from a peer.
type ReceiptHandler func(from peer.ID, kind byte, body []byte) (replyKind byte, reply []byte)

// HandleReceipts serves ReceiptProtocol on h with fn.
func HandleReceipts(h host.Host, fn ReceiptHandler) {
	h.SetStreamHandler(ReceiptProtocol, func(s network.Stream) {
		defer s.Close()
		s.SetDeadline(time.Now().Add(ReceiptTimeout))
		kind, body, err := ReadFrame(bufio.NewReader(s))
		if err != nil {
			s.Reset()
			return
		}
		rk, reply := fn(s.Conn().RemotePeer(), kind, body)
		if err := WriteFrame(s, rk, reply); err != nil {
			s.Reset()
		}
	})
}

// SendReceiptMessage sends one settlement message to p and returns its answer.
func SendReceiptMessage(ctx context.Context, h host.Host, p peer.ID, kind byte, body []byte) (byte, []byte, error) {
	s, err := h.NewStream(ctx, p, ReceiptProtocol)
	if err != nil {
		return 0, nil, fmt.Errorf("p2p: open receipt stream: %w", err)
	}
	defer s.Close()
	dl := time.Now().Add(ReceiptTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	s.SetDeadline(dl)
	if err := WriteFrame(s, kind, body); err != nil {
		s.Reset()
		return 0, nil, fmt.Errorf("p2p: send receipt message: %w", err)
	}
	s.CloseWrite()
	rk, reply, err := ReadFrame(bufio.NewReader(s))
	if err != nil {
		s.Reset()
		return 0, nil, fmt.Errorf("p2p: read receipt answer: %w", err)
	}
	return rk, reply, nil
}

// FrameWriter writes frames to a stream; safe for concurrent use, so a
// workload's stdout and stderr can share it.
type FrameWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// Frame writes one frame.
func (f *FrameWriter) Frame(kind byte, body []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return WriteFrame(f.w, kind, body)
}

// Kind returns an io.Writer that sends each write as a frame of kind.
func (f *FrameWriter) Kind(kind byte) io.Writer { return frameKindWriter{f, kind} }

type frameKindWriter struct {
	f    *FrameWriter
	kind byte
}

func (w frameKindWriter) Write(b []byte) (int, error) {
	for off := 0; off < len(b); off += MaxFrameSize {
		if err := w.f.Frame(w.kind, b[off:min(len(b), off+MaxFrameSize)]); err != nil {
			return off, err
		}
	}
	return len(b), nil
}

// ExecHandler serves one exec stream: req is the request frame's body; the
// handler writes output and exit frames to out and returns when done.
type ExecHandler func(ctx context.Context, from peer.ID, req []byte, out *FrameWriter)

// HandleExec serves ExecProtocol on h with fn. ctx ends the handlers when
// the node closes.
func HandleExec(ctx context.Context, h host.Host, fn ExecHandler) {
	h.SetStreamHandler(ExecProtocol, func(s network.Stream) {
		defer s.Close()
		s.SetReadDeadline(time.Now().Add(ReceiptTimeout))
		kind, body, err := ReadFrame(bufio.NewReader(s))
		if err != nil || kind != FrameExec {
			s.Reset()
			return
		}
		s.SetReadDeadline(time.Time{})
		fn(ctx, s.Conn().RemotePeer(), body, &FrameWriter{w: s})
	})
}

// OpenExec sends an exec request to provider p and returns the stream, from
// which the caller reads output frames with ReadFrame until FrameExit or an
// error; the caller closes it.
func OpenExec(ctx context.Context, h host.Host, p peer.ID, req []byte) (network.Stream, error) {
	s, err := h.NewStream(ctx, p, ExecProtocol)
	if err != nil {
		return nil, fmt.Errorf("p2p: open exec stream: %w", err)
	}
	if err := WriteFrame(s, FrameExec, req); err != nil {
		s.Reset()
		return nil, fmt.Errorf("p2p: send exec request: %w", err)
	}
	s.CloseWrite()
	return s, nil
}
