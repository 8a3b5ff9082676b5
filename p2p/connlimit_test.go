package p2p_test

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/p2p"
)

// TestConnsPerAddress: the resource manager refuses connections from one
// address past the host's limit, whatever keys they come with; the ones
// within it (the negative control) connect.
func TestConnsPerAddress(t *testing.T) {
	const limit = 3
	newKey := func() crypto.PrivKey {
		k, _, err := crypto.GenerateEd25519Key(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	server, err := p2p.NewHost(p2p.HostConfig{Key: newKey(), Listen: []string{"/ip4/127.0.0.1/tcp/0"}, LoopbackConns: limit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	connected := 0
	for i := range limit + 3 {
		c, err := p2p.NewHost(p2p.HostConfig{Key: newKey(), Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		err = c.Connect(ctx, peer.AddrInfo{ID: server.ID(), Addrs: server.Addrs()})
		switch {
		case i < limit && err != nil:
			t.Fatalf("peer %d within the limit: %v", i, err)
		case err == nil:
			connected++
		}
	}
	if connected != limit {
		t.Errorf("%d peers from one address connected, want %d", connected, limit)
	}
	if n := len(server.Network().Conns()); n > limit {
		t.Errorf("server holds %d connections from one address, limit %d", n, limit)
	}
}
