package node_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/devnet"
	"github.com/suanli/suanli/node/internal/lease"
	"github.com/suanli/suanli/node/internal/leases"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// rawHost is a bare libp2p host with key, connected to target.
func rawHost(t *testing.T, ctx context.Context, key crypto.PrivKey, target *node.Node) host.Host {
	t.Helper()
	if key == nil {
		var err error
		if key, _, err = crypto.GenerateEd25519Key(rand.Reader); err != nil {
			t.Fatal(err)
		}
	}
	h, err := p2p.NewHost(p2p.HostConfig{Key: key, Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	if err := h.Connect(ctx, peer.AddrInfo{ID: target.PeerID(), Addrs: target.Host().Addrs()}); err != nil {
		t.Fatal(err)
	}
	return h
}

// sendClose sends a raw close notice, signed by h, from h to target and
// returns the answer.
func sendClose(t *testing.T, ctx context.Context, h host.Host, target *node.Node, c leases.CloseNotice) (byte, string) {
	t.Helper()
	b, err := lease.SealClose(h.Peerstore().PrivKey(h.ID()), c, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	kind, body, err := p2p.SendReceiptMessage(ctx, h, target.PeerID(), p2p.FrameClose, b)
	if err != nil {
		t.Fatalf("sending the close notice: %v", err)
	}
	return kind, string(body)
}

// TestLeaseViewsDuringStarts: views of the leases (as the dashboard polls
// them) while fills start new ones never race the start path (-race).
func TestLeaseViewsDuringStarts(t *testing.T) {
	provider, buyer := startLeaseNet(t)
	ctx := marketCtx(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, n := range []*node.Node{provider, buyer} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				vs, _ := n.Leases(ctx)
				for _, v := range vs {
					n.Lease(ctx, v.ID)
				}
			}
		}()
	}
	var ids []string
	for range 3 {
		ids = append(ids, trade(t, ctx, provider, buyer, "2s"))
	}
	close(stop)
	wg.Wait()
	for _, id := range ids {
		v, err := buyer.Lease(ctx, id)
		if err != nil || v.Role != "buyer" || v.Provider != provider.PeerID().String() {
			t.Errorf("buyer's Lease(%s) = %+v, %v; want the buyer's lease with the provider", id, v, err)
		}
	}
}

// TestLeaseCloseChecksAtProvider: the buyer's peer, with its own key but
// without its CLI, sends raw close notices to the provider. Reserved time
// ended early is refused (the buyer committed to it) and the lease runs on,
// billed; a reason that is not the buyer's, a completion before the end and
// a notice from a stranger are refused too, each counted by reason. The
// negative control: the same raw close of an on-demand lease ends it at
// the provider, as buyer-closed, and frees its GPUs.
func TestLeaseCloseChecksAtProvider(t *testing.T) {
	// A long grace: the provider does not end the leases as unpaid while
	// the buyer's node is down for the attacks.
	provider, buyer := startLeaseNet(t, node.WithUnpaidGrace(10*time.Minute))
	ctx := marketCtx(t)
	onDemand := trade(t, ctx, provider, buyer, "60s")
	if _, err := provider.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: h100, Count: 2, LeaseType: "reserved", MinDuration: "1s", MaxDuration: "1h"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the buyer to see the reserved ask", func() (bool, string) {
		b, err := buyer.Book(ctx, h100, "USD")
		return err == nil && len(b.Asks) == 1, sprint(b, err)
	})
	o, err := buyer.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: h100, Count: 2, Price: "3.00", LeaseType: "reserved",
		Start: "+0s", Duration: "60s", IOC: true})
	if err != nil || len(o.Fills) != 1 {
		t.Fatalf("reserved bid = %+v, %v; want it filled", o, err)
	}
	reserved := o.Fills[0].Lease
	for _, id := range []string{onDemand, reserved} {
		waitFor(t, ctx, "a countersigned receipt of "+id, func() (bool, string) {
			v, err := provider.Lease(ctx, id)
			return err == nil && v.Countersigned >= 1, sprint(v, err)
		})
	}
	key, err := node.LoadKey(buyer.Repo(), nil)
	if err != nil {
		t.Fatal(err)
	}
	buyer.Close()
	h := rawHost(t, ctx, key, provider)
	stranger := rawHost(t, ctx, nil, provider)
	now := time.Now().UnixMilli()

	attacks := []struct {
		name   string
		from   host.Host
		notice leases.CloseNotice
		reason string // the rejects label
	}{
		{"early close of reserved time", h, leases.CloseNotice{Lease: reserved, Reason: market.CloseBuyer, AtMs: now}, "early-close"},
		{"completed before the end", h, leases.CloseNotice{Lease: reserved, Reason: market.CloseCompleted, AtMs: now}, "out-of-turn"},
		{"the provider's reason from the buyer", h, leases.CloseNotice{Lease: reserved, Reason: market.CloseUnpaid, AtMs: now}, "reason"},
		{"a stranger's close", stranger, leases.CloseNotice{Lease: onDemand, Reason: market.CloseBuyer, AtMs: now}, "unknown-lease"},
	}
	for _, a := range attacks {
		before := rejectsOf(t, ctx, provider, "close")[a.reason]
		if kind, body := sendClose(t, ctx, a.from, provider, a.notice); kind != p2p.FrameRefuse {
			t.Errorf("%s: answer %q %q, want refused", a.name, kind, body)
		}
		if got := rejectsOf(t, ctx, provider, "close")[a.reason]; got != before+1 {
			t.Errorf("%s: rejects{kind=close,reason=%s} = %v, want %v", a.name, a.reason, got, before+1)
		}
	}
	for _, id := range []string{onDemand, reserved} {
		if v, err := provider.Lease(ctx, id); err != nil || v.State != "running" {
			t.Fatalf("after the refused closes, provider's lease %s = %+v, %v; want running", id, v, err)
		}
	}
	// The reserved lease is still billed: a receipt after the refusal.
	v0, _ := provider.Lease(ctx, reserved)
	waitFor(t, ctx, "a receipt of the reserved lease after the refused close", func() (bool, string) {
		v, err := provider.Lease(ctx, reserved)
		return err == nil && v.Receipts > v0.Receipts, sprint(v, err)
	})

	// Negative control: the buyer's close of on-demand time is taken.
	if kind, body := sendClose(t, ctx, h, provider, leases.CloseNotice{Lease: onDemand, Reason: market.CloseBuyer, AtMs: time.Now().UnixMilli()}); kind != p2p.FrameOK {
		t.Fatalf("on-demand close: answer %q %q, want OK", kind, body)
	}
	v := waitLeaseClosed(t, ctx, provider, onDemand)
	if v.Reason != "buyer-closed" {
		t.Errorf("on-demand lease closed as %q, want buyer-closed", v.Reason)
	}
}

// TestLeaseCloseAgreedAfterProviderRestart: the provider goes down longer
// than the grace; the buyer closes the lease (no receipts) and owes the
// provider the notice. The restarted provider resumes the lease and bills
// on until the notice reaches it: then it ends the lease at the buyer's
// close, drops the receipts it billed past it (never countersigned), and
// both ends keep one reason, one close time and one chain, every receipt
// countersigned, the GPUs free.
func TestLeaseCloseAgreedAfterProviderRestart(t *testing.T) {
	dir := t.TempDir()
	ctx := marketCtx(t)
	popts := []node.Option{
		node.WithRepo(filepath.Join(dir, "provider")), node.WithAutoInit(), node.WithListen("/ip4/127.0.0.1/tcp/0"),
		node.WithAPI("127.0.0.1:0"), node.WithLogger(quiet), node.WithGPUSim("dgxh100", 7), node.WithRegion("CN-GZ"),
		node.WithPrice("2.49", "USD"), node.WithBillingInterval(time.Second),
	}
	provider, err := node.New(popts...)
	if err != nil {
		t.Fatal(err)
	}
	pClosed := false
	t.Cleanup(func() {
		if !pClosed {
			provider.Close()
		}
	})
	buyer, err := node.New(node.WithRepo(filepath.Join(dir, "buyer")), node.WithAutoInit(), node.WithListen("/ip4/127.0.0.1/tcp/0"),
		node.WithAPI("127.0.0.1:0"), node.WithLogger(quiet), node.WithoutGPU(), node.WithBootstrap(provider.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { buyer.Close() })
	if _, err := devnet.WaitFound(ctx, buyer, api.OfferQuery{}, 1); err != nil {
		t.Fatal(err)
	}
	id := trade(t, ctx, provider, buyer, "120s")
	waitFor(t, ctx, "a countersigned receipt", func() (bool, string) {
		v, err := provider.Lease(ctx, id)
		return err == nil && v.Countersigned >= 1, sprint(v, err)
	})
	provider.Close()
	pClosed = true
	bv := waitLeaseClosed(t, ctx, buyer, id)
	if bv.Reason != "buyer-closed" {
		t.Fatalf("buyer's lease = %+v, want buyer-closed (no receipts)", bv)
	}
	provider, err = node.New(popts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { provider.Close() })

	var pv api.LeaseView
	waitFor(t, ctx, "both ends to agree on the close", func() (bool, string) {
		pv, err = provider.Lease(ctx, id)
		if err != nil {
			return false, err.Error()
		}
		bv, err = buyer.Lease(ctx, id)
		if err != nil {
			return false, err.Error()
		}
		return pv.State == "closed" && bv.State == "closed" && pv.Reason == bv.Reason && pv.ClosedAt.Equal(*bv.ClosedAt) &&
			pv.Receipts == pv.Countersigned && bv.Receipts == pv.Receipts && bv.Countersigned == pv.Countersigned, sprint(pv, bv)
	})
	// The provider bills the last window, to the agreed close, after it
	// closed: wait for it to be countersigned on both sides.
	waitChainsAgree(t, ctx, provider, buyer, id)
	if pv.Reason != "buyer-closed" || !pv.ClosedAt.Equal(*bv.ClosedAt) {
		t.Errorf("provider closed %s at %v, buyer %s at %v; want both the buyer's close", pv.Reason, pv.ClosedAt, bv.Reason, bv.ClosedAt)
	}
	pc, err := provider.ExportReceipts(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	bc, err := buyer.ExportReceipts(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(pc, bc) {
		var a, b proto.ReceiptChain
		gproto.Unmarshal(pc, &a)
		gproto.Unmarshal(bc, &b)
		t.Errorf("chains differ: provider %d bytes (%d receipts, lease %d bytes), buyer %d bytes (%d receipts, lease %d bytes)",
			len(pc), len(a.Receipts), len(a.Lease), len(bc), len(b.Receipts), len(b.Lease))
	}
	waitFor(t, ctx, "the provider's GPUs free", func() (bool, string) {
		offers, err := provider.Offers(ctx, api.OfferQuery{})
		if err != nil || len(offers) != 1 {
			return false, sprint(offers, err)
		}
		for _, g := range offers[0].GPUs {
			if g.LeasedUntil != nil {
				return false, sprint(offers[0].GPUs)
			}
		}
		return true, ""
	})
}

// TestBuyerCountersignsOnlyWorkSeen: a lease whose workload never starts
// (its command does not exist) is billed by the provider for the GPUs it
// held; the buyer never saw it run, so it refuses each receipt with the
// reason counted (not-running), keeps it uncountersigned, and owes
// nothing. The negative control: a workload that runs is countersigned.
func TestBuyerCountersignsOnlyWorkSeen(t *testing.T) {
	provider, buyer := startLeaseNet(t, node.WithExecutors("reserve", "process"))
	ctx := marketCtx(t)
	bad := trade(t, ctx, provider, buyer, "30s", "/nonexistent/suanli-no-such-command")
	pv := waitLeaseClosed(t, ctx, provider, bad)
	if pv.Reason != "failed" {
		t.Fatalf("provider's lease = %+v, want failed (the command does not exist)", pv)
	}
	waitFor(t, ctx, "the buyer to refuse the never-started lease's receipt", func() (bool, string) {
		got := rejectsOf(t, ctx, buyer, "receipt")
		return got["not-running"] >= 1, sprint(got)
	})
	for _, n := range []*node.Node{provider, buyer} {
		v, err := n.Lease(ctx, bad)
		if err != nil || v.Countersigned != 0 || v.Cumulative != "0.00" && v.Cumulative != "0" && v.Cumulative != "0.000000" {
			t.Errorf("%s's never-started lease = %+v, %v; want nothing countersigned", v.Role, v, err)
		}
	}
	if bv, _ := buyer.Lease(ctx, bad); bv.Receipts < 1 {
		t.Errorf("buyer's never-started lease holds %d receipts, want the refused one kept as evidence", bv.Receipts)
	}

	good := trade(t, ctx, provider, buyer, "3s", "sleep", "30")
	waitLeaseClosed(t, ctx, provider, good)
	waitFor(t, ctx, "the running workload's receipts countersigned", func() (bool, string) {
		v, err := provider.Lease(ctx, good)
		return err == nil && v.Countersigned >= 3 && v.Countersigned == v.Receipts, sprint(v, err)
	})
}
