package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/suanli/suanli/node/api"
)

// A peer ID that parses; no daemon ever runs it.
const attestSomePeer = "12D3KooWJf8Hf74ZCtL8gpj6Wn3rJX2DTMgVME7rnAqMS6haSc9k"

func TestAttestUsage(t *testing.T) {
	t.Parallel()
	repo := filepath.Join(t.TempDir(), "repo") // never created
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"attest"}, "want 1 argument(s), got 0"},
		{[]string{"attest", attestSomePeer, attestSomePeer}, "want 1 argument(s), got 2"},
		{[]string{"attest", "not-a-peer"}, `provider "not-a-peer"`},
		{[]string{"attest", attestSomePeer, "--timeout", "0s"}, "--timeout must be positive"},
		{[]string{"attest", "--timeout", "soon", attestSomePeer}, "invalid value"},
	} {
		args := append([]string{"--repo", repo}, tc.args...)
		stdout, stderr := wantExit(t, args, 2)
		checkUsageErr(t, stdout, stderr, tc.wantErr, false, args)
		if !strings.Contains(stderr, "usage: suanli attest PEER") {
			t.Errorf("suanli %q: stderr lacks the attest usage line:\n%s", args, stderr)
		}
	}
	// Well formed, but no daemon: a failure, not a usage error.
	_, stderr := wantExit(t, []string{"--repo", repo, "attest", attestSomePeer}, 1)
	if stderr == "" {
		t.Error("attest without a daemon printed no error")
	}
}

// TestDaemonAttest: a buyer daemon challenges a provider daemon on a
// simulated DGX H100 (NVIDIA's sample evidence: genuine, never fresh) and
// one on a DGX A100 (no confidential computing), with `attest` and
// `offers --verify`.
func TestDaemonAttest(t *testing.T) {
	t.Parallel()
	repoH, repoA, repoB := t.TempDir(), t.TempDir(), t.TempDir()
	startDaemon(t, repoH, "--gpu-sim", "dgxh100", "--region", "CN-GZ")
	stdout, _ := wantExit(t, []string{"--repo", repoH, "id", "--json"}, 0)
	idH, addrsH := idJSON(t, stdout)
	var boot string
	for _, a := range addrsH {
		if strings.HasPrefix(a, "/ip4/127.0.0.1/tcp/") {
			boot = a
		}
	}
	startDaemon(t, repoA, "--gpu-sim", "dgxa100", "--region", "CN-NM", "--bootstrap", boot)
	idA := keyID(t, repoA, nil)
	startDaemon(t, repoB, "--no-gpu", "--bootstrap", boot)

	// The first challenge may come before B can find H's offer.
	var text string
	poll(t, "B attests H", func() (bool, string) {
		code, out, errOut := runCLI(t, "--repo", repoB, "attest", idH.String(), "--timeout", "15s")
		text = out
		return code == 0, errOut
	})
	for _, want := range []string{
		"provider " + idH.String(),
		"chain: pass — ",
		"signature: pass — ",
		"nonce: fail — not fresh",
		"NVIDIA's sample evidence",
		"distinct: fail — the same device",
		"verdict: NOT VERIFIED: 0 of 8 GPUs verified",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("attest output lacks %q:\n%s", want, text)
		}
	}
	if n := strings.Count(text, "nonce: fail"); n != 8 {
		t.Errorf("attest output has %d failed nonce checks, want 8:\n%s", n, text)
	}

	stdout, _ = wantExit(t, []string{"--repo", repoB, "--json", "attest", idH.String()}, 0)
	var rep api.AttestReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("attest --json: %v\n%s", err, stdout)
	}
	if rep.Provider != idH.String() || rep.Verified || len(rep.GPUs) != 8 || len(rep.Nonce) != 64 {
		t.Errorf("attest --json = provider %s, verified %v, %d GPUs, nonce %q; want %s, false, 8, 32 bytes hex", rep.Provider, rep.Verified, len(rep.GPUs), rep.Nonce, idH)
	}

	var errOut string
	poll(t, "B challenges A", func() (bool, string) {
		var code int
		code, _, errOut = runCLI(t, "--repo", repoB, "attest", idA, "--timeout", "15s")
		return code == 1 && strings.Contains(errOut, "attestation challenge failed"), errOut
	})
	if !strings.Contains(errOut, "confidential computing is off") {
		t.Errorf("attest of a DGX A100: stderr lacks the reason:\n%s", errOut)
	}

	// offers --verify: every provider challenged, a verdict each.
	var verified []struct {
		api.OfferView
		Verified *bool  `json:"verified"`
		Verdict  string `json:"verdict"`
	}
	poll(t, "B lists and verifies both offers", func() (bool, string) {
		code, out, errOut := runCLI(t, "--repo", repoB, "--json", "offers", "--verify", "--timeout", "15s")
		if code != 0 {
			return false, errOut
		}
		verified = nil
		if err := json.Unmarshal([]byte(out), &verified); err != nil {
			t.Fatalf("offers --verify --json: %v\n%s", err, out)
		}
		return len(verified) == 2, out
	})
	for _, o := range verified {
		switch {
		case o.Verified == nil || *o.Verified:
			t.Errorf("offer of %s: verified = %v, want false", o.Provider, o.Verified)
		case o.Provider == idH.String() && !strings.Contains(o.Verdict, "nonce not fresh"):
			t.Errorf("offer of H: verdict %q, want nonce not fresh", o.Verdict)
		case o.Provider == idA && !strings.Contains(o.Verdict, "confidential computing is off"):
			t.Errorf("offer of A: verdict %q, want confidential computing is off", o.Verdict)
		case len(o.GPUs) != 8:
			t.Errorf("offer of %s has %d GPUs, want 8", o.Provider, len(o.GPUs))
		}
	}
	stdout, _ = wantExit(t, []string{"--repo", repoB, "offers", "--verify"}, 0)
	if !strings.Contains(stdout, "VERIFIED") || strings.Count(stdout, "  no\n") != 2 {
		t.Errorf("offers --verify table lacks a VERIFIED column saying no twice:\n%s", stdout)
	}
}
