package p2p_test

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
	"time"

	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// TestVerifiedOffer: an offer opened through a Verified cache is the one
// OpenOffer returns, remembered once; the same bytes again are not added
// again; a tampered copy of a remembered offer is refused and not
// remembered; the rules at now are checked on every hit (a remembered
// offer that has expired is refused).
func TestVerifiedOffer(t *testing.T) {
	k, id := testKey(t, 1)
	env := seal(t, k, testOffer(id, 3, t0))
	v := p2p.NewVerified(16)
	want, wantSigner, err := p2p.OpenOffer(env, t0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		o, signer, err := v.OpenOffer(env, t0)
		if err != nil || signer != wantSigner || !gproto.Equal(o, want) {
			t.Fatalf("open %d: Verified.OpenOffer = %v, %s, %v; want the offer of %s", i, o, signer, err, wantSigner)
		}
		if v.Len() != 1 {
			t.Fatalf("open %d: %d envelopes remembered, want 1", i, v.Len())
		}
	}
	bad := bookFlipSig(t, env)
	if _, _, err := v.OpenOffer(bad, t0); !errors.Is(err, p2p.ErrEnvelope) {
		t.Fatalf("tampered offer: err = %v, want ErrEnvelope", err)
	}
	if v.Len() != 1 {
		t.Fatalf("a refused envelope was remembered: %d entries", v.Len())
	}
	if _, _, err := v.OpenOffer(env, t0.Add(2*time.Hour)); err == nil {
		t.Fatal("a remembered offer was accepted after its expiry")
	}
	// The cache is per domain: an offer's bytes are not an order.
	if _, _, err := p2p.OpenWith[*proto.Order](v, env, proto.MaxOfferSize); err == nil {
		t.Fatal("a remembered offer opened as an order")
	}
}

// TestVerifiedValidator: the DHT's offer validator with a cache accepts
// and refuses exactly what it does without one, and picks the same record.
func TestVerifiedValidator(t *testing.T) {
	k, id := testKey(t, 1)
	old, cur := seal(t, k, testOffer(id, 3, t0)), seal(t, k, testOffer(id, 4, t0))
	key := proto.OfferKey(id)
	plain := p2p.OfferValidator{Now: func() time.Time { return t0 }}
	cached := p2p.OfferValidator{Now: plain.Now, Verified: p2p.NewVerified(16)}
	for round := range 2 {
		for i, val := range [][]byte{old, cur, bookFlipSig(t, cur)} {
			if e1, e2 := plain.Validate(key, val), cached.Validate(key, val); (e1 == nil) != (e2 == nil) {
				t.Fatalf("round %d record %d: Validate = %v with the cache, %v without", round, i, e2, e1)
			}
		}
		b1, _ := plain.Select(key, [][]byte{old, cur})
		b2, _ := cached.Select(key, [][]byte{old, cur})
		if b1 != 1 || b2 != 1 {
			t.Fatalf("round %d: Select = %d with the cache, %d without; want 1", round, b2, b1)
		}
	}
	if n := cached.Verified.Len(); n != 2 {
		t.Fatalf("%d envelopes remembered, want the 2 valid ones", n)
	}
}

// TestVerifiedFill: a fill whose take a party sealed with SealWith and
// whose accept it checked is opened without checking them again (the
// cache grows only by the envelopes it had not seen), and equals the
// uncached OpenFill's.
func TestVerifiedFill(t *testing.T) {
	for _, side := range []proto.Side{proto.Side_SIDE_BID, proto.Side_SIDE_ASK} {
		tr := bookNewTrade(t, side)
		order, take, accept := tr.seal(t)
		fill := &proto.Fill{Take: take, Accept: accept}
		want, err := p2p.OpenFill(fill, bookNow)
		if err != nil {
			t.Fatal(err)
		}
		v := p2p.NewVerified(16)
		if _, _, err := v.OpenOrder(order, bookNow); err != nil {
			t.Fatal(err)
		}
		got, err := v.OpenFill(fill, bookNow)
		if err != nil {
			t.Fatal(err)
		}
		if v.Len() != 3 {
			t.Fatalf("%d envelopes remembered after the fill, want 3 (order, take, accept)", v.Len())
		}
		if !reflect.DeepEqual(got.Fill, want.Fill) || !gproto.Equal(got.Lease, want.Lease) || !reflect.DeepEqual(got.TakerOrder, want.TakerOrder) {
			t.Fatalf("Verified.OpenFill = %+v, want %+v", got.Fill, want.Fill)
		}
		// A forged accept beside the remembered take is still refused.
		if _, err := v.OpenFill(&proto.Fill{Take: take, Accept: bookFlipSig(t, accept)}, bookNow); err == nil {
			t.Fatal("a fill with a forged accept was accepted")
		}
	}
}

// TestVerifiedBounded: past its size the cache starts over.
func TestVerifiedBounded(t *testing.T) {
	k, id := testKey(t, 1)
	v := p2p.NewVerified(2)
	for seq := range uint64(5) {
		if _, _, err := v.OpenOffer(seal(t, k, testOffer(id, seq+1, t0)), t0); err != nil {
			t.Fatal(err)
		}
		if v.Len() > 2 {
			t.Fatalf("%d envelopes remembered, bound 2", v.Len())
		}
	}
}

// FuzzVerifiedDecodeBook: for any message, a cache that already holds the
// seeds' signatures (valid messages that share envelopes with many
// mutations) decodes exactly what DecodeBook does, the first time and the
// second (from the cache).
func FuzzVerifiedDecodeBook(f *testing.F) {
	seeds := bookSeeds(f)
	for _, s := range seeds {
		f.Add(s)
	}
	// One cache for every input (safe for concurrent use): what it holds
	// may change what a decode costs, never what it returns.
	v := p2p.NewVerified(p2p.DefaultVerifiedEntries)
	for _, s := range seeds {
		v.DecodeBook(s, bookMkt, bookNow)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		want, werr := p2p.DecodeBook(data, bookMkt, bookNow)
		for pass := range 2 {
			got, err := v.DecodeBook(data, bookMkt, bookNow)
			if (err == nil) != (werr == nil) || (err != nil && err.Error() != werr.Error()) {
				t.Fatalf("pass %d: Verified.DecodeBook err = %v, DecodeBook's %v", pass, err, werr)
			}
			if err == nil {
				verifiedSameEvent(t, got, want)
			}
		}
	})
}

func verifiedSameEvent(t *testing.T, got, want *p2p.BookEvent) {
	t.Helper()
	same := got.Kind == want.Kind &&
		reflect.DeepEqual(got.Order, want.Order) && gproto.Equal(got.OrderProto, want.OrderProto) &&
		bytes.Equal(got.Envelope, want.Envelope) &&
		gproto.Equal(got.Offer, want.Offer) && got.OfferProvider == want.OfferProvider && bytes.Equal(got.OfferEnvelope, want.OfferEnvelope) &&
		gproto.Equal(got.Cancel, want.Cancel) && reflect.DeepEqual(got.CancelledOrder, want.CancelledOrder) &&
		reflect.DeepEqual(got.Fill, want.Fill) && gproto.Equal(got.Lease, want.Lease) && gproto.Equal(got.Take, want.Take) &&
		reflect.DeepEqual(got.TakerOrder, want.TakerOrder) && gproto.Equal(got.Raw, want.Raw)
	if !same {
		t.Fatalf("Verified.DecodeBook = %+v, DecodeBook = %+v", got, want)
	}
}
