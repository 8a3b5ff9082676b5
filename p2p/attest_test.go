package p2p_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-msgio/pbio"

	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// attestHost starts a libp2p host on loopback TCP, closed when the test ends.
func attestHost(t *testing.T) host.Host {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	h, err := p2p.NewHost(p2p.HostConfig{Key: k, Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// attestPair is a challenger connected to a provider host.
func attestPair(t *testing.T) (challenger, provider host.Host) {
	t.Helper()
	challenger, provider = attestHost(t), attestHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := challenger.Connect(ctx, peer.AddrInfo{ID: provider.ID(), Addrs: provider.Addrs()}); err != nil {
		t.Fatal(err)
	}
	return challenger, provider
}

func attestNonce(t *testing.T) []byte {
	t.Helper()
	n := make([]byte, p2p.AttestNonceSize)
	rand.Read(n)
	return n
}

func attestEv(uuid string) *proto.AttestEvidence {
	return &proto.AttestEvidence{Uuid: uuid, Report: []byte("report of " + uuid), CertChain: []byte("chain of " + uuid)}
}

var attestWant = []string{"GPU-a", "GPU-b", "GPU-c"}

// TestChallengeShape: a fake provider answers in every wrong shape; the
// challenger accepts only one evidence per GPU asked for, in any order.
func TestChallengeShape(t *testing.T) {
	tests := []struct {
		name   string
		answer func(uuids []string) ([]*proto.AttestEvidence, error)
		want   error // nil: accepted
		reason string
	}{
		{"every GPU, reordered", func(u []string) ([]*proto.AttestEvidence, error) {
			return []*proto.AttestEvidence{attestEv(u[2]), attestEv(u[0]), attestEv(u[1])}, nil
		}, nil, ""},
		{"one GPU missing", func(u []string) ([]*proto.AttestEvidence, error) {
			return []*proto.AttestEvidence{attestEv(u[0]), attestEv(u[1])}, nil
		}, p2p.ErrAttestGPUCount, "gpu-count"},
		{"one GPU too many", func(u []string) ([]*proto.AttestEvidence, error) {
			return []*proto.AttestEvidence{attestEv(u[0]), attestEv(u[1]), attestEv(u[2]), attestEv("GPU-d")}, nil
		}, p2p.ErrAttestGPUCount, "gpu-count"},
		{"no GPU at all", func(u []string) ([]*proto.AttestEvidence, error) {
			return nil, nil
		}, p2p.ErrAttestGPUCount, "gpu-count"},
		{"a GPU not in the offer", func(u []string) ([]*proto.AttestEvidence, error) {
			return []*proto.AttestEvidence{attestEv(u[0]), attestEv("GPU-not-offered"), attestEv(u[2])}, nil
		}, p2p.ErrAttestUnknownGPU, "unknown-gpu"},
		{"one GPU twice", func(u []string) ([]*proto.AttestEvidence, error) {
			return []*proto.AttestEvidence{attestEv(u[0]), attestEv(u[0]), attestEv(u[2])}, nil
		}, p2p.ErrAttestUnknownGPU, "unknown-gpu"},
		{"an error", func([]string) ([]*proto.AttestEvidence, error) {
			return nil, errors.New("cannot attest: confidential computing is off")
		}, p2p.ErrAttestRefused, "refused"},
		{"evidence over the size limit", func(u []string) ([]*proto.AttestEvidence, error) {
			big := &proto.AttestEvidence{Uuid: u[0], Report: make([]byte, p2p.MaxAttestResponseSize)}
			return []*proto.AttestEvidence{big, attestEv(u[1]), attestEv(u[2])}, nil
		}, p2p.ErrAttestRefused, "refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, p := attestPair(t)
			nonce := attestNonce(t)
			type asked struct {
				from  peer.ID
				nonce []byte
				uuids []string
			}
			got := make(chan asked, 1)
			p2p.HandleAttest(p, func(_ context.Context, from peer.ID, n []byte, uuids []string) ([]*proto.AttestEvidence, error) {
				got <- asked{from, n, uuids}
				return tt.answer(uuids)
			})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			evs, err := p2p.Challenge(ctx, c, p.ID(), nonce, attestWant)
			a := <-got
			if a.from != c.ID() || !bytes.Equal(a.nonce, nonce) || !slices.Equal(a.uuids, attestWant) {
				t.Errorf("provider was asked by %s for %q with nonce %x; want %s, %q, %x", a.from, a.uuids, a.nonce, c.ID(), attestWant, nonce)
			}
			if tt.want != nil {
				if !errors.Is(err, tt.want) || evs != nil {
					t.Fatalf("Challenge = %d evidence, %v; want %v", len(evs), err, tt.want)
				}
				if r := p2p.AttestReason(err); r != tt.reason {
					t.Errorf("AttestReason(%v) = %q, want %q", err, r, tt.reason)
				}
				return
			}
			if err != nil {
				t.Fatalf("Challenge: %v", err)
			}
			for i, e := range evs {
				if e.Uuid != attestWant[i] || string(e.Report) != "report of "+attestWant[i] {
					t.Errorf("evidence %d = %q, %q; want %s's, in the order asked", i, e.Uuid, e.Report, attestWant[i])
				}
			}
		})
	}
}

// TestChallengeRefusalPrintable: a provider's error text is shown to
// users; control characters never get through.
func TestChallengeRefusalPrintable(t *testing.T) {
	c, p := attestPair(t)
	p2p.HandleAttest(p, func(context.Context, peer.ID, []byte, []string) ([]*proto.AttestEvidence, error) {
		return nil, errors.New("no\x1b[2J CC\r\n" + strings.Repeat("x", 4000))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := p2p.Challenge(ctx, c, p.ID(), attestNonce(t), attestWant)
	if !errors.Is(err, p2p.ErrAttestRefused) {
		t.Fatalf("Challenge = %v, want ErrAttestRefused", err)
	}
	if msg := err.Error(); strings.ContainsAny(msg, "\x1b\r\n") || len(msg) > 1200 || !strings.Contains(msg, "no?[2J CC") {
		t.Errorf("refusal = %q (%d bytes): want it printable, bounded, with the provider's words", msg, len(msg))
	}
}

// TestChallengeLate: a provider that reads the challenge and never answers
// fails it at the challenger's deadline, not later.
func TestChallengeLate(t *testing.T) {
	c, p := attestPair(t)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	p.SetStreamHandler(p2p.AttestProtocol, func(s network.Stream) {
		defer s.Close()
		var req proto.AttestRequest
		pbio.NewDelimitedReader(s, 4096).ReadMsg(&req)
		<-release
	})
	const wait = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	start := time.Now()
	_, err := p2p.Challenge(ctx, c, p.ID(), attestNonce(t), attestWant)
	if !errors.Is(err, p2p.ErrAttestLate) {
		t.Fatalf("Challenge = %v, want ErrAttestLate", err)
	}
	if took := time.Since(start); took > wait+5*time.Second {
		t.Errorf("Challenge took %s, deadline was %s", took, wait)
	}
}

// TestChallengeCancel: cancelling the challenger's context ends the
// challenge with the context's error, not a verdict on the provider.
func TestChallengeCancel(t *testing.T) {
	c, p := attestPair(t)
	asked := make(chan struct{})
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	p.SetStreamHandler(p2p.AttestProtocol, func(s network.Stream) {
		defer s.Close()
		var req proto.AttestRequest
		pbio.NewDelimitedReader(s, 4096).ReadMsg(&req)
		close(asked)
		<-release
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() {
		<-asked
		cancel()
	}()
	_, err := p2p.Challenge(ctx, c, p.ID(), attestNonce(t), attestWant)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Challenge = %v, want context.Canceled", err)
	}
}

// TestChallengeNoReply: a provider that closes without answering, answers
// garbage, or does not speak the protocol fails with its own reason.
func TestChallengeNoReply(t *testing.T) {
	tests := []struct {
		name    string
		handler network.StreamHandler // nil: protocol not served
		want    error
	}{
		{"closes", func(s network.Stream) { s.Close() }, p2p.ErrAttestNoReply},
		{"resets", func(s network.Stream) {
			var req proto.AttestRequest
			pbio.NewDelimitedReader(s, 4096).ReadMsg(&req)
			s.Reset()
		}, p2p.ErrAttestNoReply},
		{"garbage", func(s network.Stream) {
			defer s.Close()
			s.Write([]byte{0x05, 0xff, 0xff, 0xff, 0xff, 0xff})
		}, p2p.ErrAttestMalformed},
		{"not served", nil, p2p.ErrAttestUnreachable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, p := attestPair(t)
			if tt.handler != nil {
				p.SetStreamHandler(p2p.AttestProtocol, tt.handler)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := p2p.Challenge(ctx, c, p.ID(), attestNonce(t), attestWant); !errors.Is(err, tt.want) {
				t.Fatalf("Challenge = %v, want %v", err, tt.want)
			}
		})
	}
}

// TestHandleAttestRefusesBadRequests: the provider never calls its handler
// for a nonce that is not 32 bytes or for too many GPUs.
func TestHandleAttestRefusesBadRequests(t *testing.T) {
	tests := []struct {
		name string
		req  *proto.AttestRequest
		want string
	}{
		{"short nonce", &proto.AttestRequest{Nonce: make([]byte, 16)}, "nonce is 16 bytes"},
		{"no nonce", &proto.AttestRequest{}, "nonce is 0 bytes"},
		{"too many GPUs", &proto.AttestRequest{Nonce: make([]byte, 32), GpuUuids: make([]string, p2p.MaxAttestGPUs+1)}, "at most"},
	}
	c, p := attestPair(t)
	p2p.HandleAttest(p, func(context.Context, peer.ID, []byte, []string) ([]*proto.AttestEvidence, error) {
		t.Error("handler called for a bad request")
		return nil, nil
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := c.NewStream(ctx, p.ID(), p2p.AttestProtocol)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			s.SetDeadline(time.Now().Add(10 * time.Second))
			if err := pbio.NewDelimitedWriter(s).WriteMsg(tt.req); err != nil {
				t.Fatal(err)
			}
			s.CloseWrite()
			var resp proto.AttestResponse
			if err := pbio.NewDelimitedReader(s, p2p.MaxAttestResponseSize).ReadMsg(&resp); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(resp.Error, tt.want) || len(resp.Gpus) != 0 {
				t.Errorf("answer = %q with %d GPUs, want an error with %q", resp.Error, len(resp.Gpus), tt.want)
			}
		})
	}
}

// TestChallengeArguments: the challenger refuses to send a bad nonce or an
// empty GPU list.
func TestChallengeArguments(t *testing.T) {
	c := attestHost(t)
	ctx := context.Background()
	if _, err := p2p.Challenge(ctx, c, c.ID(), make([]byte, 31), attestWant); err == nil {
		t.Error("Challenge with a 31-byte nonce: no error")
	}
	if _, err := p2p.Challenge(ctx, c, c.ID(), attestNonce(t), nil); err == nil {
		t.Error("Challenge of no GPUs: no error")
	}
}

func TestPrintable(t *testing.T) {
	tests := []struct {
		in    string
		limit int
		want  string
	}{
		{"plain text", 100, "plain text"},
		{"esc\x1b[31m", 100, "esc?[31m"},
		{"tab\tnl\n", 100, "tab?nl?"},
		{"abcdef", 3, "abc…"},
		{"é", 1, "?…"}, // a cut rune is not passed through
		{"bad\xffutf8", 100, "bad?utf8"},
	}
	for _, tt := range tests {
		if got := p2p.Printable(tt.in, tt.limit); got != tt.want {
			t.Errorf("Printable(%q, %d) = %q, want %q", tt.in, tt.limit, got, tt.want)
		}
	}
}
