package node_test

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

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
	for _, want := range []string{"# TYPE suanli_gpu_energy_joules_total counter", "# TYPE libp2p_identify_"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
