package node_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/client"
)

// checkSampleVerdict asserts what a challenge of a simulated DGX H100 must
// give: each offered GPU's evidence is NVIDIA's genuine sample (chain and
// signature pass) but answers another nonce, and all eight come from one
// device, so nothing is verified.
func checkSampleVerdict(t *testing.T, rep api.AttestReport, provider *node.Node) {
	t.Helper()
	offered := provider.Published().Gpus
	if rep.Provider != provider.PeerID().String() {
		t.Errorf("report provider = %s, want %s", rep.Provider, provider.PeerID())
	}
	if n, err := hex.DecodeString(rep.Nonce); err != nil || len(n) != 32 {
		t.Errorf("report nonce = %q, want 32 bytes in hex", rep.Nonce)
	}
	if rep.Verified || rep.Failure != "" || !strings.HasPrefix(rep.Summary, "0 of 8 GPUs verified") {
		t.Errorf("report verified %v, failure %q, summary %q; want not verified, no failure, \"0 of 8 GPUs verified…\"", rep.Verified, rep.Failure, rep.Summary)
	}
	if time.Since(rep.Time) > time.Minute || rep.Time.After(time.Now()) {
		t.Errorf("report time = %s, want just now", rep.Time)
	}
	if len(rep.GPUs) != 8 || len(offered) != 8 {
		t.Fatalf("report has %d GPUs, offer %d; want 8 and 8", len(rep.GPUs), len(offered))
	}
	for i, g := range rep.GPUs {
		if g.UUID != offered[i].Uuid {
			t.Errorf("GPU %d = %s, want the offer's %s", i, g.UUID, offered[i].Uuid)
		}
		if g.Verified || !strings.Contains(g.Summary, "nonce not fresh") {
			t.Errorf("GPU %d verified %v, summary %q; want not verified, nonce not fresh", i, g.Verified, g.Summary)
		}
		outcome := map[string]api.CheckView{}
		for _, c := range g.Checks {
			outcome[c.Name] = c
		}
		for name, want := range map[string]string{"parse": "pass", "chain": "pass", "signature": "pass", "fwid": "pass", "nonce": "fail", "revocation": "not-checked", "distinct": "fail"} {
			if c := outcome[name]; c.Outcome != want {
				t.Errorf("GPU %d check %s = %q (%s), want %q", i, name, c.Outcome, c.Reason, want)
			}
		}
		if r := outcome["nonce"].Reason; !strings.Contains(r, "not fresh") || !strings.Contains(r, rep.Nonce) {
			t.Errorf("GPU %d nonce reason = %q, want \"not fresh\" and our nonce %s", i, r, rep.Nonce)
		}
		if r := outcome["distinct"].Reason; !strings.Contains(r, "answers for 8 of the offer's GPUs") {
			t.Errorf("GPU %d distinct reason = %q, want one device answering for 8 GPUs", i, r)
		}
	}
}

// TestAttest: a buyer challenges a simulated DGX H100 (NVIDIA's sample
// evidence: genuine, never fresh) and a DGX A100 (no confidential
// computing), in-process and through the daemon API; the verdicts are
// stored in Badger and survive a restart.
func TestAttest(t *testing.T) {
	net := startNet(t, 2, 1)
	h100, a100, buyer := net.Providers[0], net.Providers[1], net.Buyers[0]
	if net.Machines[0].Model != "dgxh100" || net.Machines[1].Model != "dgxa100" {
		t.Fatalf("devnet machines = %v, want dgxh100 then dgxa100", net.Machines)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	rep, err := buyer.Attest(ctx, h100.PeerID().String())
	if err != nil {
		t.Fatalf("Attest(h100): %v", err)
	}
	checkSampleVerdict(t, rep, h100)
	if buyer.Verified(h100.PeerID(), time.Hour) {
		t.Error("Verified(h100) = true for sample evidence")
	}

	_, err = buyer.Attest(ctx, a100.PeerID().String())
	if !errors.Is(err, api.ErrAttestFailed) || !strings.Contains(err.Error(), "confidential computing is off") {
		t.Fatalf("Attest(a100) = %v, want ErrAttestFailed: confidential computing is off", err)
	}

	// Through the daemon's API: a second challenge, a new nonce.
	c, err := client.Open(buyer.Repo())
	if err != nil {
		t.Fatal(err)
	}
	viaAPI, err := c.Attest(ctx, h100.PeerID().String())
	if err != nil {
		t.Fatalf("Client.Attest(h100): %v", err)
	}
	checkSampleVerdict(t, viaAPI, h100)
	if viaAPI.Nonce == rep.Nonce {
		t.Errorf("two challenges used the same nonce %s", rep.Nonce)
	}
	if _, err := c.Attest(ctx, a100.PeerID().String()); !errors.Is(err, api.ErrAttestFailed) || !strings.Contains(err.Error(), "confidential computing is off") {
		t.Errorf("Client.Attest(a100) = %v, want ErrAttestFailed: confidential computing is off", err)
	}

	// The verdicts are in Badger, and still there after a restart.
	repo := buyer.Repo()
	if err := buyer.Close(); err != nil {
		t.Fatal(err)
	}
	reopened, err := node.New(node.WithRepo(repo), node.WithoutGPU(), node.WithListen("/ip4/127.0.0.1/tcp/0"), node.WithAPI(""), node.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer reopened.Close()
	stored, ok, err := reopened.Verdict(h100.PeerID())
	if err != nil || !ok {
		t.Fatalf("Verdict(h100) after restart = %v, %v", ok, err)
	}
	if got, want := jsonOf(t, stored), jsonOf(t, viaAPI); got != want {
		t.Errorf("stored verdict after restart =\n%s\nwant the last one\n%s", got, want)
	}
	failed, ok, err := reopened.Verdict(a100.PeerID())
	if err != nil || !ok || failed.Verified || !strings.Contains(failed.Failure, "confidential computing is off") || len(failed.GPUs) != 0 {
		t.Errorf("Verdict(a100) = %+v, %v, %v; want a stored failure: confidential computing is off", failed, ok, err)
	}
	if _, ok, err := reopened.Verdict(reopened.PeerID()); ok || err != nil {
		t.Errorf("Verdict(never challenged) = %v, %v; want none", ok, err)
	}
	if reopened.Verified(h100.PeerID(), time.Hour) || reopened.Verified(a100.PeerID(), time.Hour) {
		t.Error("Verified = true after restart for unverified verdicts")
	}
}

// TestAttestSelf: a provider checks its own GPUs without the network; a
// buyer, which has none, refuses; a peer with no offer is not challenged.
func TestAttestSelf(t *testing.T) {
	net := startNet(t, 1, 1)
	provider, buyer := net.Providers[0], net.Buyers[0]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := provider.Attest(ctx, provider.PeerID().String())
	if err != nil {
		t.Fatalf("provider.Attest(self): %v", err)
	}
	checkSampleVerdict(t, rep, provider)

	short, cancel2 := context.WithTimeout(ctx, 3*time.Second)
	defer cancel2()
	_, err = provider.Attest(short, buyer.PeerID().String())
	if err == nil || errors.Is(err, api.ErrAttestFailed) {
		t.Errorf("Attest(buyer without an offer) = %v, want an error that is not a verdict", err)
	}
	if _, ok, _ := provider.Verdict(buyer.PeerID()); ok {
		t.Error("a peer that could not be challenged got a stored verdict")
	}
}

// TestAttestBidConstraint: a bid that requires cc-verified does not take
// the ask of a provider whose evidence did not verify (sample evidence),
// while a bid without the constraint does; the provider checked its own
// GPUs when it placed the ask.
func TestAttestBidConstraint(t *testing.T) {
	net := startNet(t, 1, 1)
	provider, buyer := net.Providers[0], net.Buyers[0]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if rep, err := buyer.Attest(ctx, provider.PeerID().String()); err != nil || rep.Verified {
		t.Fatalf("Attest = verified %v, %v; want a completed, unverified challenge", rep.Verified, err)
	}
	ask, err := provider.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: h100, Count: 4, Price: "2.40"})
	if err != nil {
		t.Fatal(err)
	}
	if self, ok, err := provider.Verdict(provider.PeerID()); err != nil || !ok || self.Verified || len(self.GPUs) != 8 {
		t.Errorf("provider's verdict on itself after asking = %+v, %v, %v; want 8 GPUs, not verified", self, ok, err)
	}
	waitFor(t, ctx, "the buyer to see the ask", func() (bool, string) {
		b, err := buyer.Book(ctx, h100, "USD")
		return err == nil && len(b.Asks) == 1 && b.Asks[0].Count == 4, sprint(b, err)
	})
	strict, err := buyer.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: h100, Count: 2, Price: "2.50", Duration: "1h", MinAttestation: "cc-verified"})
	if err != nil {
		t.Fatal(err)
	}
	if len(strict.Fills) != 0 {
		t.Fatalf("cc-verified bid = %+v, want no fill from an unverified provider", strict)
	}
	plain, err := buyer.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: h100, Count: 2, Price: "2.45", Duration: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	if plain.Status != "filled" || len(plain.Fills) != 1 || plain.Fills[0].Provider != provider.PeerID().String() {
		t.Fatalf("bid without constraint = %+v, want filled by the provider's ask %s", plain, ask.ID)
	}
	if got, err := buyer.Order(ctx, strict.ID); err != nil || len(got.Fills) != 0 {
		t.Errorf("cc-verified bid after the other trade = %+v, %v; want still no fill", got, err)
	}
}

func TestAttestReportCounts(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	verified := api.AttestReport{Verified: true, Time: now.Add(-30 * time.Minute),
		GPUs: []api.GPUVerdict{{UUID: "GPU-a", Verified: true}, {UUID: "GPU-b", Verified: true}}}
	tests := []struct {
		name   string
		r      api.AttestReport
		window time.Duration
		want   bool
	}{
		{"verified, in the window", verified, time.Hour, true},
		{"verified, older than the window", verified, 10 * time.Minute, false},
		{"verified, dated in the future", func() api.AttestReport { r := verified; r.Time = now.Add(time.Hour); return r }(), 2 * time.Hour, false},
		{"not verified", func() api.AttestReport { r := verified; r.Verified = false; return r }(), time.Hour, false},
		{"failed", api.AttestReport{Time: now, Failure: "late"}, time.Hour, false},
	}
	for _, tt := range tests {
		if got := tt.r.Counts(now, tt.window); got != tt.want {
			t.Errorf("%s: Counts(now, %s) = %v, want %v", tt.name, tt.window, got, tt.want)
		}
	}
	partial := verified
	partial.GPUs = []api.GPUVerdict{{UUID: "GPU-a", Verified: true}, {UUID: "GPU-b"}}
	for _, tt := range []struct {
		r     api.AttestReport
		uuids []string
		want  bool
	}{
		{verified, []string{"GPU-a", "GPU-b"}, true},
		{verified, []string{"GPU-b"}, true},
		{verified, []string{"GPU-a", "GPU-c"}, false}, // a GPU added to the offer since
		{partial, []string{"GPU-a"}, true},
		{partial, []string{"GPU-a", "GPU-b"}, false},
	} {
		if got := tt.r.Covers(tt.uuids...); got != tt.want {
			t.Errorf("Covers(%q) of %v = %v, want %v", tt.uuids, tt.r.GPUs, got, tt.want)
		}
	}
}

func TestWithAttestWindow(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second, 500 * time.Millisecond, 31 * 24 * time.Hour} {
		if _, err := node.New(node.WithRepo(t.TempDir()), node.WithAttestWindow(d)); err == nil || !strings.Contains(err.Error(), "attestation window") {
			t.Errorf("New(WithAttestWindow(%s)) = %v, want a range error", d, err)
		}
	}
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
