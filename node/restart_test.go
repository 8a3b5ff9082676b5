package node_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/devnet"
	"github.com/suanli/suanli/node/internal/repo"
)

// TestProviderRestart restarts a provider on its repo: it keeps its peer ID
// and publishes a higher seq, which replaces the old record for a buyer.
func TestProviderRestart(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	repo := filepath.Join(dir, "provider")
	opts := []node.Option{
		node.WithRepo(repo), node.WithAutoInit(), node.WithListen("/ip4/127.0.0.1/tcp/0"),
		node.WithAPI(""), node.WithLogger(quiet), node.WithGPUSim("dgxa100", 7), node.WithRegion("CN-NM"),
	}
	p, err := node.New(append(opts, node.WithPrice("1.40", "USD"))...)
	if err != nil {
		t.Fatal(err)
	}
	pid := p.PeerID()
	// The buyer bootstraps off a relay node that outlives the provider.
	relay, err := node.New(node.WithRepo(filepath.Join(dir, "relay")), node.WithAutoInit(), node.WithListen("/ip4/127.0.0.1/tcp/0"),
		node.WithAPI(""), node.WithLogger(quiet), node.WithoutGPU(), node.WithBootstrap(p.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Close() })
	buyer, err := node.New(node.WithRepo(filepath.Join(dir, "buyer")), node.WithAutoInit(), node.WithListen("/ip4/127.0.0.1/tcp/0"),
		node.WithAPI(""), node.WithLogger(quiet), node.WithoutGPU(), node.WithBootstrap(relay.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { buyer.Close() })

	first, err := devnet.WaitFound(ctx, buyer, api.OfferQuery{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if first[0].Provider != pid.String() || first[0].Price != "1.40" {
		t.Fatalf("first offer = %s at %s, want %s at 1.40", first[0].Provider, first[0].Price, pid)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	p2, err := node.New(append(opts, node.WithPrice("1.35", "USD"), node.WithBootstrap(relay.Addrs()...))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p2.Close() })
	if p2.PeerID() != pid {
		t.Fatalf("restarted peer ID = %s, want %s", p2.PeerID(), pid)
	}
	for {
		got, err := buyer.Offers(ctx, api.OfferQuery{})
		if err == nil && len(got) == 1 && got[0].Seq > first[0].Seq {
			if got[0].Price != "1.35" || got[0].Provider != pid.String() {
				t.Fatalf("after restart offer = %s at %s seq %d, want %s at 1.35", got[0].Provider, got[0].Price, got[0].Seq, pid)
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("buyer never saw a higher seq than %d: last %+v, %v", first[0].Seq, got, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestRepoLocked: a second node on a repo that a running node holds is
// refused, and the first keeps working.
func TestRepoLocked(t *testing.T) {
	repo := t.TempDir()
	opts := []node.Option{node.WithRepo(repo), node.WithAutoInit(), node.WithListen("/ip4/127.0.0.1/tcp/0"), node.WithAPI(""), node.WithLogger(quiet), node.WithoutGPU()}
	a, err := node.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if b, err := node.New(opts...); err == nil {
		b.Close()
		t.Fatal("second node on a held repo started, want ErrRepoLocked")
	} else if !errors.Is(err, node.ErrRepoLocked) {
		t.Fatalf("second node error = %v, want ErrRepoLocked", err)
	}
	if _, err := a.ID(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestStampSurvivesRestart: a node on a fresh repo grinds its maker
// stamp (2^20 hashes here) in the background and stores it; restarted on
// the repo, its orders carry the stored stamp from the start and it
// grinds no other (the file is unchanged: a new grind would start from a
// random nonce).
func TestStampSurvivesRestart(t *testing.T) {
	const bits = 20
	dir := filepath.Join(t.TempDir(), "repo")
	opts := []node.Option{node.WithRepo(dir), node.WithAutoInit(), node.WithListen("/ip4/127.0.0.1/tcp/0"),
		node.WithAPI(""), node.WithLogger(quiet), node.WithoutGPU(), node.WithStampBits(bits)}
	n, err := node.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	pid := n.PeerID()
	deadline := time.Now().Add(60 * time.Second)
	for repo.LoadStamp(dir, pid, bits) == nil {
		if time.Now().After(deadline) {
			t.Fatal("no stamp stored in the repo after 60 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	stamp := repo.LoadStamp(dir, pid, bits)
	if got := n.MakerStamp(); !bytes.Equal(got, stamp) {
		t.Fatalf("node's stamp %x, stored %x", got, stamp)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n2, err := node.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	if got := n2.MakerStamp(); !bytes.Equal(got, stamp) {
		t.Errorf("restarted node's stamp %x, want the stored %x from the start", got, stamp)
	}
	if err := n2.Close(); err != nil {
		t.Fatal(err)
	}
	if got := repo.LoadStamp(dir, pid, bits); !bytes.Equal(got, stamp) {
		t.Fatalf("stamp after restart %x, want the stored %x", got, stamp)
	}
}
