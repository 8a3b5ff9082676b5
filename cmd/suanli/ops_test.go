package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
)

func TestConfigShowSet(t *testing.T) {
	t.Parallel()
	repo := filepath.Join(t.TempDir(), "repo")
	wantExit(t, []string{"--repo", repo, "init", "--stamp-bits", "8"}, 0)

	out, _ := wantExit(t, []string{"--repo", repo, "config", "show"}, 0)
	for _, want := range []string{"listen", "/ip4/127.0.0.1/tcp/0", "api", "127.0.0.1:0", "region", "CN-GZ", "price", "2.50", "currency", "USD"} {
		if !strings.Contains(out, want) {
			t.Errorf("config show lacks %q:\n%s", want, out)
		}
	}
	wantExit(t, []string{"--repo", repo, "config", "set", "region", "CN-NM"}, 0)
	wantExit(t, []string{"--repo", repo, "config", "set", "price", "1.39"}, 0)
	wantExit(t, []string{"--repo", repo, "config", "set", "listen", "/ip4/127.0.0.1/tcp/4001", "/ip4/127.0.0.1/udp/4001/quic-v1"}, 0)
	wantExit(t, []string{"--repo", repo, "config", "set", "gpu_sim", "dgxa100"}, 0)
	out, _ = wantExit(t, []string{"--repo", repo, "config", "show", "region"}, 0)
	if strings.TrimSpace(out) != "CN-NM" {
		t.Errorf("config show region = %q, want CN-NM", out)
	}
	out, _ = wantExit(t, []string{"--repo", repo, "--json", "config", "show"}, 0)
	var cfg node.Config
	if err := json.Unmarshal([]byte(out), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Region != "CN-NM" || cfg.Price != "1.39" || len(cfg.Listen) != 2 || cfg.GPUSim != "dgxa100" {
		t.Errorf("config after set = %+v", cfg)
	}
	if st, err := os.Stat(filepath.Join(repo, "config.json")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("config.json: %v, want mode 0600", err)
	}

	bad := []struct {
		args []string
		want string
	}{
		{[]string{"config", "set", "region", "guangzhou"}, "region"},
		{[]string{"config", "set", "price", "cheap"}, "price"},
		{[]string{"config", "set", "price", "1.234567"}, "price"},
		{[]string{"config", "set", "currency", "XXX"}, "currency"},
		{[]string{"config", "set", "api", "0.0.0.0:5001"}, "loopback"},
		{[]string{"config", "set", "api", "localhost:http-alt-nope"}, "port"},
		{[]string{"config", "set", "listen", "not-a-multiaddr"}, "listen"},
		{[]string{"config", "set", "listen"}, "at least one"},
		{[]string{"config", "set", "bootstrap", "/ip4/127.0.0.1/tcp/1"}, "/p2p/"},
		{[]string{"config", "set", "gpu_sim", "dgx9000"}, "gpu_sim"},
		{[]string{"config", "set", "colour", "red"}, "unknown key"},
		{[]string{"config", "set", "region", "CN-GZ", "CN-SH"}, "one value"},
		{[]string{"config", "set"}, "KEY VALUE"},
		{[]string{"config", "show", "colour"}, "unknown key"},
		{[]string{"config", "frob"}, "config show"},
		{[]string{"config"}, "config show"},
	}
	for _, tc := range bad {
		_, stderr := wantExit(t, append([]string{"--repo", repo}, tc.args...), 2)
		if !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "usage: suanli config") {
			t.Errorf("suanli %q: stderr %q, want %q and the usage line", tc.args, stderr, tc.want)
		}
	}
	// Nothing the refused sets asked for was written.
	after, err := node.LoadConfig(repo)
	if err != nil {
		t.Fatal(err)
	}
	if after.Region != "CN-NM" || after.Price != "1.39" || after.API != "127.0.0.1:0" || len(after.Bootstrap) != 0 {
		t.Errorf("config after refused sets = %+v", after)
	}
	wantExit(t, []string{"--repo", filepath.Join(t.TempDir(), "none"), "config", "show"}, 1)
}

func TestCompletion(t *testing.T) {
	t.Parallel()
	for _, shell := range []string{"bash", "zsh", "fish"} {
		out, _ := wantExit(t, []string{"completion", shell}, 0)
		for _, want := range []string{"dashboard", "status", "read-only", "gpu-sim"} {
			if !strings.Contains(out, want) {
				t.Errorf("completion %s lacks %q", shell, want)
			}
		}
		if p, err := exec.LookPath(shell); err == nil && shell != "fish" {
			cmd := exec.Command(p, "-n")
			cmd.Stdin = strings.NewReader(out)
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s -n on the completion script: %v\n%s", shell, err, b)
			}
		}
	}
	wantExit(t, []string{"completion", "tcsh"}, 2)
	wantExit(t, []string{"completion"}, 2)

	// Bash: complete "suanli dash", then "suanli daemon --gpu-s".
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	script, _ := wantExit(t, []string{"completion", "bash"}, 0)
	f := filepath.Join(t.TempDir(), "suanli.bash")
	if err := os.WriteFile(f, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		words string
		want  string
	}{
		{"suanli dash", "dashboard"},
		{"suanli daemon --gpu-si", "--gpu-sim"},
		{"suanli --repo /tmp/r config s", "show set"},
		{"suanli completion f", "fish"},
		{"suanli daemon --gpu-sim dgxh", "dgxh100 dgxh200"},
		{"suanli bid --type r", "reserved"},
		{"suanli evidence e", "export"},
		{"suanli offers --sort v", "vram"},
	} {
		prog := `source "$1"; COMP_WORDS=($2); COMP_CWORD=$((${#COMP_WORDS[@]}-1)); _suanli; echo "${COMPREPLY[*]}"`
		out, err := exec.Command(bash, "-c", prog, "bash", f, tc.words).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != tc.want {
			t.Errorf("bash completion of %q = %q (%v), want %q", tc.words, out, err, tc.want)
		}
	}
}

// TestStatusAndDashboard runs a node in-process on a repo and points the
// CLI at it: `status` shows the node, `dashboard` prints a URL whose token
// the API accepts, and `--read-only` one that cannot change anything.
func TestStatusAndDashboard(t *testing.T) {
	t.Parallel()
	repo := filepath.Join(t.TempDir(), "repo")
	n, err := node.New(node.WithRepo(repo), node.WithAutoInit(), node.WithListen("/ip4/127.0.0.1/tcp/0"), node.WithAPI("127.0.0.1:0"),
		node.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), node.WithoutGPU(), node.WithStampBits(8))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := n.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: "nvidia-h100-sxm5-80gb", Count: 1, Price: "1.00", Duration: "1h"}); err != nil {
		t.Fatal(err)
	}
	out, _ := wantExit(t, []string{"--repo", repo, "status"}, 0)
	flat := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{"node " + n.PeerID().String(), "peers 0", "markets joined 1: nvidia-h100-sxm5-80gb", "open orders 1 (of 1)", "running leases 0 (of 0)", "owed nothing", "offer published none (no GPUs)"} {
		if !strings.Contains(flat, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	out, _ = wantExit(t, []string{"--repo", repo, "--json", "status"}, 0)
	var st api.StatusView
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.OpenOrders != 1 || st.ID != n.PeerID().String() {
		t.Errorf("status --json = %s (%v)", out, err)
	}

	check := func(url string, method string, want int) {
		t.Helper()
		base, tok, ok := strings.Cut(strings.TrimSpace(url), "#token=")
		if !ok || !strings.HasSuffix(base, "/dashboard/") {
			t.Fatalf("dashboard URL %q: want http://host:port/dashboard/#token=...", url)
		}
		apiURL := strings.TrimSuffix(base, "/dashboard/") + "/api/v0/orders/nonexistent"
		if method == http.MethodGet {
			apiURL = strings.TrimSuffix(base, "/dashboard/") + "/api/v0/status"
		}
		req, _ := http.NewRequestWithContext(ctx, method, apiURL, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s %s with the URL's token: %d, want %d", method, apiURL, resp.StatusCode, want)
		}
	}
	full, _ := wantExit(t, []string{"--repo", repo, "dashboard"}, 0)
	check(full, http.MethodGet, 200)
	check(full, http.MethodDelete, 404) // allowed; the order does not exist
	ro, _ := wantExit(t, []string{"--repo", repo, "dashboard", "--read-only"}, 0)
	if ro == full {
		t.Error("dashboard --read-only printed the full token's URL")
	}
	check(ro, http.MethodGet, 200)
	check(ro, http.MethodDelete, 403)
	wantExit(t, []string{"--repo", repo, "dashboard", "--revoke-read-only"}, 0)
	check(ro, http.MethodGet, 401)
	wantExit(t, []string{"--repo", repo, "dashboard", "--read-only", "--revoke-read-only"}, 2)
	wantExit(t, []string{"--repo", filepath.Join(t.TempDir(), "none"), "dashboard"}, 1)
}
