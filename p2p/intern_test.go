package p2p_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/p2p"
)

// TestOpenOfferInterned: the same sealed bytes, opened twice (from two
// copies, as two replicas or two asks receive them), give the very same
// decoded offer; a cached offer is still checked at the caller's time
// (expired: refused); bytes that differ are opened on their own.
func TestOpenOfferInterned(t *testing.T) {
	k, a := testKey(t, 1)
	env := seal(t, k, withCCEvidence(testOffer(a, 11, t0)))
	o1, s1, err := p2p.OpenOffer(append([]byte(nil), env...), t0)
	if err != nil {
		t.Fatal(err)
	}
	o2, s2, err := p2p.OpenOffer(append([]byte(nil), env...), t0)
	if err != nil {
		t.Fatal(err)
	}
	if o1 != o2 || s1 != s2 || s1 != a {
		t.Errorf("opened twice: offers %p and %p, signers %s and %s; want one shared offer signed by %s", o1, o2, s1, s2, a)
	}
	if _, _, err := p2p.OpenOffer(env, t0.Add(2*time.Hour)); !errors.Is(err, market.ErrOfferExpired) {
		t.Errorf("interned offer opened after its expiry = %v, want %v", err, market.ErrOfferExpired)
	}
	other := seal(t, k, withCCEvidence(testOffer(a, 12, t0)))
	o3, _, err := p2p.OpenOffer(other, t0)
	if err != nil {
		t.Fatal(err)
	}
	if o3 == o1 || o3.Seq != 12 {
		t.Errorf("a different offer opened as %p seq %d, want its own (seq 12)", o3, o3.Seq)
	}
	// A forged copy (one byte of the signature flipped) is not the
	// interned one: it is verified, and refused.
	forged := append([]byte(nil), env...)
	forged[len(forged)-1] ^= 1
	if _, _, err := p2p.OpenOffer(forged, t0); !errors.Is(err, p2p.ErrEnvelope) {
		t.Errorf("forged copy of an interned offer = %v, want %v", err, p2p.ErrEnvelope)
	}
}

// TestShareGossipData: two nodes' copies of one large accepted payload end
// up as one shared slice; a small payload, a payload whose ID is not its
// SHA-256, and a payload that only claims an interned payload's ID are
// each left as they came.
func TestShareGossipData(t *testing.T) {
	big := bytes.Repeat([]byte("offer "), 2000) // 12 KB
	sum := sha256.Sum256(big)
	msg := func(data []byte, id string) *pubsub.Message {
		return &pubsub.Message{Message: &pb.Message{Data: append([]byte(nil), data...)}, ID: id}
	}
	a, b := msg(big, string(sum[:])), msg(big, string(sum[:]))
	p2p.ShareGossipData(a)
	p2p.ShareGossipData(b)
	if &a.Data[0] != &b.Data[0] || !bytes.Equal(b.Data, big) {
		t.Fatalf("two copies of one payload: %p and %p, want one shared slice with the same bytes", &a.Data[0], &b.Data[0])
	}
	// A payload claiming the interned ID with other bytes keeps its own.
	forged := append([]byte(nil), big...)
	forged[0] ^= 1
	f := msg(forged, string(sum[:]))
	p2p.ShareGossipData(f)
	if &f.Data[0] == &a.Data[0] || !bytes.Equal(f.Data, forged) {
		t.Error("a payload with another's ID was swapped for the interned one")
	}
	// An ID that is not the payload's hash is not a key to intern under.
	other := bytes.Repeat([]byte("other "), 2000)
	o1, o2 := msg(other, "not-a-hash-of-it-32-bytes-long!!"), msg(other, "not-a-hash-of-it-32-bytes-long!!")
	p2p.ShareGossipData(o1)
	p2p.ShareGossipData(o2)
	if &o1.Data[0] == &o2.Data[0] {
		t.Error("payloads interned under an ID that is not their SHA-256")
	}
	small := []byte("a small order")
	ss := sha256.Sum256(small)
	s1, s2 := msg(small, string(ss[:])), msg(small, string(ss[:]))
	p2p.ShareGossipData(s1)
	p2p.ShareGossipData(s2)
	if &s1.Data[0] == &s2.Data[0] {
		t.Error("a small payload was shared")
	}
}
