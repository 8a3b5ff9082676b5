package p2p_test

import (
	"bufio"
	"bytes"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// FuzzReceiptDecode feeds arbitrary bytes to the receipt stream's decoding:
// frame reading, opening a sealed Receipt or Countersign, and checking a
// receipt against fixed lease terms with market.VerifyNext. Nothing may
// panic; a frame that decodes re-encodes to the same bytes.
func FuzzReceiptDecode(f *testing.F) {
	key, _, err := crypto.GenerateEd25519Key(bytes.NewReader(bytes.Repeat([]byte{7}, 64)))
	if err != nil {
		f.Fatal(err)
	}
	bkey, _, _ := crypto.GenerateEd25519Key(bytes.NewReader(bytes.Repeat([]byte{9}, 64)))
	pid, _ := peerIDOf(key)
	bid, _ := peerIDOf(bkey)
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	terms := &proto.Lease{Id: "lease-1", Provider: []byte(pid), Buyer: []byte(bid), Gpus: []string{"GPU-a", "GPU-b"},
		PriceMicros: 2_400_000, Currency: "USD", StartUnixMs: start, DurationS: 10, BillingIntervalS: 1}
	now := time.UnixMilli(start + 20_000)

	rc := &proto.Receipt{LeaseId: "lease-1", Seq: 1, WindowStartUnixMs: start, WindowEndUnixMs: start + 1000,
		GpuMs: 2000, CumulativeGpuMs: 2000, Provider: []byte(pid), CreatedUnixMs: start + 1000,
		Usage: []*proto.GPUUsage{{Uuid: "GPU-a", GpuMs: 1000}, {Uuid: "GPU-b", GpuMs: 1000}}}
	total, _ := market.Charge(terms.PriceMicros, 2000)
	rc.AmountMicros, rc.CumulativeMicros = total, total
	env, err := p2p.Seal(key, rc, proto.MaxReceiptSize)
	if err != nil {
		f.Fatal(err)
	}
	if err := market.VerifyNext(terms, nil, rc, proto.ReceiptHash(env), now); err != nil {
		f.Fatalf("seed receipt invalid: %v", err)
	}
	cs := &proto.Countersign{LeaseId: "lease-1", Seq: 1, ReceiptHash: proto.ReceiptHash(env), Buyer: []byte(bid), CreatedUnixMs: start + 1001}
	csEnv, err := p2p.Seal(bkey, cs, proto.MaxReceiptSize)
	if err != nil {
		f.Fatal(err)
	}
	frame := func(kind byte, body []byte) []byte {
		var b bytes.Buffer
		p2p.WriteFrame(&b, kind, body)
		return b.Bytes()
	}
	f.Add(frame(p2p.FrameReceipt, env))
	f.Add(frame(p2p.FrameCountersign, csEnv))
	f.Add(frame(p2p.FrameRefuse, []byte("no")))
	f.Add(frame(p2p.FrameOK, nil))
	f.Add([]byte{p2p.FrameReceipt, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add([]byte{p2p.FrameReceipt, 0x05, 1, 2})
	f.Add(env)
	f.Add(csEnv)
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, data []byte) {
		// Frames, one after another, until the stream ends or breaks.
		br := bufio.NewReader(bytes.NewReader(data))
		for range 8 {
			kind, body, err := p2p.ReadFrame(br)
			if err != nil {
				break
			}
			if len(body) > p2p.MaxFrameSize {
				t.Fatalf("frame body %d bytes over the limit", len(body))
			}
			var b bytes.Buffer
			if err := p2p.WriteFrame(&b, kind, body); err != nil {
				t.Fatalf("re-encode: %v", err)
			}
			k2, body2, err := p2p.ReadFrame(bufio.NewReader(&b))
			if err != nil || k2 != kind || !bytes.Equal(body2, body) {
				t.Fatalf("round trip: %q %x, %v", k2, body2, err)
			}
			openAll(t, terms, body, now)
		}
		// The bytes as a bare envelope too.
		openAll(t, terms, data, now)
	})
}

func openAll(t *testing.T, terms *proto.Lease, b []byte, now time.Time) {
	if r, _, err := p2p.Open[*proto.Receipt](b, proto.MaxReceiptSize); err == nil && r != nil {
		hash := proto.ReceiptHash(b)
		market.VerifyNext(terms, nil, r, hash, now)
		prev := market.StateOf(r, hash)
		market.VerifyNext(terms, &prev, r, hash, now)
		market.NextWindow(terms, &prev)
		market.VerifyCountersign(terms, r, hash, &proto.Countersign{LeaseId: r.LeaseId, Seq: r.Seq, ReceiptHash: hash})
		market.VerifyChain(terms, []market.SignedReceiptDecoded{{Receipt: r, Hash: hash}})
	}
	if c, _, err := p2p.Open[*proto.Countersign](b, proto.MaxReceiptSize); err == nil && c != nil {
		_ = c.GetSeq()
	}
}

func peerIDOf(k crypto.PrivKey) (peer.ID, error) { return peer.IDFromPrivateKey(k) }
