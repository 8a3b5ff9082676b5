package node_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/devnet"
)

// TestHostileFreshKeyFlood: one raw peer publishes 24 h bids, each signed
// by a fresh key and published under it (a gossip author is only a key),
// twice as many as the target keeps (and no more than the new makers one
// relaying peer gets admitted at once: exchange's admission ignores the
// rest at the first hop, which exchange's own tests cover). The target's replica never holds more
// than its cap, keeps the best-priced bids, and counts each bid it turned
// away or dropped (rejects{kind=book} book-full and evicted). Negative
// control: an honest bid priced above the flood still gets in.
func TestHostileFreshKeyFlood(t *testing.T) {
	const capOrders, flood = 5, 10 // flood: exchange's newMakerPeerBurst
	ctx := marketCtx(t)
	startCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	net, err := devnet.Start(startCtx, devnet.Config{Providers: 1, Buyers: 1, Dir: t.TempDir(), Logger: quiet,
		NodeOptions: []node.Option{node.WithMaxRestingOrders(capOrders)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { net.Close() })
	target := net.Buyers[0]
	if _, err := target.Book(ctx, h100, "USD"); err != nil { // joins the market topic
		t.Fatal(err)
	}
	before := bookRejects(t, ctx, target)
	h := newHostile(t, ctx, target, h100)
	turnedAway := func(m map[string]float64) float64 { return m["book-full"] + m["evicted"] }
	orders := func() (int, api.BookView) {
		b, err := target.Book(ctx, h100, "USD")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, l := range b.Bids {
			n += l.Orders
		}
		return n, b
	}
	// In batches the hostile's own outbound queue (32 messages a peer in
	// gossipsub) does not drop: every bid reaches the target.
	const batch = 10
	for i := range flood {
		key, _, err := crypto.GenerateEd25519Key(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := peer.IDFromPrivateKey(key)
		bid := hostileBid(id, h100, int64(1_000_000+(i*37)%flood*1_000))
		bid.ExpiresUnixMs = time.Now().Add(24 * time.Hour).UnixMilli()
		if err := h.topic.Publish(ctx, orderMessage(t, key, bid), pubsub.WithSecretKeyAndPeerId(key, id)); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		if sent := i + 1; sent%batch == 0 || sent == flood {
			waitFor(t, ctx, fmt.Sprintf("%d bids applied", sent), func() (bool, string) {
				now := bookRejects(t, ctx, target)
				held, _ := orders()
				return held+int(turnedAway(now)-turnedAway(before)) == sent, sprint(held, before, now)
			})
		}
	}
	if n, b := orders(); n != capOrders {
		t.Errorf("target holds %d bids after a flood of %d, cap %d: %+v", n, flood, capOrders, b.Bids)
	}
	after := bookRejects(t, ctx, target)
	if got := turnedAway(after) - turnedAway(before); got != flood-capOrders {
		t.Errorf("book-full + evicted rose by %v, want %d", got, flood-capOrders)
	}
	// The kept bids are the best: none below the cap-th best price.
	_, b := orders()
	lowest := b.Bids[len(b.Bids)-1].Price
	if want := fmt.Sprintf("%.2f", float64(1_000_000+(flood-capOrders)*1_000)/1e6); lowest < want {
		t.Errorf("lowest bid kept %s, want at least %s", lowest, want)
	}

	// Negative control: an honest bid above the flood gets in.
	good := newHostile(t, ctx, target, h100)
	if err := good.topic.Publish(ctx, orderMessage(t, good.key, hostileBid(good.id, h100, 1_500_000))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the honest bid in the target's book", func() (bool, string) {
		n, b := orders()
		return n == capOrders && len(b.Bids) > 0 && b.Bids[0].Price == "1.50", sprint(b.Bids)
	})
}
