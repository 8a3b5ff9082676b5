package node_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/devnet"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// rejectsOf reads suanli_validation_rejects_total{kind=kind} by reason from
// a node's /metrics.
func rejectsOf(t *testing.T, ctx context.Context, n *node.Node, kind string) map[string]float64 {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.APIAddr()+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "suanli_validation_rejects_total{") || !strings.Contains(line, `kind="`+kind+`"`) {
			continue
		}
		_, rest, _ := strings.Cut(line, `reason="`)
		reason, _, _ := strings.Cut(rest, `"`)
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[reason] = v
	}
	return out
}

// waitChainsAgree waits until the provider's and the buyer's receipt chains
// of a closed lease are the same, every receipt countersigned, and returns
// the chain.
func waitChainsAgree(t *testing.T, ctx context.Context, provider, buyer *node.Node, id string) []api.ReceiptView {
	t.Helper()
	var rp []api.ReceiptView
	waitFor(t, ctx, "both chains of "+id+" to agree, all countersigned", func() (bool, string) {
		var err1, err2 error
		rp, err1 = provider.Receipts(ctx, id)
		rb, err2 := buyer.Receipts(ctx, id)
		lv, err3 := provider.Lease(ctx, id)
		if err1 != nil || err2 != nil || err3 != nil || len(rp) == 0 || len(rp) != len(rb) || lv.ClosedAt == nil {
			return false, sprint(len(rp), len(rb), err1, err2, err3)
		}
		for i := range rp {
			if rp[i].Hash != rb[i].Hash || rb[i].BuyerSignature != "valid" || rp[i].BuyerSignature != "valid" {
				return false, sprint(rp[i], rb[i])
			}
		}
		billed := *lv.ClosedAt // a lease bills to its close, or its end when it ran to it
		if lv.End.Before(billed) {
			billed = lv.End
		}
		return rp[len(rp)-1].WindowEnd.Equal(billed), sprint(rp[len(rp)-1].WindowEnd, billed)
	})
	return rp
}

func gpuMillis(rs []api.ReceiptView) uint64 {
	var sum uint64
	for _, r := range rs {
		sum += r.GPUMillis
	}
	return sum
}

// TestResale: a holder buys a reserved block of 2 GPUs for 12 s at 2.00
// and, once it runs, resells the rest at 2.60. A new buyer's bid takes it:
// the provider and the holder both end the holder's lease as resold at the
// same handover with identical, countersigned receipt chains; the new
// buyer's lease runs from the handover to the block's end on the same GPUs
// at 2.00, billed to both sides' agreement; between them the two leases
// bill every GPU-millisecond of the block once. The premium, 0.60 per
// GPU-hour over what was left, is one record signed by the holder and the
// new buyer, the same on both. Refused, each with a reason: a resale by
// the provider or by a node without the lease, of a spot lease, a second
// resale of the lease, and a handover signed by someone not its holder.
func TestResale(t *testing.T) {
	ctx := marketCtx(t)
	opts := []node.Option{node.WithBillingInterval(time.Second)}
	net, err := devnet.Start(ctx, devnet.Config{Providers: 1, Buyers: 2, Dir: t.TempDir(), Logger: quiet, NodeOptions: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { net.Close() })
	if err := net.WaitPublished(ctx); err != nil {
		t.Fatal(err)
	}
	provider, holder, buyer := net.Providers[0], net.Buyers[0], net.Buyers[1]
	take := func(b *node.Node, req api.OrderRequest) string {
		t.Helper()
		var o api.OrderView
		waitFor(t, ctx, "a bid to fill", func() (bool, string) {
			var err error
			o, err = b.PlaceOrder(ctx, req)
			return err == nil && len(o.Fills) == 1, sprint(o, err)
		})
		return o.Fills[0].Lease
	}
	if _, err := provider.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: h100, Count: 2, Price: "2.00", LeaseType: "reserved",
		MinDuration: "1s", MaxDuration: "1h"}); err != nil {
		t.Fatal(err)
	}
	l := take(holder, api.OrderRequest{Side: "bid", Market: h100, Count: 2, Price: "2.00", LeaseType: "reserved", Duration: "12s", IOC: true})
	if _, err := provider.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: h100, Count: 1, Price: "1.00", MinDuration: "1s"}); err != nil {
		t.Fatal(err)
	}
	spot := take(holder, api.OrderRequest{Side: "bid", Market: h100, Count: 1, Price: "1.00", Duration: "30s", IOC: true})
	waitFor(t, ctx, "the reserved lease to run, receipts countersigned", func() (bool, string) {
		v, err := holder.Lease(ctx, l)
		return err == nil && v.Countersigned >= 2, sprint(v, err)
	})
	hv, err := holder.Lease(ctx, l)
	if err != nil {
		t.Fatal(err)
	}

	// Refusals before the resale.
	for _, c := range []struct {
		who  *node.Node
		name string
		req  api.OrderRequest
		want string
	}{
		{provider, "the provider", api.OrderRequest{Side: "ask", Resell: l, Price: "2.50"}, "not to resell"},
		{buyer, "a node without the lease", api.OrderRequest{Side: "ask", Resell: l, Price: "2.50"}, "holds no lease"},
		{holder, "the holder, of a spot lease", api.OrderRequest{Side: "ask", Resell: spot, Price: "2.50"}, "only reserved"},
	} {
		if _, err := c.who.PlaceOrder(ctx, c.req); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("resale by %s = %v, want refused (%q)", c.name, err, c.want)
		}
	}
	if r := rejectsOf(t, ctx, holder, "resale"); r["not-reserved"] != 1 {
		t.Errorf("holder's resale rejects = %v, want not-reserved counted", r)
	}

	// A handover of the lease signed by a peer that does not hold it.
	key, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	h, err := p2p.NewHost(p2p.HostConfig{Key: key, Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Connect(ctx, peer.AddrInfo{ID: provider.PeerID(), Addrs: provider.Host().Addrs()}); err != nil {
		t.Fatal(err)
	}
	forged, _ := p2p.Seal(key, &proto.Handover{LeaseId: l, Holder: []byte(h.ID()), Buyer: []byte(h.ID()), Take: []byte("x"), AskId: "x",
		CreatedUnixMs: time.Now().UnixMilli()}, proto.MaxReceiptSize)
	if kind, body, err := p2p.SendReceiptMessage(ctx, h, provider.PeerID(), p2p.FrameHandover, forged); err != nil || kind != p2p.FrameRefuse ||
		!strings.Contains(string(body), "not signed by its holder") {
		t.Errorf("a forged handover got %q %q %v, want refused as not the holder's", kind, body, err)
	}
	if r := rejectsOf(t, ctx, provider, "handover"); r["not-holder"] != 1 {
		t.Errorf("provider's handover rejects = %v, want not-holder counted", r)
	}

	// The resale.
	ask, err := holder.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Resell: l, Price: "2.60"})
	if err != nil || ask.Count != 2 || ask.LeaseType != "reserved" || ask.Status != "resting" {
		t.Fatalf("resale ask = %+v, %v; want 2 reserved GPUs resting", ask, err)
	}
	waitFor(t, ctx, "the new buyer to see the resale ask", func() (bool, string) {
		b, err := buyer.Book(ctx, h100, "USD")
		return err == nil && b.BestAsk == "2.60" && depth(b.Asks) == 2, sprint(b, err)
	})
	// The buyer wants the rest of the block give or take a little: the
	// rest shrinks every second, and a duration typed a moment ago still
	// takes it (market.ResaleDurationSlack).
	rest := time.Until(hv.End).Truncate(time.Second) + 30*time.Second
	bid, err := buyer.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: h100, Count: 2, Price: "2.60", LeaseType: "reserved",
		Duration: rest.String(), IOC: true})
	if err != nil || len(bid.Fills) != 1 {
		t.Fatalf("new buyer's bid = %+v, %v; want it to take the resale", bid, err)
	}
	nl := bid.Fills[0].Lease

	pl := waitLeaseClosed(t, ctx, provider, l)
	hl := waitLeaseClosed(t, ctx, holder, l)
	if pl.Reason != "resold" || hl.Reason != "resold" || !pl.ClosedAt.Equal(*hl.ClosedAt) {
		t.Fatalf("resold lease: provider %s at %v, holder %s at %v; want both resold at the same time", pl.Reason, pl.ClosedAt, hl.Reason, hl.ClosedAt)
	}
	old := waitChainsAgree(t, ctx, provider, holder, l)

	for _, n := range []*node.Node{provider, buyer} {
		v, err := n.Lease(ctx, nl)
		if err != nil {
			t.Fatal(err)
		}
		if !v.Start.Equal(*pl.ClosedAt) || !v.End.Equal(hv.End) || v.Price != "2.00" || !slices.Equal(v.GPUs, hv.GPUs) ||
			v.LeaseType != "reserved" || v.Provider != provider.PeerID().String() || v.Buyer != buyer.PeerID().String() {
			t.Errorf("new lease on %s = %+v; want %s's GPUs %v from the handover %s to the block's end %s at 2.00",
				v.Role, v, l, hv.GPUs, pl.ClosedAt, hv.End)
		}
	}
	if v, _ := provider.Lease(ctx, l); v.Resale == nil || v.Resale.Role != "provider" || v.Resale.NewLease != nl {
		t.Errorf("provider's view of the resale = %+v, want the handover to %s", v.Resale, nl)
	}

	// The premium: one record, signed by both, the same on both sides.
	var sold, bought *api.ResaleView
	waitFor(t, ctx, "the premium countersigned on both sides", func() (bool, string) {
		a, err1 := holder.Lease(ctx, l)
		b, err2 := buyer.Lease(ctx, nl)
		sold, bought = a.Resale, b.Resale
		return err1 == nil && err2 == nil && sold != nil && bought != nil && sold.Countersigned && bought.Countersigned,
			sprint(sold, bought, err1, err2)
	})
	want, err := market.ResalePremium(2_600_000, 2_000_000, 2, hv.End.Sub(*pl.ClosedAt).Milliseconds())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sold.Record, bought.Record) || sold.Role != "seller" || bought.Role != "buyer" ||
		sold.PremiumMicros != want || want <= 0 || sold.NewLease != nl || sold.Lease != l || !sold.From.Equal(*pl.ClosedAt) {
		t.Errorf("premium: holder %+v, buyer %+v; want the same record, %d micros from %s", sold, bought, want, pl.ClosedAt)
	}

	// The trade names the provider whose GPUs the new lease holds and the
	// holder that resold them, on both sides, in the order's fills and in
	// trades (a resale is not gossiped: each side lists its own).
	for _, n := range []*node.Node{holder, buyer} {
		ts, err := n.Trades(ctx, h100)
		var found *api.TradeView
		for i := range ts {
			if ts[i].Lease == nl {
				found = &ts[i]
			}
		}
		if err != nil || found == nil || found.Provider != provider.PeerID().String() || found.Reseller != holder.PeerID().String() || found.Buyer != buyer.PeerID().String() {
			t.Errorf("trades on %s: %+v (%v); want the resale of %s by the holder", n.Repo(), found, err, nl)
		}
	}
	if f := bid.Fills[0]; f.Provider != provider.PeerID().String() || f.Reseller != holder.PeerID().String() {
		t.Errorf("the new buyer's fill names provider %s, reseller %s; want the provider and the holder", f.Provider, f.Reseller)
	}

	// The premium is settled between holder and buyer as a lease is:
	// each side's ledger has it, owed to the holder.
	premiumOf := func(n *node.Node, peerID peer.ID) (api.LeaseSettlement, bool) {
		st, err := n.Settle(ctx, peerID.String())
		if err != nil || len(st) != 1 {
			return api.LeaseSettlement{}, false
		}
		for _, ls := range st[0].Leases {
			if ls.Kind == "resale premium" && ls.Lease == nl {
				return ls, true
			}
		}
		return api.LeaseSettlement{}, false
	}
	hp, ok1 := premiumOf(holder, buyer.PeerID())
	bp, ok2 := premiumOf(buyer, holder.PeerID())
	if !ok1 || !ok2 || hp.Role != "provider" || bp.Role != "buyer" || hp.AmountMicros != want || bp.AmountMicros != want || hp.OwedMicros != want {
		t.Errorf("settlement of the premium: holder %+v (%v), buyer %+v (%v); want %d micros owed to the holder on both sides", hp, ok1, bp, ok2, want)
	}

	// The new buyer's take again (a replay, or a retry that lost the
	// answer): the holder's stored answer, the same bytes, and no second
	// resale.
	var rec proto.SignedPremium
	if err := gproto.Unmarshal(sold.Record, &rec); err != nil {
		t.Fatal(err)
	}
	ho, _, err := p2p.Open[*proto.Handover](rec.Handover, proto.MaxReceiptSize)
	if err != nil {
		t.Fatal(err)
	}
	again, err := p2p.SendTake(ctx, buyer.Host(), holder.PeerID(), ho.Take)
	if err != nil {
		t.Fatal(err)
	}
	if r := again.GetResale(); r == nil || !bytes.Equal(r.Accept, rec.Accept) || !bytes.Equal(r.Handover, rec.Handover) || !bytes.Equal(r.Premium, rec.Premium) {
		t.Errorf("the replayed resale take got %v, want the first answer", again)
	}

	// A lease is resold once.
	if _, err := holder.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Resell: l, Price: "2.50"}); err == nil {
		t.Error("a second resale of the lease was placed, want refused")
	}

	// The new lease runs to the block's end at the lease's price; with the
	// resold one it bills the whole block once.
	pv := waitLeaseClosed(t, ctx, provider, nl)
	bv := waitLeaseClosed(t, ctx, buyer, nl)
	if pv.Reason != "completed" || bv.Reason != "completed" {
		t.Errorf("new lease reasons = %q, %q; want completed", pv.Reason, bv.Reason)
	}
	chain := waitChainsAgree(t, ctx, provider, buyer, nl)
	if !chain[0].WindowStart.Equal(*pl.ClosedAt) || !chain[len(chain)-1].WindowEnd.Equal(hv.End) {
		t.Errorf("new lease billed %s – %s, want %s – %s", chain[0].WindowStart, chain[len(chain)-1].WindowEnd, pl.ClosedAt, hv.End)
	}
	if got, want := gpuMillis(old)+gpuMillis(chain), uint64(2*hv.End.Sub(hv.Start).Milliseconds()); got != want {
		t.Errorf("the two leases billed %d GPU-ms, the block is %d", got, want)
	}
	if last := chain[len(chain)-1]; last.CumulativeMicros != (2_000_000*int64(gpuMillis(chain))+3_599_999)/3_600_000 {
		t.Errorf("new lease billed %d micros for %d GPU-ms, want the lease's price 2.00", last.CumulativeMicros, gpuMillis(chain))
	}
}
