package node_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// TestReceiptFaults sends hostile receipts to a real buyer node over the
// real /suanli/receipt/1.0.0 protocol, from a raw libp2p host holding the
// provider's key (the provider node itself is closed first): forged,
// out-of-order, gap-leaving, over-charging and equivocating receipts are
// each refused with their own reason and never countersigned; a replay gets
// the stored countersignature back, not a new one; the equivocation is kept
// as evidence. A well-formed next receipt is then countersigned, so the
// refusals were for what they say.
func TestReceiptFaults(t *testing.T) {
	provider, buyer := startLeaseNet(t)
	ctx := marketCtx(t)
	id := trade(t, ctx, provider, buyer, "60s")
	waitFor(t, ctx, "a countersigned receipt on the buyer", func() (bool, string) {
		v, err := buyer.Lease(ctx, id)
		return err == nil && v.Countersigned >= 1, sprint(v, err)
	})
	key, err := node.LoadKey(provider.Repo(), nil)
	if err != nil {
		t.Fatal(err)
	}
	provider.Close()

	// The buyer's view: terms and chain.
	exp, err := buyer.ExportReceipts(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var rchain proto.ReceiptChain
	if err := gproto.Unmarshal(exp, &rchain); err != nil {
		t.Fatal(err)
	}
	acc, _, err := p2p.Open[*proto.Accept](rchain.Lease, proto.MaxBookMessageSize)
	if err != nil {
		t.Fatal(err)
	}
	terms := acc.GetLease()
	lastSR := rchain.Receipts[len(rchain.Receipts)-1]
	last, _, err := p2p.Open[*proto.Receipt](lastSR.Receipt, proto.MaxReceiptSize)
	if err != nil {
		t.Fatal(err)
	}
	lastHash := proto.ReceiptHash(lastSR.Receipt)
	before, _ := buyer.Lease(ctx, id)

	h, err := p2p.NewHost(p2p.HostConfig{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Connect(ctx, peer.AddrInfo{ID: buyer.PeerID(), Addrs: buyer.Host().Addrs()}); err != nil {
		t.Fatal(err)
	}
	send := func(env []byte) (byte, string) {
		t.Helper()
		k, body, err := p2p.SendReceiptMessage(ctx, h, buyer.PeerID(), p2p.FrameReceipt, env)
		if err != nil {
			t.Fatalf("send: %v", err)
		}
		return k, string(body)
	}
	seal := func(k crypto.PrivKey, rc *proto.Receipt) []byte {
		t.Helper()
		env, err := p2p.Seal(k, rc, proto.MaxReceiptSize)
		if err != nil {
			t.Fatal(err)
		}
		return env
	}

	// next is the well-formed receipt after last.
	prev := market.StateOf(last, lastHash)
	w, ok := market.NextWindow(terms, &prev)
	if !ok {
		t.Fatal("no next window")
	}
	if d := time.Until(w.End); d > 0 {
		time.Sleep(d + 10*time.Millisecond) // the receipt may not claim the future
	}
	mk := func(seq uint64, prevHash []byte, ws, we int64, extraMicros int64) *proto.Receipt {
		held := uint64(we - ws)
		rc := &proto.Receipt{LeaseId: id, Seq: seq, WindowStartUnixMs: ws, WindowEndUnixMs: we,
			Provider: terms.Provider, CreatedUnixMs: max(time.Now().UnixMilli(), we), PrevHash: prevHash}
		for _, g := range terms.Gpus {
			rc.Usage = append(rc.Usage, &proto.GPUUsage{Uuid: g, GpuMs: held})
			rc.GpuMs += held
		}
		rc.CumulativeGpuMs = last.CumulativeGpuMs + rc.GpuMs
		total, err := market.Charge(terms.PriceMicros, rc.CumulativeGpuMs)
		if err != nil {
			t.Fatal(err)
		}
		rc.AmountMicros, rc.CumulativeMicros = total-last.CumulativeMicros+extraMicros, total+extraMicros
		return rc
	}
	ws, we := w.Start.UnixMilli(), w.End.UnixMilli()
	other, _, _ := crypto.GenerateEd25519Key(nil)
	iv := market.BillingInterval(terms).Milliseconds()

	replayKind, replayBody := send(lastSR.Receipt)
	if replayKind != p2p.FrameCountersign || replayBody != string(lastSR.Countersign) {
		t.Errorf("replay of seq %d: %q %q, want the stored countersignature again", last.Seq, replayKind, replayBody)
	}

	equiv := mk(last.Seq, last.PrevHash, last.WindowStartUnixMs, last.WindowEndUnixMs, 0)
	equiv.GpuMs, equiv.Usage = last.GpuMs, last.Usage
	equiv.CumulativeGpuMs, equiv.AmountMicros, equiv.CumulativeMicros = last.CumulativeGpuMs, last.AmountMicros, last.CumulativeMicros
	equiv.CreatedUnixMs = last.CreatedUnixMs + 1 // same seq, same content bar the time: a second signature

	for _, c := range []struct {
		name, want string
		env        []byte
	}{
		{"forged", "not signed by the lease's provider", seal(other, mk(last.Seq+1, lastHash, ws, we, 0))},
		{"out of order", market.ErrReceiptSeq.Error(), seal(key, mk(last.Seq+2, lastHash, ws, we, 0))},
		{"gap", "", seal(key, mk(last.Seq+1, lastHash, ws+iv, we+iv, 0))},
		{"bad prev hash", market.ErrReceiptChain.Error(), seal(key, mk(last.Seq+1, bytes.Repeat([]byte{1}, len(lastHash)), ws, we, 0))},
		{"over-charging", market.ErrReceiptAmount.Error(), seal(key, mk(last.Seq+1, lastHash, ws, we, 1))},
		{"equivocating", market.ErrEquivocation.Error(), seal(key, equiv)},
	} {
		k, body := send(c.env)
		t.Logf("%s: %c %q", c.name, k, body)
		if k != p2p.FrameRefuse || body == "" || !strings.Contains(body, c.want) {
			t.Errorf("%s receipt: answer %q %q, want a refusal saying %q", c.name, k, body, c.want)
		}
	}
	after, _ := buyer.Lease(ctx, id)
	if after.Receipts != before.Receipts || after.Countersigned != before.Countersigned {
		t.Errorf("after the refusals: %d receipts, %d countersigned; before %d, %d", after.Receipts, after.Countersigned, before.Receipts, before.Countersigned)
	}

	// The well-formed next one is countersigned.
	if k, body := send(seal(key, mk(last.Seq+1, lastHash, ws, we, 0))); k != p2p.FrameCountersign {
		t.Errorf("well-formed receipt %d: %c %q, want countersigned", last.Seq+1, k, body)
	}
	if v, _ := buyer.Lease(ctx, id); v.Countersigned != before.Countersigned+1 {
		t.Errorf("countersigned %d, want %d", v.Countersigned, before.Countersigned+1)
	}
	rep, err := buyer.VerifyReceipts(ctx, id)
	if err != nil || !rep.Valid {
		t.Errorf("VerifyReceipts = %+v, %v", rep, err)
	}

	// The equivocation is kept as evidence, listed by peer, exported, and
	// verifiable by a third party.
	evs, err := buyer.Evidence(ctx, provider.PeerID().String())
	if err != nil || len(evs) != 1 || evs[0].Kind != node.EvidenceEquivocation || evs[0].Lease != id || evs[0].Peers[0] != provider.PeerID().String() {
		t.Fatalf("Evidence = %+v, %v; want the equivocation by the provider", evs, err)
	}
	if others, _ := buyer.Evidence(ctx, buyer.PeerID().String()); len(others) != 0 {
		t.Errorf("Evidence of the buyer itself = %+v, want none", others)
	}
	file, err := buyer.ExportEvidence(ctx, evs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	proof, err := node.VerifyEvidence(file)
	if err != nil || proof.Kind != node.EvidenceEquivocation || !strings.Contains(proof.Proves, "two different receipts") {
		t.Errorf("VerifyEvidence = %+v, %v", proof, err)
	}
	tampered := bytes.Replace(file, []byte(`"receipts":["`), []byte(`"receipts":["AAAA`), 1)
	if _, err := node.VerifyEvidence(tampered); err == nil {
		t.Error("VerifyEvidence accepted a tampered receipt")
	}
	if _, err := buyer.ExportEvidence(ctx, "receipt/nope/1"); !errors.Is(err, api.ErrUnknownEvidence) {
		t.Errorf("ExportEvidence(unknown) = %v, want ErrUnknownEvidence", err)
	}
}
