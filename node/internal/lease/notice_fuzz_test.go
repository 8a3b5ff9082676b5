package lease

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/internal/leases"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// FuzzOpenClose: any bytes are refused with an error, or open to a notice
// of a lease, with a close reason, a time and a bounded note, signed by
// the party it names.
func FuzzOpenClose(f *testing.F) {
	key := newKey(f)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	good, err := SealClose(key, leases.CloseNotice{Lease: "L", Reason: market.CloseBuyer, AtMs: now.UnixMilli(), Note: "done"}, now)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add(append(bytes.Clone(good), 0))
	unsigned, _ := json.Marshal(leases.CloseNotice{Lease: "L", Reason: market.CloseBuyer, AtMs: now.UnixMilli()})
	f.Add(unsigned)
	other := newKey(f)
	lying, _ := p2p.Seal(other, &proto.CloseNotice{LeaseId: "L", Signer: good[:8], Reason: 2, AtUnixMs: 1}, proto.MaxCloseNoticeSize)
	f.Add(lying)
	noReason, _ := SealClose(key, leases.CloseNotice{Lease: "L", AtMs: 1}, now)
	f.Add(noReason)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, signer, err := openClose(b)
		if err != nil {
			if closeRejectReason(err) == "" {
				t.Fatalf("refusal without a reason: %v", err)
			}
			return
		}
		if c.Lease == "" || c.AtMs <= 0 || len(c.Note) > 512 || c.Reason < market.CloseCompleted || c.Reason > market.CloseResold {
			t.Fatalf("opened a malformed notice %+v", c)
		}
		if _, err := peer.IDFromBytes([]byte(signer)); err != nil {
			t.Fatalf("signer %q: %v", signer, err)
		}
	})
}

// A notice opens to what its party sealed, and names that party; a
// notice whose signer field names someone else is refused as forged.
func TestSealOpenClose(t *testing.T) {
	key, other := newKey(t), newKey(t)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	in := leases.CloseNotice{Lease: "L", Reason: market.CloseExited, AtMs: now.UnixMilli(), Note: "workload exited with code 0"}
	b, err := SealClose(key, in, now)
	if err != nil {
		t.Fatal(err)
	}
	got, signer, err := openClose(b)
	want, _ := peer.IDFromPrivateKey(key)
	if err != nil || got != in || signer != want {
		t.Fatalf("opened %+v by %s (%v), want %+v by %s", got, signer, err, in, want)
	}
	forged, err := p2p.Seal(other, &proto.CloseNotice{LeaseId: "L", Signer: []byte(want), Reason: 2, AtUnixMs: 1}, proto.MaxCloseNoticeSize)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := openClose(forged); closeRejectReason(err) != "wrong-signer" {
		t.Fatalf("a notice naming another signer: %v (%s), want wrong-signer", err, closeRejectReason(err))
	}
}
