package node_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/client"
	"github.com/suanli/suanli/node/devnet"
)

// TestAPI runs one suite against both implementations of node.API: the
// in-process Node and the HTTP Client of its daemon API.
func TestAPI(t *testing.T) {
	net := startNet(t, 1, 1)
	provider, buyer := net.Providers[0], net.Buyers[0]
	viaClient := func(n *node.Node) api.API {
		ep, err := client.ReadEndpoint(repoOf(t, n))
		if err != nil {
			t.Fatal(err)
		}
		return client.New(ep)
	}
	impls := []struct {
		name            string
		provider, buyer api.API
	}{
		{"in-process", provider, buyer},
		{"http", viaClient(provider), viaClient(buyer)},
	}
	for _, impl := range impls {
		t.Run(impl.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			id, err := impl.provider.ID(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if id.ID != provider.PeerID().String() || !id.Provider || len(id.Addrs) == 0 {
				t.Errorf("ID() = %+v, want provider %s with addrs", id, provider.PeerID())
			}
			for _, a := range id.Addrs {
				if !strings.HasSuffix(a, "/p2p/"+id.ID) {
					t.Errorf("ID() addr %q does not end in /p2p/%s", a, id.ID)
				}
			}
			bid, err := impl.buyer.ID(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if bid.Provider || bid.NoGPUReason == "" {
				t.Errorf("buyer ID() = %+v, want no provider and a reason", bid)
			}

			inv, err := impl.provider.GPUs(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(inv.GPUs) != 8 || inv.Backend != "sim:dgxh100" || inv.GPUs[0].Telemetry == nil {
				t.Errorf("GPUs() = %d GPUs from %q (telemetry %v), want 8 from sim:dgxh100 with telemetry", len(inv.GPUs), inv.Backend, inv.GPUs[0].Telemetry)
			}
			if _, err := impl.buyer.GPUs(ctx); !errors.Is(err, api.ErrNoGPUs) {
				t.Errorf("buyer GPUs() error = %v, want ErrNoGPUs", err)
			}

			if evs, err := impl.buyer.Evidence(ctx, ""); err != nil || len(evs) != 0 {
				t.Errorf("Evidence() = %+v, %v; want none yet", evs, err)
			}
			if _, err := impl.buyer.Evidence(ctx, "not-a-peer"); err == nil {
				t.Error("Evidence(not-a-peer) = nil error, want refused")
			}
			if _, err := impl.buyer.ExportEvidence(ctx, "fill/none"); err == nil {
				t.Error("ExportEvidence(fill/none) = nil error, want no such evidence")
			}

			offers, err := devnet.WaitFound(ctx, impl.buyer, api.OfferQuery{GPU: "h100"}, 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(offers) != 1 || offers[0].Provider != id.ID || len(offers[0].GPUs) != 8 {
				t.Errorf("Offers(h100) = %+v, want the provider's 8 GPUs", offers)
			}
			for _, bad := range []api.OfferQuery{
				{MaxPrice: "2.00001"},
				{MaxPrice: "abc"},
				{MaxPrice: "1", Currency: "XXX"},
				{Sort: "colour"},
				{MinGPUs: -1},
				{From: "gossip"},
				{From: api.OffersFromBook, GPU: "h100"}, // not a full market key
			} {
				if _, err := impl.buyer.Offers(ctx, bad); !errors.Is(err, api.ErrBadRequest) {
					t.Errorf("Offers(%+v) error = %v, want a bad-request error", bad, err)
				}
			}

			// Every filter reaches the node over HTTP too: no offer has
			// 10 000 vCPUs or 10 000 GiB of RAM per GPU.
			for _, q := range []api.OfferQuery{{GPU: "h100", MinVCPUsPerGPU: 10000}, {GPU: "h100", MinRAMGiBPerGPU: 10000}} {
				if got, err := impl.buyer.Offers(ctx, q); err != nil || len(got) != 0 {
					t.Errorf("Offers(%+v) = %d offers, %v; want none", q, len(got), err)
				}
			}

			peers, err := impl.buyer.Peers(ctx)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, p := range peers {
				found = found || p.ID == id.ID
			}
			if !found {
				t.Errorf("buyer Peers() = %+v, want it to include the provider %s", peers, id.ID)
			}
		})
	}
}

func repoOf(t *testing.T, n *node.Node) string {
	t.Helper()
	return n.Repo()
}
