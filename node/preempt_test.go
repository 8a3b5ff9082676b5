package node_test

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/devnet"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// TestSpotPreemption: a provider whose 8 GPUs are all in a spot lease takes
// an on-demand trade by preempting it: the spot buyer gets a signed notice
// (3 s here), both sides close the spot lease as preempted at the notice's
// end with identical receipt chains billed to that moment, the on-demand
// lease starts then on the freed GPUs, and the spot bid, which asked to be,
// is re-queued for the rest of its duration. A notice from anyone but the
// lease's provider is refused.
func TestSpotPreemption(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	opts := []node.Option{node.WithBillingInterval(time.Second), node.WithPreemptionNotice(3 * time.Second)}
	net, err := devnet.Start(ctx, devnet.Config{Providers: 1, Buyers: 2, Dir: t.TempDir(), Logger: quiet, NodeOptions: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { net.Close() })
	if err := net.WaitPublished(ctx); err != nil {
		t.Fatal(err)
	}
	provider, spotBuyer, odBuyer := net.Providers[0], net.Buyers[0], net.Buyers[1]
	ask := func(n int, price, typ string) {
		t.Helper()
		if _, err := provider.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: h100, Count: uint32(n), Price: price, LeaseType: typ, MinDuration: "1s"}); err != nil {
			t.Fatal(err)
		}
	}
	bid := func(b *node.Node, n int, price, typ, d string, requeue bool) string {
		t.Helper()
		var o api.OrderView
		waitFor(t, ctx, "a bid to fill", func() (bool, string) {
			var err error
			o, err = b.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: h100, Count: uint32(n), Price: price, LeaseType: typ, Duration: d, IOC: true, Requeue: requeue})
			return err == nil && len(o.Fills) == 1, sprint(o, err)
		})
		return o.Fills[0].Lease
	}
	// The spot bid wants 8 GPUs and gets the 6 on sale; the on-demand
	// trade needs 4: the 2 free ones and 2 of the spot lease's, whose
	// bid re-queues for the 6 GPUs it lost.
	ask(6, "2.00", "spot")
	spot := bid(spotBuyer, 8, "2.10", "spot", "60s", true)
	ask(4, "2.40", "on-demand")
	od := bid(odBuyer, 4, "2.50", "on-demand", "5s", false)
	tradedAt := time.Now()

	var sv api.LeaseView
	waitFor(t, ctx, "the spot buyer to get the notice", func() (bool, string) {
		sv, err = spotBuyer.Lease(ctx, spot)
		return err == nil && sv.PreemptAt != nil, sprint(sv, err)
	})
	if d := sv.PreemptAt.Sub(tradedAt); d < 2*time.Second || d > 6*time.Second {
		t.Errorf("preempted at %s, %s after the trade; want the 3 s notice", sv.PreemptAt, d)
	}
	ov, err := provider.Lease(ctx, od)
	if err != nil || !ov.Start.Equal(sv.PreemptAt.Truncate(time.Millisecond)) {
		t.Errorf("on-demand lease starts %v (%v), want at the notice's end %v", ov.Start, err, sv.PreemptAt)
	}

	// A notice for the spot lease from a peer that is not its provider.
	key, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	h, err := p2p.NewHost(p2p.HostConfig{Key: key, Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Connect(ctx, peer.AddrInfo{ID: spotBuyer.PeerID(), Addrs: spotBuyer.Host().Addrs()}); err != nil {
		t.Fatal(err)
	}
	forged, _ := p2p.Seal(key, &proto.Preemption{LeaseId: spot, Provider: []byte(h.ID()), CreatedUnixMs: time.Now().UnixMilli(),
		EndsUnixMs: time.Now().Add(time.Minute).UnixMilli()}, proto.MaxReceiptSize)
	if kind, body, err := p2p.SendReceiptMessage(ctx, h, spotBuyer.PeerID(), p2p.FramePreempt, forged); err != nil || kind != p2p.FrameRefuse {
		t.Errorf("a forged notice got %q %q %v, want refused", kind, body, err)
	}

	pv := waitLeaseClosed(t, ctx, provider, spot)
	bv := waitLeaseClosed(t, ctx, spotBuyer, spot)
	if pv.Reason != "preempted" || bv.Reason != "preempted" {
		t.Fatalf("reasons = %q (provider), %q (buyer); want preempted", pv.Reason, bv.Reason)
	}
	if !pv.ClosedAt.Equal(*bv.ClosedAt) || !bv.ClosedAt.Equal(sv.PreemptAt.Truncate(time.Millisecond)) {
		t.Errorf("closed at %v (provider), %v (buyer); want both at the notice's end %v", pv.ClosedAt, bv.ClosedAt, sv.PreemptAt)
	}
	waitFor(t, ctx, "both chains to agree, all countersigned, billed to the notice's end", func() (bool, string) {
		rp, err1 := provider.Receipts(ctx, spot)
		rb, err2 := spotBuyer.Receipts(ctx, spot)
		if err1 != nil || err2 != nil || len(rp) == 0 || len(rp) != len(rb) {
			return false, sprint(len(rp), len(rb), err1, err2)
		}
		for i := range rp {
			if rp[i].Hash != rb[i].Hash || rb[i].BuyerSignature != "valid" || rp[i].BuyerSignature != "valid" {
				return false, sprint(rp[i], rb[i])
			}
		}
		return rp[len(rp)-1].WindowEnd.Equal(*pv.ClosedAt), sprint(rp[len(rp)-1].WindowEnd, pv.ClosedAt)
	})
	ov = waitLeaseClosed(t, ctx, provider, od)
	if ov.Reason != "completed" || len(ov.GPUs) != 4 {
		t.Errorf("on-demand lease = %+v, want it completed on 4 GPUs", ov)
	}
	waitFor(t, ctx, "the spot bid re-queued for the rest of its duration, for the 6 GPUs it lost", func() (bool, string) {
		os, err := spotBuyer.Orders(ctx)
		bids, requeued := 0, false
		for _, o := range os {
			if o.Side == "bid" {
				bids++
				requeued = requeued || o.Count == 6 // the first asked for 8
			}
		}
		return err == nil && bids == 2 && requeued, sprint(os, err)
	})
	if !strings.Contains(pv.Note, od) {
		t.Errorf("provider's note %q does not name the lease it was preempted for", pv.Note)
	}
}
