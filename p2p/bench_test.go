package p2p_test

import (
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// signedLen is the length of what an offer envelope's signature covers:
// varint-prefixed domain, payload type and payload.
func signedLen(payload int) int {
	uvarintLen := func(n int) int {
		l := 1
		for ; n >= 0x80; n >>= 7 {
			l++
		}
		return l
	}
	d, c := len(proto.OfferDomain), len(proto.OfferCodec)
	return uvarintLen(d) + d + uvarintLen(c) + c + uvarintLen(payload) + payload
}

func benchValidate(b *testing.B, o *proto.Offer, env []byte) {
	v := p2p.OfferValidator{Now: func() time.Time { return t0 }}
	key := proto.OfferKey(peer.ID(o.Provider))
	if err := v.Validate(key, env); err != nil {
		b.Fatalf("Validate = %v, want nil", err)
	}
	b.SetBytes(int64(len(env)))
	b.ReportAllocs()
	for b.Loop() {
		if err := v.Validate(key, env); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOfferValidate is the DHT validator on a realistic self-reported
// 8-GPU offer (about 2 KB): size, envelope, signature, signer, market rules.
func BenchmarkOfferValidate(b *testing.B) {
	k, a := testKey(b, 1)
	o := testOffer(a, 1, t0)
	benchValidate(b, o, seal(b, k, o))
}

// BenchmarkOfferValidateCCEvidence is the same with confidential-computing
// evidence: a 4117-byte report per GPU and a shared 5-certificate chain
// (about 36 KB sealed).
func BenchmarkOfferValidateCCEvidence(b *testing.B) {
	k, a := testKey(b, 1)
	o := withCCEvidence(testOffer(a, 1, t0))
	benchValidate(b, o, seal(b, k, o))
}

// BenchmarkEd25519Verify is the floor of BenchmarkOfferValidate: one raw
// Ed25519 verification of a message as long as the offer's signed bytes.
func BenchmarkEd25519Verify(b *testing.B) {
	_, a := testKey(b, 1)
	payload := marshalOffer(b, testOffer(a, 1, t0))
	msg := make([]byte, signedLen(len(payload)))
	copy(msg, payload)
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		b.Fatal(err)
	}
	sig := ed25519.Sign(priv, msg)
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if !ed25519.Verify(pub, msg, sig) {
			b.Fatal("Verify = false, want true")
		}
	}
}

// BenchmarkOfferSelect is the DHT picking the newest of 4 offers of a
// provider, which opens every one of them.
func BenchmarkOfferSelect(b *testing.B) {
	k, a := testKey(b, 1)
	v := p2p.OfferValidator{Now: func() time.Time { return t0 }}
	var vals [][]byte
	for seq := range uint64(4) {
		vals = append(vals, seal(b, k, testOffer(a, seq+1, t0)))
	}
	key := proto.OfferKey(a)
	b.ReportAllocs()
	for b.Loop() {
		if i, err := v.Select(key, vals); err != nil || i != 3 {
			b.Fatalf("Select = %d, %v, want 3, nil", i, err)
		}
	}
}
