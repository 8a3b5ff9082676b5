package node_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/client"
)

// startLone starts one buyer node with its API on loopback, on repo.
func startLone(t *testing.T, repo string) *node.Node {
	t.Helper()
	n, err := node.New(node.WithRepo(repo), node.WithAutoInit(), node.WithListen("/ip4/127.0.0.1/tcp/0"),
		node.WithAPI("127.0.0.1:0"), node.WithLogger(quiet), node.WithoutGPU())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

type apiCall struct {
	method, path, body string
	header             map[string]string
	host               string
}

func doAPI(t *testing.T, addr string, c apiCall) (int, string) {
	t.Helper()
	var rd io.Reader
	if c.body != "" {
		rd = strings.NewReader(c.body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, c.method, "http://"+addr+c.path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if c.host != "" {
		req.Host = c.host
	}
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", c.method, c.path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAPIAccess checks who may do what on the local API: no token or a
// wrong one gets 401 and changes nothing; a foreign Host or Origin gets
// 403 even with the token; a read-only token reads but cannot change; a
// malformed body gets a 400 that names the field.
func TestAPIAccess(t *testing.T) {
	repo := filepath.Join(t.TempDir(), "node")
	n := startLone(t, repo)
	defer func() { n.Close() }()
	ep, err := client.ReadEndpoint(repo)
	if err != nil {
		t.Fatal(err)
	}
	ro, err := node.IssueReadOnlyToken(repo)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(repo, "api.readonly")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("api.readonly: %v, want mode 0600", err)
	}
	full := map[string]string{"Authorization": "Bearer " + ep.Token}
	readOnly := map[string]string{"Authorization": "Bearer " + ro}
	with := func(h map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range h {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	order := `{"side":"bid","market":"nvidia-h100-sxm5-80gb","count":1,"price":"1.00","duration":"1h"}`
	_, port, _ := strings.Cut(ep.Addr, ":")
	tests := []struct {
		name   string
		call   apiCall
		status int
		want   string // in the body
	}{
		{"no token", apiCall{method: "GET", path: "/api/v0/id"}, 401, "token"},
		{"wrong token", apiCall{method: "GET", path: "/api/v0/id", header: map[string]string{"Authorization": "Bearer " + strings.Repeat("0", 64)}}, 401, "token"},
		{"not bearer", apiCall{method: "GET", path: "/api/v0/id", header: map[string]string{"Authorization": ep.Token}}, 401, "token"},
		{"no token order", apiCall{method: "POST", path: "/api/v0/orders", body: order}, 401, "token"},
		{"no token cancel", apiCall{method: "DELETE", path: "/api/v0/orders/x"}, 401, "token"},
		{"no token history", apiCall{method: "GET", path: "/api/v0/history/nvidia-h100-sxm5-80gb"}, 401, "token"},
		{"full token", apiCall{method: "GET", path: "/api/v0/id", header: full}, 200, n.PeerID().String()},
		{"localhost host", apiCall{method: "GET", path: "/api/v0/id", header: full, host: "localhost:" + port}, 200, n.PeerID().String()},
		{"foreign host", apiCall{method: "GET", path: "/api/v0/id", header: full, host: "evil.example:" + port}, 403, "host"},
		{"foreign host metrics", apiCall{method: "GET", path: "/metrics", host: "evil.example"}, 403, "host"},
		{"foreign host dashboard", apiCall{method: "GET", path: "/dashboard/", host: "rebind.example:" + port}, 403, "host"},
		{"other port", apiCall{method: "GET", path: "/api/v0/id", header: full, host: "127.0.0.1:1"}, 403, "host"},
		{"foreign origin", apiCall{method: "POST", path: "/api/v0/orders", body: order, header: with(full, "Origin", "http://evil.example")}, 403, "origin"},
		{"foreign origin same host other scheme", apiCall{method: "POST", path: "/api/v0/orders", body: order, header: with(full, "Origin", "https://"+ep.Addr)}, 403, "origin"},
		{"null origin", apiCall{method: "DELETE", path: "/api/v0/orders/x", header: with(full, "Origin", "null")}, 403, "origin"},
		{"cross-site fetch", apiCall{method: "GET", path: "/api/v0/id", header: with(full, "Sec-Fetch-Site", "cross-site")}, 403, "cross-site"},
		{"own origin", apiCall{method: "GET", path: "/api/v0/orders", header: with(full, "Origin", "http://"+ep.Addr)}, 200, "[]"},
		{"read-only reads", apiCall{method: "GET", path: "/api/v0/orders", header: readOnly}, 200, "[]"},
		{"read-only access", apiCall{method: "GET", path: "/api/v0/access", header: readOnly}, 200, `"read-only"`},
		{"full access", apiCall{method: "GET", path: "/api/v0/access", header: full}, 200, `"full"`},
		{"read-only cannot order", apiCall{method: "POST", path: "/api/v0/orders", body: order, header: readOnly}, 403, "read-only"},
		{"read-only cannot cancel", apiCall{method: "DELETE", path: "/api/v0/orders/x", header: readOnly}, 403, "read-only"},
		{"read-only cannot close", apiCall{method: "POST", path: "/api/v0/leases/x/close", body: "{}", header: readOnly}, 403, "read-only"},
		// Reads that would act on the network are refused, or answered from
		// what the node holds.
		{"read-only cannot attest", apiCall{method: "GET", path: "/api/v0/attest/" + n.PeerID().String() + "?timeout=2s", header: readOnly}, 403, "read-only"},
		{"read-only cannot join", apiCall{method: "GET", path: "/api/v0/book/nvidia-b200-sxm6-180gb", header: readOnly}, 403, "not joined"},
		{"read-only trades cannot join", apiCall{method: "GET", path: "/api/v0/trades/nvidia-b200-sxm6-180gb", header: readOnly}, 403, "not joined"},
		{"read-only offers from store", apiCall{method: "GET", path: "/api/v0/offers", header: readOnly}, 200, "[]"},
		{"full token joins", apiCall{method: "GET", path: "/api/v0/book/nvidia-a100-sxm4-80gb", header: full}, 200, "nvidia-a100-sxm4-80gb"},
		{"read-only reads a joined book", apiCall{method: "GET", path: "/api/v0/book/nvidia-a100-sxm4-80gb", header: readOnly}, 200, "nvidia-a100-sxm4-80gb"},
		{"count a string", apiCall{method: "POST", path: "/api/v0/orders", body: `{"side":"bid","count":"three"}`, header: full}, 400, `field \"count\"`},
		{"unknown field", apiCall{method: "POST", path: "/api/v0/orders", body: `{"side":"bid","colour":"red"}`, header: full}, 400, `unknown field \"colour\"`},
		{"truncated", apiCall{method: "POST", path: "/api/v0/orders", body: `{"side":"bid"`, header: full}, 400, "truncated"},
		{"empty body", apiCall{method: "POST", path: "/api/v0/orders", header: full}, 400, "empty body"},
		{"trailing", apiCall{method: "POST", path: "/api/v0/orders", body: `{"side":"bid"} {}`, header: full}, 400, "trailing"},
		{"not an object", apiCall{method: "POST", path: "/api/v0/orders", body: `[1]`, header: full}, 400, "JSON object"},
		{"payment regions", apiCall{method: "POST", path: "/api/v0/settle/ack", body: `{"peer":7}`, header: full}, 400, `field \"peer\"`},
		{"history limit", apiCall{method: "GET", path: "/api/v0/history/nvidia-h100-sxm5-80gb?limit=x", header: full}, 400, "limit"},
		{"history market", apiCall{method: "GET", path: "/api/v0/history/NOT A MARKET", header: full}, 400, "market"},
		{"page status", apiCall{method: "GET", path: "/api/v0/orders-page?status=lost", header: full}, 400, "status"},
		{"dashboard without token", apiCall{method: "GET", path: "/dashboard/"}, 200, "Log in"},
		{"root redirects", apiCall{method: "GET", path: "/"}, 302, ""},
	}
	for _, tc := range tests {
		status, body := doAPI(t, ep.Addr, tc.call)
		if status != tc.status || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %s %s = %d %q, want %d containing %q", tc.name, tc.call.method, tc.call.path, status, body, tc.status, tc.want)
		}
	}
	// Nothing the refused calls asked for happened.
	if orders, err := n.Orders(context.Background()); err != nil || len(orders) != 0 {
		t.Errorf("Orders() after refused calls = %v, %v; want none", orders, err)
	}
	if mkts := n.JoinedMarkets(); !slices.Equal(mkts, []string{"nvidia-a100-sxm4-80gb"}) {
		t.Errorf("markets joined after the calls = %q, want only the one a full token opened", mkts)
	}
	// The page itself holds no data and forbids outside code.
	status, body := doAPI(t, ep.Addr, apiCall{method: "GET", path: "/dashboard/app.js"})
	if status != 200 || strings.Contains(body, ep.Token) || strings.Contains(body, n.PeerID().String()) {
		t.Errorf("GET /dashboard/app.js = %d (token or peer ID inside: %v)", status, strings.Contains(body, ep.Token))
	}

	// The token survives a restart, so a dashboard URL stays valid; a
	// revoked read-only token is refused.
	url, err := node.DashboardURL(repo, false)
	if err != nil || !strings.HasSuffix(url, "/dashboard/#token="+ep.Token) || !strings.HasPrefix(url, "http://"+ep.Addr) {
		t.Errorf("DashboardURL = %q, %v; want http://%s/dashboard/#token=<token>", url, err, ep.Addr)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n = startLone(t, repo)
	ep2, err := client.ReadEndpoint(repo)
	if err != nil {
		t.Fatal(err)
	}
	if ep2.Token != ep.Token {
		t.Errorf("token after restart = %q, want %q", ep2.Token, ep.Token)
	}
	if status, _ := doAPI(t, ep2.Addr, apiCall{method: "GET", path: "/api/v0/id", header: readOnly}); status != 200 {
		t.Errorf("read-only token after restart: %d, want 200", status)
	}
	if err := node.RevokeReadOnlyTokens(repo); err != nil {
		t.Fatal(err)
	}
	if status, _ := doAPI(t, ep2.Addr, apiCall{method: "GET", path: "/api/v0/id", header: readOnly}); status != 401 {
		t.Errorf("revoked read-only token: %d, want 401", status)
	}
	roURL, err := node.DashboardURL(repo, true)
	if err != nil || strings.Contains(roURL, ep.Token) {
		t.Fatalf("DashboardURL(read-only) = %q, %v; want a new token", roURL, err)
	}
	_, roTok, _ := strings.Cut(roURL, "#token=")
	if status, _ := doAPI(t, ep2.Addr, apiCall{method: "DELETE", path: "/api/v0/orders/x", header: map[string]string{"Authorization": "Bearer " + roTok}}); status != 403 {
		t.Errorf("read-only URL token cancelling: %d, want 403", status)
	}
}
