package node_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/client"
)

// TestMetricsLint runs Prometheus's own metrics linter (what `promtool
// check metrics` runs) over a provider's /metrics, libp2p's metrics
// included: every name and type must pass.
func TestMetricsLint(t *testing.T) {
	repo := filepath.Join(t.TempDir(), "node")
	n, err := node.New(node.WithRepo(repo), node.WithAutoInit(), node.WithListen("/ip4/127.0.0.1/tcp/0"),
		node.WithAPI("127.0.0.1:0"), node.WithLogger(quiet), node.WithGPUSim("dgxh100", 1))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ep, err := client.ReadEndpoint(repo)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var body string
	waitFor(t, ctx, "GPU telemetry in /metrics", func() (bool, string) {
		resp, err := http.Get("http://" + ep.Addr + "/metrics")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		body = string(b)
		return err == nil && strings.Contains(body, "suanli_gpu_energy_joules_total{") && strings.Contains(body, "libp2p_"), body[:min(len(body), 200)]
	})
	probs, err := promlint.New(strings.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range probs {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	for _, want := range []string{"# TYPE suanli_gpu_energy_joules_total counter", "# TYPE libp2p_identify_", "suanli_gpus_free 8", "suanli_gpus_leased 0"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestLeaseMetrics: /metrics counts leases by role, state and reason, the
// receipts countersigned and what they bill, and the GPUs leased, as the
// lease views say.
func TestLeaseMetrics(t *testing.T) {
	provider, buyer := startLeaseNet(t)
	ctx := marketCtx(t)
	scrape := func(n *node.Node) string {
		ep, err := client.ReadEndpoint(n.Repo())
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Get("http://" + ep.Addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	id := trade(t, ctx, provider, buyer, "3s")
	waitFor(t, ctx, "the provider's metrics to show 2 GPUs leased", func() (bool, string) {
		body := scrape(provider)
		return strings.Contains(body, "suanli_gpus_leased 2") && strings.Contains(body, "suanli_gpus_free 6"), body
	})
	waitLeaseClosed(t, ctx, provider, id)
	waitLeaseClosed(t, ctx, buyer, id)
	// The last receipt may still come after the close: each side's metrics
	// are checked against its lease view as it stands before and after the
	// scrape.
	for _, side := range []struct {
		n    *node.Node
		role string
	}{{provider, "provider"}, {buyer, "buyer"}} {
		waitFor(t, ctx, side.role+"'s lease metrics", func() (bool, string) {
			before, err1 := side.n.Lease(ctx, id)
			body := scrape(side.n)
			after, err2 := side.n.Lease(ctx, id)
			if err1 != nil || err2 != nil || before.Cumulative != after.Cumulative || before.Countersigned != after.Countersigned {
				return false, sprint(before, after, err1, err2)
			}
			billed, err := market.ParseAmount(after.Cumulative, after.Currency)
			if err != nil || billed.Micros == 0 {
				return false, sprint(after, err)
			}
			for _, w := range []string{
				fmt.Sprintf(`suanli_leases{reason="completed",role="%s",state="closed"} 1`, side.role),
				fmt.Sprintf(`suanli_lease_billed_micros_total{currency="USD",role="%s"} %d`, side.role, billed.Micros),
				fmt.Sprintf(`suanli_lease_receipts_countersigned_total{role="%s"} %d`, side.role, after.Countersigned),
			} {
				if !strings.Contains(body, w) {
					return false, "lacks " + w
				}
			}
			return true, ""
		})
	}
	if body := scrape(provider); !strings.Contains(body, "suanli_gpus_leased 0") {
		t.Errorf("after the lease the provider still shows GPUs leased")
	}
}
