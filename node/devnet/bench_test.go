package devnet_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/devnet"
)

// BenchmarkFindMarket50 measures, in a 50-node loopback network (20
// providers of four models, 30 buyers), how long one buyer takes to find
// every offer of one market through the DHT: FindProviders, then GetValue
// and validation of each offer. Each iteration is one lookup by a different
// buyer; p50 and p95 are reported beside the mean.
//
//	go test -run x -bench FindMarket50 -benchtime 60x ./node/devnet/
func BenchmarkFindMarket50(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	net, err := devnet.Start(ctx, devnet.Config{
		Providers: 20, Buyers: 30, Dir: b.TempDir(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		b.Fatal(err)
	}
	defer net.Close()
	if err := net.WaitPublished(ctx); err != nil {
		b.Fatal(err)
	}
	const mkt = "nvidia-h100-sxm5-80gb"
	want := 0
	for _, m := range net.Machines {
		if devnet.MarketOf(m.Model) == mkt {
			want++
		}
	}
	// Warm up: every buyer's routing table settles.
	for _, buyer := range net.Buyers {
		if _, err := devnet.WaitFound(ctx, buyer, api.OfferQuery{GPU: mkt}, want); err != nil {
			b.Fatal(err)
		}
	}
	var took []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		buyer := net.Buyers[i%len(net.Buyers)]
		start := time.Now()
		offers, err := buyer.Offers(ctx, api.OfferQuery{GPU: mkt})
		took = append(took, time.Since(start))
		if err != nil || len(offers) != want {
			b.Fatalf("lookup %d found %d of %d offers: %v", i, len(offers), want, err)
		}
	}
	b.StopTimer()
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(took[len(took)*95/100].Microseconds())/1000, "p95-ms")
}
