package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/executor/dockertest"
)

// BenchmarkDockerLeaseStart measures, for a locally present image, the
// time from an accepted trade (the buyer's PlaceOrder returning with the
// fill) to the buyer seeing its container running, and to its first
// countersigned receipt (billing every second, so about one interval
// after the start), against the floor measured in the same run: a bare
// ContainerCreate+ContainerStart of the same image on the same engine.
//
//	go test -run XXX -bench DockerLeaseStart -benchtime 10x ./node/
func BenchmarkDockerLeaseStart(b *testing.B) {
	provider, buyer, image, _ := startDockerNet(b)
	c := dockertest.Engine(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	var bare time.Duration
	b.Run("bare-create-start", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			start := time.Now()
			res, err := c.ContainerCreate(ctx, client.ContainerCreateOptions{Image: image, Name: fmt.Sprintf("suanli-bench-%d-%d", time.Now().UnixNano(), i),
				Config: nil})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := c.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
				b.Fatal(err)
			}
			bare += time.Since(start)
			b.StopTimer()
			c.ContainerRemove(ctx, res.ID, client.ContainerRemoveOptions{Force: true})
			b.StartTimer()
		}
		bare /= time.Duration(b.N)
	})
	b.Run("trade-to-running", func(b *testing.B) {
		var toRun, toReceipt time.Duration
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			if _, err := provider.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: h100, Count: 2, Price: "2.40", MinDuration: "1s"}); err != nil {
				b.Fatal(err)
			}
			for {
				bk, err := buyer.Book(ctx, h100, "USD")
				if err == nil && len(bk.Asks) > 0 {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			b.StartTimer()
			bid, err := buyer.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: h100, Count: 2, Price: "2.50", Duration: "1m", IOC: true,
				Image: image, Ports: []uint16{8080}})
			if err != nil || len(bid.Fills) != 1 {
				b.Fatalf("bid = %+v, %v", bid, err)
			}
			accepted := time.Now()
			id := bid.Fills[0].Lease
			running := false
			for {
				v, err := buyer.Lease(ctx, id)
				if err != nil {
					b.Fatal(err)
				}
				if !running && v.ContainerState == "running" {
					running = true
					toRun += time.Since(accepted)
				}
				if v.Countersigned >= 1 && running {
					toReceipt += time.Since(accepted)
					break
				}
				if v.State == "closed" {
					b.Fatalf("lease closed early: %+v", v)
				}
				time.Sleep(2 * time.Millisecond)
			}
			b.StopTimer()
			if _, err := buyer.CloseLease(ctx, id); err != nil {
				b.Fatal(err)
			}
			for {
				v, err := provider.Lease(ctx, id)
				if err == nil && v.State == "closed" && v.ContainerState != "running" {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			b.StartTimer()
		}
		n := time.Duration(b.N)
		b.ReportMetric(float64((toRun/n).Microseconds())/1000, "ms-to-running")
		b.ReportMetric(float64((toReceipt/n).Microseconds())/1000, "ms-to-first-receipt")
		if bare > 0 {
			b.ReportMetric(float64(toRun/n)/float64(bare), "running/bare")
			b.ReportMetric(float64(bare.Microseconds())/1000, "ms-bare")
		}
	})
}
