package p2p

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio/pbio"
	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/proto"
)

// AttestProtocol carries one AttestRequest (the challenger's nonce) and its
// AttestResponse (each GPU's evidence over it, or an error) per stream.
const AttestProtocol = protocol.ID("/suanli/attest/1.0.0")

// AttestTimeout bounds a whole attestation exchange on the provider's side,
// and is the challenger's deadline when its context has none.
const AttestTimeout = 20 * time.Second

// Attestation size limits: a request is a nonce and at most MaxAttestGPUs
// UUIDs; a response at most MaxAttestResponseSize bytes (an H100 report is
// ~5 KB and its PEM chain ~4 KB, so 8 GPUs need ~80 KB).
const (
	AttestNonceSize       = 32
	MaxAttestGPUs         = 64
	MaxAttestResponseSize = 4 << 20
	maxAttestRequestSize  = AttestNonceSize + MaxAttestGPUs*128 + 256
	maxAttestErrorLen     = 512
)

// Errors of a challenge, each saying how the provider failed it. Challenge
// wraps exactly one of them, or returns a network or context error.
var (
	// ErrAttestRefused is returned when the provider answers with an error
	// (no GPUs, confidential computing off) instead of evidence.
	ErrAttestRefused = errors.New("p2p: provider refused attestation")
	// ErrAttestLate is returned when the provider does not answer before the
	// deadline.
	ErrAttestLate = errors.New("p2p: provider did not answer the attestation challenge in time")
	// ErrAttestNoReply is returned when the provider closes or resets the
	// stream without answering.
	ErrAttestNoReply = errors.New("p2p: provider closed the attestation stream without answering")
	// ErrAttestMalformed is returned when the answer does not parse or is
	// over the size limit.
	ErrAttestMalformed = errors.New("p2p: malformed attestation answer")
	// ErrAttestGPUCount is returned when the answer carries evidence for
	// more or fewer GPUs than were asked for.
	ErrAttestGPUCount = errors.New("p2p: attestation answer has the wrong number of GPUs")
	// ErrAttestUnknownGPU is returned when the answer carries evidence for a
	// GPU that was not asked for (not in the offer), or twice for one GPU.
	ErrAttestUnknownGPU = errors.New("p2p: attestation answer names a GPU not asked for")
	// ErrAttestUnreachable is returned when no stream to the provider could
	// be opened (offline, or it does not speak AttestProtocol).
	ErrAttestUnreachable = errors.New("p2p: provider unreachable for attestation")
)

// AttestReason is a short label for a challenge error, for metrics.
func AttestReason(err error) string {
	for _, r := range []struct {
		err   error
		label string
	}{
		{ErrAttestRefused, "refused"},
		{ErrAttestLate, "late"},
		{ErrAttestNoReply, "no-reply"},
		{ErrAttestMalformed, "malformed"},
		{ErrAttestGPUCount, "gpu-count"},
		{ErrAttestUnknownGPU, "unknown-gpu"},
		{ErrAttestUnreachable, "unreachable"},
	} {
		if errors.Is(err, r.err) {
			return r.label
		}
	}
	return "other"
}

// AttestHandler answers a challenge from a peer: evidence over nonce (32
// bytes, checked) for the listed GPUs, all offered ones when uuids is
// empty. An error is sent to the challenger as its text.
type AttestHandler func(ctx context.Context, from peer.ID, nonce []byte, uuids []string) ([]*proto.AttestEvidence, error)

// HandleAttest serves AttestProtocol on h with fn. Each stream is bounded by
// AttestTimeout; fn gets a context with the same deadline. Bounding how many
// challenges run at once is fn's business.
func HandleAttest(h host.Host, fn AttestHandler) {
	h.SetStreamHandler(AttestProtocol, func(s network.Stream) {
		defer s.Close()
		deadline := time.Now().Add(AttestTimeout)
		s.SetDeadline(deadline)
		var req proto.AttestRequest
		if err := pbio.NewDelimitedReader(s, maxAttestRequestSize).ReadMsg(&req); err != nil {
			s.Reset()
			return
		}
		resp := &proto.AttestResponse{}
		switch {
		case len(req.Nonce) != AttestNonceSize:
			resp.Error = fmt.Sprintf("nonce is %d bytes, want %d", len(req.Nonce), AttestNonceSize)
		case len(req.GpuUuids) > MaxAttestGPUs:
			resp.Error = fmt.Sprintf("%d GPUs asked for, at most %d", len(req.GpuUuids), MaxAttestGPUs)
		default:
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			evs, err := fn(ctx, s.Conn().RemotePeer(), req.Nonce, req.GpuUuids)
			cancel()
			if err != nil {
				resp.Error = err.Error()
			} else {
				resp.Gpus = evs
			}
		}
		if len(resp.Error) > maxAttestErrorLen {
			resp.Error = resp.Error[:maxAttestErrorLen]
		}
		if gproto.Size(resp) > MaxAttestResponseSize {
			resp = &proto.AttestResponse{Error: fmt.Sprintf("evidence over the %d-byte limit", MaxAttestResponseSize)}
		}
		if err := pbio.NewDelimitedWriter(s).WriteMsg(resp); err != nil {
			s.Reset()
		}
	})
}

// Challenge sends nonce to provider p, asking for evidence of the GPUs want
// (UUIDs from its offer, no duplicates), and checks the answer's shape with
// MatchEvidence. It does not verify the evidence itself: that is the GPU's
// signature and certificate chain, checked by the caller. The exchange ends
// at ctx's deadline, or after AttestTimeout when ctx has none.
func Challenge(ctx context.Context, h host.Host, p peer.ID, nonce []byte, want []string) ([]*proto.AttestEvidence, error) {
	if len(nonce) != AttestNonceSize {
		return nil, fmt.Errorf("p2p: attestation nonce is %d bytes, want %d", len(nonce), AttestNonceSize)
	}
	if len(want) == 0 || len(want) > MaxAttestGPUs {
		return nil, fmt.Errorf("p2p: attestation of %d GPUs: want 1..%d", len(want), MaxAttestGPUs)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, AttestTimeout)
		defer cancel()
	}
	deadline, _ := ctx.Deadline()
	s, err := h.NewStream(ctx, p, AttestProtocol)
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: %v", ErrAttestUnreachable, err)
	}
	defer s.Close()
	s.SetDeadline(deadline)
	// Stream deadlines do not see a cancelled context: reset on cancel.
	stop := context.AfterFunc(ctx, func() { s.Reset() })
	defer stop()

	late := func(err error) error {
		if errors.Is(ctx.Err(), context.Canceled) {
			return ctx.Err()
		}
		if ctx.Err() != nil || !time.Now().Before(deadline) {
			return fmt.Errorf("%w (deadline %s)", ErrAttestLate, deadline.UTC().Format(time.RFC3339))
		}
		return err
	}
	if err := pbio.NewDelimitedWriter(s).WriteMsg(&proto.AttestRequest{Nonce: nonce, GpuUuids: want}); err != nil {
		s.Reset()
		return nil, late(fmt.Errorf("%w: send challenge: %v", ErrAttestUnreachable, err))
	}
	s.CloseWrite()
	var resp proto.AttestResponse
	if err := pbio.NewDelimitedReader(s, MaxAttestResponseSize).ReadMsg(&resp); err != nil {
		s.Reset()
		if errors.Is(err, io.EOF) || errors.Is(err, network.ErrReset) {
			return nil, late(ErrAttestNoReply)
		}
		return nil, late(fmt.Errorf("%w: %v", ErrAttestMalformed, err))
	}
	if resp.Error != "" {
		return nil, fmt.Errorf("%w: %s", ErrAttestRefused, Printable(resp.Error, maxAttestErrorLen))
	}
	return MatchEvidence(resp.Gpus, want)
}

// MatchEvidence checks that got holds exactly one evidence per UUID in want
// and returns them in want's order: a provider answering for fewer or more
// GPUs, for a GPU not asked for, or twice for one GPU fails.
func MatchEvidence(got []*proto.AttestEvidence, want []string) ([]*proto.AttestEvidence, error) {
	if len(got) != len(want) {
		return nil, fmt.Errorf("%w: evidence for %d GPUs, %d asked for", ErrAttestGPUCount, len(got), len(want))
	}
	pos := make(map[string]int, len(want))
	for i, u := range want {
		pos[u] = i
	}
	out := make([]*proto.AttestEvidence, len(want))
	for _, e := range got {
		i, ok := pos[e.GetUuid()]
		switch {
		case !ok:
			return nil, fmt.Errorf("%w: %q is not in the offer", ErrAttestUnknownGPU, Printable(e.GetUuid(), 80))
		case out[i] != nil:
			return nil, fmt.Errorf("%w: %q answered twice", ErrAttestUnknownGPU, Printable(e.GetUuid(), 80))
		}
		out[i] = e
	}
	return out, nil
}

// Printable makes text from a peer safe to log or show on a terminal: at
// most limit bytes, control and other non-printable characters replaced.
func Printable(s string, limit int) string {
	if len(s) > limit {
		s = s[:limit] + "…"
	}
	return strings.Map(func(r rune) rune {
		if r == unicode.ReplacementChar || !unicode.IsPrint(r) {
			return '?'
		}
		return r
	}, s)
}
