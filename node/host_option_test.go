package node_test

import (
	"crypto/rand"
	"path/filepath"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/suanli/suanli/node"
)

// TestWithHost: a node runs on a host the caller built (here on mocknet),
// signs as that host, and leaves the host open on Close.
func TestWithHost(t *testing.T) {
	mn := mocknet.New()
	defer mn.Close()
	if _, err := node.New(node.WithRepo(t.TempDir()), node.WithHost(nil)); err == nil {
		t.Error("WithHost(nil) accepted")
	}
	ecdsa, err := mn.GenPeer() // mocknet's own peers have ECDSA keys
	if err != nil {
		t.Fatal(err)
	}
	if _, err := node.New(node.WithRepo(t.TempDir()), node.WithAutoInit(), node.WithHost(ecdsa)); err == nil {
		t.Error("WithHost(ECDSA host) accepted, want an Ed25519 key")
	}
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	h, err := mn.AddPeer(k, ma.StringCast("/ip4/10.0.0.1/tcp/4001"))
	if err != nil {
		t.Fatal(err)
	}
	if err := mn.LinkAll(); err != nil {
		t.Fatal(err)
	}
	n, err := node.New(node.WithRepo(filepath.Join(t.TempDir(), "repo")), node.WithAutoInit(), node.WithHost(h),
		node.WithAPI(""), node.WithLogger(quiet), node.WithoutGPU())
	if err != nil {
		t.Fatal(err)
	}
	if n.PeerID() != h.ID() {
		t.Errorf("PeerID() = %s, want the host's %s", n.PeerID(), h.ID())
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	// The caller's host keeps running: none of the node's protocols may
	// still be served by a node that closed its store. (The DHT's own
	// /suanli/kad handler is kad-dht's to manage.)
	for _, p := range h.Mux().Protocols() {
		if strings.HasPrefix(string(p), "/suanli/") && !strings.HasPrefix(string(p), "/suanli/kad/") {
			t.Errorf("after Close the host still serves %s", p)
		}
	}
	if _, err := mn.ConnectPeers(h.ID(), ecdsa.ID()); err != nil {
		t.Errorf("after Close the caller's host cannot connect: %v", err)
	}
}
