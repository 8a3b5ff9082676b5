package node_test

import (
	"context"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/devnet"
)

// TestOffersFromBook: two providers of one market, only one of them with
// an open ask. From the book a buyer finds exactly the one with the ask
// (the offer its ask travelled with), without a DHT value lookup; from the
// DHT, and by default, it finds both; once the ask is cancelled the book
// lists nobody.
func TestOffersFromBook(t *testing.T) {
	net := startNet(t, 5, 1) // Providers[0] and [4] simulate DGX H100s
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	seller, quiet, buyer := net.Providers[0], net.Providers[4], net.Buyers[0]
	both := []string{seller.PeerID().String(), quiet.PeerID().String()}
	sort.Strings(both)
	providers := func(q api.OfferQuery) ([]string, error) {
		got, err := buyer.Offers(ctx, q)
		var ids []string
		for _, o := range got {
			ids = append(ids, o.Provider)
		}
		sort.Strings(ids)
		return ids, err
	}

	ask, err := seller.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: h100, Count: 2, Price: "9.00", MinDuration: "1s", PostOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	// The buyer has not joined the market: from the book it joins and
	// syncs, and the ask brings its offer.
	waitFor(t, ctx, "the seller's offer from the book", func() (bool, string) {
		ids, err := providers(api.OfferQuery{GPU: h100, From: api.OffersFromBook})
		return err == nil && slices.Equal(ids, []string{seller.PeerID().String()}), sprint(ids, err)
	})
	if _, err := devnet.WaitFound(ctx, buyer, api.OfferQuery{GPU: h100, From: api.OffersFromDHT}, 2); err != nil {
		t.Fatalf("from the DHT: %v", err)
	}
	for _, q := range []api.OfferQuery{{GPU: h100, From: api.OffersFromDHT}, {GPU: h100}} {
		if ids, err := providers(q); err != nil || !slices.Equal(ids, both) {
			t.Errorf("Offers(%+v) = %v, %v; want both providers %v", q, ids, err, both)
		}
	}
	// The quiet provider has no ask: the book never lists it.
	if ids, err := providers(api.OfferQuery{GPU: h100, From: api.OffersFromBook}); err != nil || !slices.Equal(ids, []string{seller.PeerID().String()}) {
		t.Errorf("from the book = %v, %v; want only the seller", ids, err)
	}
	if _, err := seller.CancelOrder(ctx, ask.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the book to list nobody once the ask is cancelled", func() (bool, string) {
		ids, err := providers(api.OfferQuery{GPU: h100, From: api.OffersFromBook})
		return err == nil && len(ids) == 0, sprint(ids, err)
	})
}
