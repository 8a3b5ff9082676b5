package trade

import (
	"crypto/rand"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

func TestTakeFresh(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for _, c := range []struct {
		name    string
		created time.Time
		fresh   bool
	}{
		{"now", now, true},
		{"oldest allowed", now.Add(-MaxTakeAge), true},
		{"a millisecond too old", now.Add(-MaxTakeAge - time.Millisecond), false},
		{"an hour old", now.Add(-time.Hour), false},
		{"ahead by the skew", now.Add(market.MaxClockSkew), true},
		{"a millisecond past the skew", now.Add(market.MaxClockSkew + time.Millisecond), false},
		{"1970", time.UnixMilli(0), false},
	} {
		if got := TakeFresh(c.created, now) == ""; got != c.fresh {
			t.Errorf("%s: fresh = %v, want %v (%s)", c.name, got, c.fresh, TakeFresh(c.created, now))
		}
	}
}

// signedTake is a take signed by a fresh key, and its signer.
func signedTake(t *testing.T, take *proto.Take) (peer.ID, []byte) {
	t.Helper()
	key, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	take.Taker = []byte(id)
	env, err := p2p.Seal(key, take, proto.MaxBookMessageSize)
	if err != nil {
		t.Fatal(err)
	}
	return id, env
}

// TestTakeAfterShutDoesNothing: once Shut has closed the takes gate, a
// take, of a resale ask too, is not answered, and this node makes none:
// neither touches anything (this Trader has no host, books, store or
// node: reaching them would panic). Before, a resale take ran ahead of the
// gate, on a store Close may have closed, and a taker's GPU hold was
// ordered before Close only by the trade lock.
func TestTakeAfterShutDoesNothing(t *testing.T) {
	id, env := signedTake(t, &proto.Take{Market: "nvidia-h100-sxm5-80gb", MakerOrderId: "resale-ask",
		Quantity: 1, PriceMicros: 1, Currency: "USD", CreatedUnixMs: time.Now().UnixMilli()})
	tr := New(Config{Now: time.Now})
	closed := false
	tr.Shut(func() { closed = true })
	if !closed {
		t.Fatal("Shut did not run its function")
	}
	if reply := tr.HandleTake(t.Context(), id, env); reply != nil {
		t.Fatalf("a take after Shut was answered: %v", reply)
	}
	// Nor is one made: the take loop reaches no book, store or node.
	now := time.Now()
	tr.TakeLoop(t.Context(), &market.Order{ID: "bid", Side: market.Bid, Market: "nvidia-h100-sxm5-80gb", Currency: "USD", Quantity: 1,
		Price: 1, Expires: now.Add(time.Hour)}, nil)
}
