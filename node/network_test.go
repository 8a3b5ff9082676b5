package node_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/devnet"
)

func micros(t *testing.T, decimal string) int64 {
	m, err := market.ParseMoney(decimal, "USD")
	if err != nil {
		t.Fatal(err)
	}
	return m.Micros
}

// quiet discards logs; SUANLI_TEST_LOG=debug shows them.
var quiet = func() *slog.Logger {
	if lvl := os.Getenv("SUANLI_TEST_LOG"); lvl != "" {
		var l slog.Level
		l.UnmarshalText([]byte(lvl))
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}()

// startNet starts a devnet of real nodes on 127.0.0.1 and waits until every
// provider has published.
func startNet(t *testing.T, providers, buyers int) *devnet.Net {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	net, err := devnet.Start(ctx, devnet.Config{Providers: providers, Buyers: buyers, Dir: t.TempDir(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { net.Close() })
	if err := net.WaitPublished(ctx); err != nil {
		t.Fatal(err)
	}
	return net
}

// TestNetworkFilters runs 10 real nodes (6 providers of four models in four
// regions, 4 buyers); every buyer must find every offer, and each filter
// must give exactly the expected set, computed from what the providers run.
func TestNetworkFilters(t *testing.T) {
	net := startNet(t, 6, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i, b := range net.Buyers {
		if _, err := devnet.WaitFound(ctx, b, api.OfferQuery{}, len(net.Providers)); err != nil {
			t.Fatalf("buyer %d: %v", i, err)
		}
	}
	providersWhere := func(keep func(devnet.Machine) bool) []string {
		var ids []string
		for i, m := range net.Machines {
			if keep(m) {
				ids = append(ids, net.Providers[i].PeerID().String())
			}
		}
		sort.Strings(ids)
		return ids
	}
	models := func(ms ...string) func(devnet.Machine) bool {
		return func(m devnet.Machine) bool { return slices.Contains(ms, m.Model) }
	}
	tests := []struct {
		name string
		q    api.OfferQuery
		want []string
	}{
		{"all", api.OfferQuery{}, providersWhere(func(devnet.Machine) bool { return true })},
		{"substring h100", api.OfferQuery{GPU: "h100"}, providersWhere(models("dgxh100"))},
		{"exact market key", api.OfferQuery{GPU: "nvidia-h200-sxm5-141gb"}, providersWhere(models("dgxh200"))},
		{"product name word", api.OfferQuery{GPU: "B200"}, providersWhere(models("dgxb200"))},
		{"min 8 GPUs", api.OfferQuery{GPU: "a100", MinGPUs: 8}, providersWhere(models("dgxa100"))},
		{"min 9 GPUs", api.OfferQuery{MinGPUs: 9}, nil},
		{"min 100 GiB", api.OfferQuery{MinVRAMGiB: 100}, providersWhere(models("dgxh200", "dgxb200"))},
		{"region", api.OfferQuery{Region: "CN-NM"}, providersWhere(func(m devnet.Machine) bool { return m.Region == "CN-NM" })},
		{"region prefix", api.OfferQuery{Region: "CN-"}, providersWhere(func(m devnet.Machine) bool { return m.Region[:3] == "CN-" })},
		{"max price", api.OfferQuery{MaxPrice: "2.49"}, providersWhere(func(m devnet.Machine) bool {
			return micros(t, m.Price) <= 2_490_000
		})},
		{"max price other currency", api.OfferQuery{MaxPrice: "100", Currency: "EUR"}, nil},
		{"cc evidence", api.OfferQuery{CCAttested: true}, providersWhere(models("dgxh100", "dgxh200"))},
		{"combined", api.OfferQuery{GPU: "h100", Region: "CN-NM", MaxPrice: "2.40"}, providersWhere(func(m devnet.Machine) bool {
			return m.Model == "dgxh100" && m.Region == "CN-NM" && micros(t, m.Price) <= 2_400_000
		})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i, b := range net.Buyers {
				got, err := b.Offers(ctx, tt.q)
				if err != nil {
					t.Fatalf("buyer %d: Offers(%+v) error %v", i, tt.q, err)
				}
				var ids []string
				for _, o := range got {
					ids = append(ids, o.Provider)
				}
				sort.Strings(ids)
				if !slices.Equal(ids, tt.want) {
					t.Errorf("buyer %d: Offers(%+v) = %v, want %v", i, tt.q, ids, tt.want)
				}
			}
		})
	}
}

// TestOfferViewMatchesProvider checks that what a buyer sees is what the
// provider published: GPUs, price as a decimal string, region, attestation.
func TestOfferViewMatchesProvider(t *testing.T) {
	net := startNet(t, 1, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	offers, err := devnet.WaitFound(ctx, net.Buyers[0], api.OfferQuery{GPU: "h100"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	o := offers[0]
	m := net.Machines[0]
	p := net.Providers[0]
	if o.Provider != p.PeerID().String() || o.Region != m.Region || o.Price != m.Price || o.Currency != m.Currency {
		t.Errorf("offer = %s %s %s %s, want %s %s %s %s", o.Provider, o.Region, o.Price, o.Currency, p.PeerID(), m.Region, m.Price, m.Currency)
	}
	if o.Attestation != "cc-evidence" {
		t.Errorf("attestation = %q, want cc-evidence for a simulated DGX H100", o.Attestation)
	}
	inv, err := p.GPUs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.GPUs) != 8 || len(inv.GPUs) != 8 {
		t.Fatalf("offer has %d GPUs, inventory %d, want 8", len(o.GPUs), len(inv.GPUs))
	}
	for i, g := range o.GPUs {
		want := inv.GPUs[i]
		if g.UUID != want.UUID || g.Market != "nvidia-h100-sxm5-80gb" || g.MemoryBytes != want.MemoryBytes || !g.Evidence {
			t.Errorf("GPU %d = %+v, want uuid %s market nvidia-h100-sxm5-80gb memory %d with evidence", i, g, want.UUID, want.MemoryBytes)
		}
	}
}
