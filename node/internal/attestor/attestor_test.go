package attestor

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/gpu"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/internal/store"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

func newHost(t *testing.T) host.Host {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(nil)
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

func openStore(t *testing.T, dir string) *store.Store {
	t.Helper()
	st, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// The provider's side answers only for the GPUs it offers, and not at
// all without GPUs or while shutting down.
func TestAnswerRefuses(t *testing.T) {
	sim, err := gpu.OpenSim("dgxh100", 1) // a CC-capable machine
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	inv, err := sim.Inventory()
	if err != nil || len(inv.Devices) == 0 {
		t.Fatalf("inventory: %v, %v", inv, err)
	}
	offer := &proto.Offer{Gpus: []*proto.GPU{{Uuid: inv.Devices[0].UUID}}}
	st := openStore(t, t.TempDir())
	defer st.Close()
	closing := false
	a := New(Config{Host: newHost(t), GPUs: sim, Store: st, Published: func() *proto.Offer { return offer }, Closing: func() bool { return closing }})
	ctx := context.Background()
	nonce := make([]byte, p2p.AttestNonceSize)

	if _, err := a.answer(ctx, "challenger", nonce, []string{"GPU-not-mine"}); err == nil || !strings.Contains(err.Error(), "not in my offer") {
		t.Errorf("a GPU outside the offer: %v", err)
	}
	if evs, err := a.answer(ctx, "challenger", nonce, nil); err != nil || len(evs) != 1 || evs[0].Uuid != inv.Devices[0].UUID {
		t.Errorf("no GPUs named: want evidence for the offer's one GPU, got %d, %v", len(evs), err)
	}
	closing = true
	if _, err := a.answer(ctx, "challenger", nonce, nil); err == nil {
		t.Error("answered while shutting down")
	}
	buyer := New(Config{Host: newHost(t), Store: st})
	if _, err := buyer.answer(ctx, "challenger", nonce, nil); err == nil {
		t.Error("a node without GPUs answered")
	}
}

// A verified verdict lifts an ask only while fresh and only for the GPUs
// it verified, and it outlives a restart in the store.
func TestVerdictCovers(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	clk := &clock{t: t0}
	dir := t.TempDir()
	st := openStore(t, dir)
	a := New(Config{Host: newHost(t), Store: st, Now: clk.now, Window: time.Hour})
	ctx := context.Background()
	p := peer.ID("provider")
	one := &proto.Offer{Gpus: []*proto.GPU{{Uuid: "GPU-1"}}}
	two := &proto.Offer{Gpus: []*proto.GPU{{Uuid: "GPU-1"}, {Uuid: "GPU-2"}}}

	if a.Covers(ctx, p, one) || a.Verified(p, 0) {
		t.Fatal("covered before any verdict")
	}
	if _, ok, err := a.Verdict(p); ok || err != nil {
		t.Fatalf("a verdict before any challenge: %v, %v", ok, err)
	}
	a.saveVerdict(p, api.AttestReport{Provider: p.String(), Verified: true, Time: t0,
		GPUs: []api.GPUVerdict{{UUID: "GPU-1", Verified: true, Summary: "ok"}, {UUID: "GPU-2", Verified: false}}})
	switch {
	case !a.Covers(ctx, p, one):
		t.Error("a fresh verdict does not cover the GPU it verified")
	case a.Covers(ctx, p, two):
		t.Error("a verdict covers a GPU it did not verify")
	case !a.Verified(p, 0):
		t.Error("not verified within the window")
	}
	clk.set(t0.Add(time.Hour + time.Second))
	if a.Covers(ctx, p, one) || a.Verified(p, 0) {
		t.Error("a verdict older than the window still counts")
	}
	if !a.Verified(p, 2*time.Hour) {
		t.Error("a wider window given to Verified is ignored")
	}
	st.Close()

	st = openStore(t, dir)
	defer st.Close()
	clk.set(t0.Add(time.Minute))
	b := New(Config{Host: newHost(t), Store: st, Now: clk.now, Window: time.Hour})
	if !b.Covers(ctx, p, one) {
		t.Error("the verdict did not survive a restart")
	}
	if rep, ok, err := b.Verdict(p); !ok || err != nil || rep.GPUs[0].Summary != "ok" {
		t.Errorf("stored verdict: %+v, %v, %v", rep, ok, err)
	}
}

func TestSummarizeGPUs(t *testing.T) {
	same := []api.GPUVerdict{{Summary: "nonce mismatch"}, {Summary: "nonce mismatch"}}
	if got := summarizeGPUs(same, 0); got != "0 of 2 GPUs verified, each: nonce mismatch" {
		t.Errorf("one summary for all: %q", got)
	}
	mixed := []api.GPUVerdict{{Summary: "verified", Verified: true}, {Summary: "expired certificate"}}
	if got := summarizeGPUs(mixed, 1); got != "1 of 2 GPUs verified: verified; expired certificate" {
		t.Errorf("mixed: %q", got)
	}
}
