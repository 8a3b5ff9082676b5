package node_test

import (
	"context"
	"slices"
	"testing"

	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
)

// offerOf waits until the buyer finds the provider's offer with want GPUs
// free in the H100 market, and returns it.
func offerOf(t *testing.T, ctx context.Context, buyer, provider *node.Node, want int, what string) api.OfferView {
	t.Helper()
	var got api.OfferView
	waitFor(t, ctx, what, func() (bool, string) {
		offers, err := buyer.Offers(ctx, api.OfferQuery{GPU: h100})
		if err != nil {
			return false, err.Error()
		}
		for _, o := range offers {
			if o.Provider == provider.PeerID().String() {
				got = o
				return o.FreeGPUs == want, sprint(o.Seq, o.FreeGPUs, o.Capacity)
			}
		}
		return false, sprint(offers)
	})
	return got
}

// TestOffersShowFreeCapacity: the offer a buyer finds counts the GPUs a
// lease holds as taken, with when they free up, and counts them free again
// as soon as the lease closes, well before its agreed end.
func TestOffersShowFreeCapacity(t *testing.T) {
	provider, buyer := startLeaseNet(t)
	ctx := marketCtx(t)
	total := 0
	for _, g := range provider.Published().Gpus {
		if g.Market == h100 {
			total++
		}
	}
	if total < 4 {
		t.Fatalf("provider offers %d H100s, want at least 4", total)
	}
	before := offerOf(t, ctx, buyer, provider, total, "every GPU free before any lease")
	if len(before.Capacity) != 1 || before.Capacity[0].Total != total || len(before.Capacity[0].Releases) != 0 {
		t.Fatalf("capacity before = %+v, want %d free and nothing leased", before.Capacity, total)
	}

	id := trade(t, ctx, provider, buyer, "10m")
	lv, err := buyer.Lease(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	during := offerOf(t, ctx, buyer, provider, total-2, "the leased GPUs counted as taken")
	c := during.Capacity[0]
	if c.Total != total || c.Free != total-2 || len(c.Releases) != 1 || c.Releases[0].Count != 2 || !c.Releases[0].At.Equal(lv.End) {
		t.Errorf("capacity during the lease = %+v, want %d of %d free and 2 freed at the lease's end %s", c, total-2, total, lv.End)
	}
	var leased []string
	for _, g := range during.GPUs {
		if g.LeasedUntil != nil {
			leased = append(leased, g.UUID)
			if !g.LeasedUntil.Equal(lv.End) {
				t.Errorf("GPU %s leased until %s, want the lease's end %s", g.UUID, g.LeasedUntil, lv.End)
			}
		}
	}
	slices.Sort(leased)
	gpus := slices.Sorted(slices.Values(lv.GPUs))
	if !slices.Equal(leased, gpus) {
		t.Errorf("GPUs marked leased = %v, want the lease's %v", leased, gpus)
	}
	// The free count filters.
	for _, q := range []struct {
		min  int
		want bool
	}{{total - 2, true}, {total - 1, false}} {
		offers, err := buyer.Offers(ctx, api.OfferQuery{GPU: h100, MinFreeGPUs: q.min})
		if err != nil {
			t.Fatal(err)
		}
		found := slices.ContainsFunc(offers, func(o api.OfferView) bool { return o.Provider == provider.PeerID().String() })
		if found != q.want {
			t.Errorf("Offers(min free %d) has the provider = %v, want %v", q.min, found, q.want)
		}
	}

	if _, err := buyer.CloseLease(ctx, id); err != nil {
		t.Fatal(err)
	}
	waitLeaseClosed(t, ctx, provider, id)
	after := offerOf(t, ctx, buyer, provider, total, "the GPUs free again once the lease closed")
	if after.Seq <= during.Seq || len(after.Capacity[0].Releases) != 0 {
		t.Errorf("offer after the lease: seq %d (during %d), capacity %+v; want a newer offer with nothing leased", after.Seq, during.Seq, after.Capacity)
	}
}
