package p2p_test

import (
	"errors"
	"testing"

	gproto "google.golang.org/protobuf/proto"

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
	return [][]byte{
		bookWith(tb, ask, offer, nil),
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
		{"expired offer", bookWith(t, ask, seal(t, maker.key, testOffer(maker.id, 7, bookNow.Add(-2*60*60*1e9))), nil), p2p.ErrBookOffer},
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
