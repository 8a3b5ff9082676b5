package node

import (
	"encoding/json"
	"os"
	"regexp"
	"testing"

	"github.com/suanli/suanli/gpu"
	"github.com/suanli/suanli/node/internal/metrics"
)

// TestGrafanaDashboard checks contrib/grafana's dashboard against the
// metrics a node registers: every suanli_ metric a panel queries exists,
// and the panels have unique ids. Metrics on no panel are logged.
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile("../contrib/grafana/suanli-node.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			ID      int    `json:"id"`
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("grafana JSON: %v", err)
	}
	m := metrics.New()
	watchMetrics(m, &Node{})
	m.Observe([]gpu.Telemetry{{UUID: "GPU-x"}})
	m.Rejects.WithLabelValues("order", "bad_signature").Inc()
	fams, err := m.Reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, f := range fams {
		have[f.GetName()] = true
	}
	name := regexp.MustCompile(`suanli_[a-z0-9_]+`)
	ids := map[int]bool{}
	queried := map[string]bool{}
	exprs := []string{}
	for _, v := range d.Templating.List {
		exprs = append(exprs, v.Definition)
	}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, e := range exprs {
		for _, n := range name.FindAllString(e, -1) {
			queried[n] = true
			if !have[n] {
				t.Errorf("the dashboard queries %s, which a node does not export (in %q)", n, e)
			}
		}
	}
	// A metric added later without a panel is noted, not a failure.
	for n := range have {
		if regexp.MustCompile(`^suanli_`).MatchString(n) && !queried[n] {
			t.Logf("metric %s is on no panel of the dashboard yet", n)
		}
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard uid %q, title %q: want both", d.UID, d.Title)
	}
}
