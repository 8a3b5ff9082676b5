package p2p_test

import (
	"errors"
	"testing"
	"time"

	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// bookWith is a book message with what travels beside its body.
func bookWith(tb testing.TB, body []byte, offer, cancelled []byte) []byte {
	tb.Helper()
	var m proto.BookMessage
	if err := gproto.Unmarshal(body, &m); err != nil {
		tb.Fatal(err)
	}
	m.Offer, m.CancelledOrder = offer, cancelled
	return bookMarshal(tb, &m)
}

// bookAttachedSeeds are an ask with its maker's offer and a cancel with
// its order: valid messages that carry what validates them.
func bookAttachedSeeds(tb testing.TB) [][]byte {
	maker := bookKey(tb, bookMakerSeed)
	offer := seal(tb, maker.key, testOffer(maker.id, 7, bookNow))
	ask := bookSignedOrder(tb, maker, maker, proto.Side_SIDE_ASK, nil)
	orderEnv := bookSeal(tb, maker.key, bookOrder(maker.id, proto.Side_SIDE_ASK))
	d := p2p.OfferDigest(offer)
	return [][]byte{
		bookWith(tb, ask, offer, nil),
		bookWithDigest(tb, ask, d[:]),
		bookWith(tb, bookCancelMsg(tb, bookSeal(tb, maker.key, bookCancel(tb, maker))), nil, orderEnv),
	}
}

// TestDecodeBookAttached: an ask with its maker's valid offer beside it
// decodes with the offer verified, a cancel with the order it withdraws
// with that order; an offer signed by another key, tampered with or beside
// a bid, and an order of another maker or another ID beside a cancel, are
// refused as bad-offer; anything beside a fill, or the wrong thing beside
// an order or cancel, is a schema error.
func TestDecodeBookAttached(t *testing.T) {
	maker, third := bookKey(t, bookMakerSeed), bookKey(t, bookThirdSeed)
	offer := seal(t, maker.key, testOffer(maker.id, 7, bookNow))
	ask := bookSignedOrder(t, maker, maker, proto.Side_SIDE_ASK, nil)

	ev, err := p2p.DecodeBook(bookWith(t, ask, offer, nil), bookMkt, bookNow)
	if err != nil {
		t.Fatalf("ask with its maker's offer: %v", err)
	}
	if ev.Offer == nil || ev.OfferProvider != maker.id || ev.Offer.Seq != 7 || string(ev.OfferEnvelope) != string(offer) {
		t.Fatalf("ask with its offer decoded as %+v", ev)
	}
	// Negative control of the plain ask: no offer, none recorded.
	if ev, err := p2p.DecodeBook(ask, bookMkt, bookNow); err != nil || ev.Offer != nil {
		t.Fatalf("plain ask = %+v, %v", ev, err)
	}

	// An offer that has expired since the ask was made still backs it,
	// and is said to have expired: a replica hands on the offer an ask
	// travelled with for as long as the ask is open, and one that gets the
	// ask late decides as those that got it on time did. (The valid offer
	// above is the negative control: attached, and OfferExpired false.)
	if ev.OfferExpired {
		t.Fatal("a valid offer said expired")
	}
	// The ask was made a minute before bookNow; this offer expired 30 s
	// after that.
	since := seal(t, maker.key, testOffer(maker.id, 7, bookNow.Add(-60*time.Minute-30*time.Second)))
	if ev, err := p2p.DecodeBook(bookWith(t, ask, since, nil), bookMkt, bookNow); err != nil || ev.Offer == nil || string(ev.OfferEnvelope) != string(since) || !ev.OfferExpired {
		t.Fatalf("ask with the offer it was made on, expired since = %+v, %v; want both, OfferExpired", ev, err)
	}
	// An offer already expired when the ask was made backs nothing.
	before := seal(t, maker.key, testOffer(maker.id, 7, bookNow.Add(-61*time.Minute))) // expired as the ask was made
	if _, err := p2p.DecodeBook(bookWith(t, ask, before, nil), bookMkt, bookNow); !errors.Is(err, p2p.ErrBookOffer) || !errors.Is(err, market.ErrOfferExpired) {
		t.Fatalf("ask with an offer expired before it = %v, want %v", err, market.ErrOfferExpired)
	}
	// An expired offer made after the ask (its provider refreshed it
	// while the ask was open) backs it too: it was valid when it was made.
	later := bookSignedOrder(t, maker, maker, proto.Side_SIDE_ASK, func(o *proto.Order) {
		o.CreatedUnixMs = bookNow.Add(-2 * time.Hour).UnixMilli()
	})
	if ev, err := p2p.DecodeBook(bookWith(t, later, since, nil), bookMkt, bookNow); err != nil || !ev.OfferExpired || ev.Offer == nil {
		t.Fatalf("ask made before its expired offer = %+v, %v; want both, OfferExpired", ev, err)
	}
	// A backdated ask outlives the offer it was made on by MaxOrderTTL at
	// most; the control one minute inside that is accepted.
	made := bookNow.Add(-23 * time.Hour)
	old := seal(t, maker.key, testOffer(maker.id, 7, made)) // expires made+1h
	for _, c := range []struct {
		expires time.Time
		ok      bool
	}{{made.Add(time.Hour + market.MaxOrderTTL - time.Minute), true}, {made.Add(time.Hour + market.MaxOrderTTL + time.Minute), false}} {
		backdated := bookSignedOrder(t, maker, maker, proto.Side_SIDE_ASK, func(o *proto.Order) {
			o.CreatedUnixMs, o.ExpiresUnixMs = made.UnixMilli(), c.expires.UnixMilli()
		})
		ev, err := p2p.DecodeBook(bookWith(t, backdated, old, nil), bookMkt, bookNow)
		if c.ok && (err != nil || !ev.OfferExpired) {
			t.Fatalf("ask expiring %s after its offer = %+v, %v; want accepted", c.expires.Sub(made.Add(time.Hour)), ev, err)
		}
		if !c.ok && !errors.Is(err, p2p.ErrBookOffer) {
			t.Fatalf("ask expiring %s after its offer = %v, want %v", c.expires.Sub(made.Add(time.Hour)), err, p2p.ErrBookOffer)
		}
	}
	// An expired offer is opened first: one with a broken signature is
	// refused.
	if _, err := p2p.DecodeBook(bookWith(t, ask, bookFlipSig(t, since), nil), bookMkt, bookNow); !errors.Is(err, p2p.ErrBookOffer) {
		t.Fatalf("ask with a forged expired offer = %v, want %v", err, p2p.ErrBookOffer)
	}

	orderEnv := bookSeal(t, maker.key, bookOrder(maker.id, proto.Side_SIDE_ASK))
	cancel := bookCancelMsg(t, bookSeal(t, maker.key, bookCancel(t, maker)))
	ev, err = p2p.DecodeBook(bookWith(t, cancel, nil, orderEnv), bookMkt, bookNow)
	if err != nil {
		t.Fatalf("cancel with its order: %v", err)
	}
	if ev.CancelledOrder == nil || ev.CancelledOrder.ID != ev.Cancel.OrderId || string(ev.Envelope) == "" {
		t.Fatalf("cancel with its order decoded as %+v", ev)
	}

	otherOrder := bookSeal(t, maker.key, func() *proto.Order {
		o := bookOrder(maker.id, proto.Side_SIDE_ASK)
		o.Nonce++
		return o
	}())
	thirdOrder := bookSeal(t, third.key, bookOrder(third.id, proto.Side_SIDE_ASK))
	cases := []struct {
		name string
		msg  []byte
		want error
	}{
		{"offer signed by another provider", bookWith(t, ask, seal(t, third.key, testOffer(third.id, 7, bookNow)), nil), p2p.ErrBookOffer},
		{"offer naming the maker, signed by another", bookWith(t, ask, seal(t, third.key, testOffer(maker.id, 7, bookNow)), nil), p2p.ErrBookOffer},
		{"offer with a broken signature", bookWith(t, ask, bookFlipSig(t, offer), nil), p2p.ErrBookOffer},
		{"offer beside a bid", bookWith(t, bookSignedOrder(t, maker, maker, proto.Side_SIDE_BID, nil), offer, nil), p2p.ErrBookOffer},
		{"another order beside a cancel", bookWith(t, cancel, nil, otherOrder), p2p.ErrBookOffer},
		{"another maker's order beside a cancel", bookWith(t, cancel, nil, thirdOrder), p2p.ErrBookOffer},
		{"junk beside a cancel", bookWith(t, cancel, nil, []byte("junk")), p2p.ErrBookOffer},
		{"offer beside a cancel", bookWith(t, cancel, offer, nil), p2p.ErrBookSchema},
		{"order beside an order", bookWith(t, ask, nil, orderEnv), p2p.ErrBookSchema},
		{"offer beside a fill", bookWith(t, bookNewTrade(t, proto.Side_SIDE_BID).msg(t), offer, nil), p2p.ErrBookSchema},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev, err := p2p.DecodeBook(c.msg, bookMkt, bookNow)
			if !errors.Is(err, c.want) {
				t.Fatalf("DecodeBook = %+v, %v; want %v", ev, err, c.want)
			}
			bookCheckRefused(t, ev, err)
			if c.want == p2p.ErrBookOffer && p2p.BookReason(err) != "bad-offer" {
				t.Fatalf("reason %q, want bad-offer", p2p.BookReason(err))
			}
		})
	}
}

// bookWithDigest is a book message with an offer digest beside its body.
func bookWithDigest(tb testing.TB, body, digest []byte) []byte {
	tb.Helper()
	var m proto.BookMessage
	if err := gproto.Unmarshal(body, &m); err != nil {
		tb.Fatal(err)
	}
	m.OfferDigest = digest
	return bookMarshal(tb, &m)
}

// TestDecodeBookOfferDigest: an ask with its offer's digest beside it
// decodes with the digest and no offer; AttachPulled then takes the offer
// the digest names and nothing else: another offer, even a valid one of
// the maker's, is bad-offer, as is the named offer when it does not back
// the ask (signed by another key). A digest beside a bid is bad-offer; of
// the wrong size, beside an offer, a cancel or a fill, a schema error.
func TestDecodeBookOfferDigest(t *testing.T) {
	maker, third := bookKey(t, bookMakerSeed), bookKey(t, bookThirdSeed)
	offer := seal(t, maker.key, testOffer(maker.id, 7, bookNow))
	d := p2p.OfferDigest(offer)
	ask := bookSignedOrder(t, maker, maker, proto.Side_SIDE_ASK, nil)

	ev, err := p2p.DecodeBook(bookWithDigest(t, ask, d[:]), bookMkt, bookNow)
	if err != nil {
		t.Fatalf("ask with its offer's digest: %v", err)
	}
	if ev.Offer != nil || string(ev.OfferDigest) != string(d[:]) {
		t.Fatalf("ask with a digest decoded as %+v", ev)
	}
	if err := (*p2p.Verified)(nil).AttachPulled(ev, offer, bookNow); err != nil {
		t.Fatalf("AttachPulled(the named offer) = %v", err)
	}
	if ev.Offer == nil || ev.OfferProvider != maker.id || string(ev.OfferEnvelope) != string(offer) {
		t.Fatalf("pulled offer attached as %+v", ev)
	}

	thirdOffer := seal(t, third.key, testOffer(third.id, 7, bookNow))
	for _, c := range []struct {
		name   string
		digest [p2p.OfferDigestSize]byte
		pulled []byte
	}{
		{"another offer of the maker's", d, seal(t, maker.key, testOffer(maker.id, 8, bookNow))},
		{"the named offer, another's", p2p.OfferDigest(thirdOffer), thirdOffer},
		{"junk", d, []byte("junk")},
	} {
		t.Run(c.name, func(t *testing.T) {
			ev, err := p2p.DecodeBook(bookWithDigest(t, ask, c.digest[:]), bookMkt, bookNow)
			if err != nil {
				t.Fatal(err)
			}
			if err := (*p2p.Verified)(nil).AttachPulled(ev, c.pulled, bookNow); !errors.Is(err, p2p.ErrBookOffer) || ev.Offer != nil {
				t.Fatalf("AttachPulled = %v, offer %v; want bad-offer, none attached", err, ev.Offer)
			}
		})
	}

	cancel := bookCancelMsg(t, bookSeal(t, maker.key, bookCancel(t, maker)))
	withBoth := func() []byte {
		var m proto.BookMessage
		if err := gproto.Unmarshal(bookWith(t, ask, offer, nil), &m); err != nil {
			t.Fatal(err)
		}
		m.OfferDigest = d[:]
		return bookMarshal(t, &m)
	}()
	for _, c := range []struct {
		name string
		msg  []byte
		want error
	}{
		{"digest beside a bid", bookWithDigest(t, bookSignedOrder(t, maker, maker, proto.Side_SIDE_BID, nil), d[:]), p2p.ErrBookOffer},
		{"short digest", bookWithDigest(t, ask, d[:31]), p2p.ErrBookSchema},
		{"long digest", bookWithDigest(t, ask, append(d[:], 0)), p2p.ErrBookSchema},
		{"digest and offer", withBoth, p2p.ErrBookSchema},
		{"digest beside a cancel", bookWithDigest(t, cancel, d[:]), p2p.ErrBookSchema},
		{"digest beside a fill", bookWithDigest(t, bookNewTrade(t, proto.Side_SIDE_BID).msg(t), d[:]), p2p.ErrBookSchema},
	} {
		t.Run(c.name, func(t *testing.T) {
			ev, err := p2p.DecodeBook(c.msg, bookMkt, bookNow)
			if !errors.Is(err, c.want) {
				t.Fatalf("DecodeBook = %+v, %v; want %v", ev, err, c.want)
			}
			bookCheckRefused(t, ev, err)
		})
	}
	// A pull for an ask that travelled without a digest is refused.
	plain, err := p2p.DecodeBook(ask, bookMkt, bookNow)
	if err != nil {
		t.Fatal(err)
	}
	if err := (*p2p.Verified)(nil).AttachPulled(plain, offer, bookNow); !errors.Is(err, p2p.ErrBookOffer) {
		t.Fatalf("AttachPulled without a digest = %v, want bad-offer", err)
	}
}
