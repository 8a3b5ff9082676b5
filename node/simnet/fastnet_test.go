package simnet

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	corenet "github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
)

// linkedPair is a mocknet of two linked hosts a and b, each also wrapped
// as a cmHost (ha, hb); all are closed when the test ends.
func linkedPair(t *testing.T) (mn mocknet.Mocknet, a, b host.Host, ha, hb *cmHost) {
	t.Helper()
	mn = mocknet.New()
	t.Cleanup(func() { mn.Close() })
	var err error
	if a, err = mn.GenPeer(); err != nil {
		t.Fatal(err)
	}
	if b, err = mn.GenPeer(); err != nil {
		t.Fatal(err)
	}
	if _, err := mn.LinkPeers(a.ID(), b.ID()); err != nil {
		t.Fatal(err)
	}
	if ha, err = withConnManager(a, 30); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ha.Close() })
	if hb, err = withConnManager(b, 30); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hb.Close() })
	return mn, a, b, ha, hb
}

// TestConnView checks that a cmHost's Connectedness agrees with mocknet's
// own answer through connect, a local close seen from both ends, a
// reconnect and ClosePeer.
func TestConnView(t *testing.T) {
	mn, a, b, ha, hb := linkedPair(t)
	// Both views must agree with mocknet's answer, which may lag on the
	// side that did not close (mocknet closes the remote end
	// asynchronously), so each check polls until a deadline.
	agree := func(what string, want corenet.Connectedness) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			ga, gb := ha.Network().Connectedness(b.ID()), hb.Network().Connectedness(a.ID())
			ma, mb := a.Network().Connectedness(b.ID()), b.Network().Connectedness(a.ID())
			if ga == want && gb == want && ma == want && mb == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: view a→b %v b→a %v, mocknet a→b %v b→a %v, want %v", what, ga, gb, ma, mb, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	agree("before dialing", corenet.NotConnected)
	c1, err := mn.ConnectPeers(a.ID(), b.ID())
	if err != nil {
		t.Fatal(err)
	}
	agree("one connection", corenet.Connected)
	// A locally closed connection reads as closed at once, before
	// mocknet's asynchronous notification reaches the view.
	c1.Close()
	if got := ha.Network().Connectedness(b.ID()); got != corenet.NotConnected {
		t.Fatalf("a closed its connection: a→b %v at once, want NotConnected", got)
	}
	agree("both closed", corenet.NotConnected)
	// And again after reconnecting: the view's record is per connection.
	if _, err := mn.ConnectPeers(a.ID(), b.ID()); err != nil {
		t.Fatal(err)
	}
	agree("reconnected", corenet.Connected)
	if err := ha.Network().ClosePeer(b.ID()); err != nil {
		t.Fatal(err)
	}
	agree("ClosePeer", corenet.NotConnected)
}

// TestCmHostDial checks cmHost's Connect and NewStream, which skip
// basichost's Connect while connView holds a connection: a first
// Connect dials, a stream opens over it, a stream after a local close
// dials again, and so does one after the far end closed.
func TestCmHostDial(t *testing.T) {
	_, a, b, ha, hb := linkedPair(t)
	const echo = "/suanli/test/echo"
	hb.SetStreamHandler(echo, func(s corenet.Stream) {
		defer s.Close()
		io.Copy(s, s)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	roundTrip := func(what string) {
		t.Helper()
		s, err := ha.NewStream(ctx, b.ID(), echo)
		if err != nil {
			t.Fatalf("%s: stream: %v", what, err)
		}
		defer s.Close()
		if _, err := s.Write([]byte("ping")); err != nil {
			t.Fatalf("%s: write: %v", what, err)
		}
		s.CloseWrite()
		got, err := io.ReadAll(s)
		if err != nil || string(got) != "ping" {
			t.Fatalf("%s: echo %q, %v", what, got, err)
		}
	}
	if err := ha.Connect(ctx, peer.AddrInfo{ID: b.ID(), Addrs: b.Addrs()}); err != nil {
		t.Fatal(err)
	}
	if got := ha.Network().Connectedness(b.ID()); got != corenet.Connected {
		t.Fatalf("after Connect: %v, want Connected", got)
	}
	// Connect again while connected: no new connection.
	if err := ha.Connect(ctx, peer.AddrInfo{ID: b.ID()}); err != nil {
		t.Fatal(err)
	}
	if n := len(a.Network().ConnsToPeer(b.ID())); n != 1 {
		t.Fatalf("connections after a second Connect: %d, want 1", n)
	}
	roundTrip("connected")
	if err := ha.Network().ClosePeer(b.ID()); err != nil {
		t.Fatal(err)
	}
	roundTrip("after a local close")
	// The far end closes; once the near end has seen it (mocknet tells
	// it asynchronously), a stream dials again.
	if err := hb.Network().ClosePeer(a.ID()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for ha.Network().Connectedness(b.ID()) == corenet.Connected {
		if time.Now().After(deadline) {
			t.Fatal("a never saw b close")
		}
		time.Sleep(5 * time.Millisecond)
	}
	roundTrip("after the far end closed")
}
