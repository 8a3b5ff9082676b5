package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/gpu"
	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
)

// runCLI runs the CLI in-process and returns its exit code and output.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// wantExit fails the test unless the CLI exited with want.
func wantExit(t *testing.T, args []string, want int) (stdout, stderr string) {
	t.Helper()
	code, stdout, stderr := runCLI(t, args...)
	if code != want {
		t.Fatalf("suanli %q exited %d, want %d\nstdout:\n%s\nstderr:\n%s", args, code, want, stdout, stderr)
	}
	return stdout, stderr
}

// The global usage lists every command; a command's usage line names it.
const globalUsage = "Usage: suanli [--repo DIR] [--json] COMMAND [flags]"

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	repo := filepath.Join(t.TempDir(), "repo") // never created: usage errors come first
	tests := []struct {
		name string
		args []string
		// wantErr is in stderr besides the usage text.
		wantErr string
		// global: the global usage is printed, else the command's usage line.
		global bool
	}{
		{name: "no command", args: nil, global: true},
		{name: "only global flags", args: []string{"--repo", repo, "--json"}, global: true},
		{name: "unknown command", args: []string{"frobnicate"}, wantErr: `unknown command "frobnicate"`, global: true},
		{name: "unknown global flag", args: []string{"--bogus", "id"}, wantErr: "flag provided but not defined: -bogus", global: true},
		{name: "offers max-price too many decimals", args: []string{"--repo", repo, "offers", "--max-price", "1.23456"}, wantErr: "--max-price"},
		{name: "offers from nowhere", args: []string{"--repo", repo, "offers", "--from", "gossip"}, wantErr: "--from"},
		{name: "offers from the book of no market", args: []string{"--repo", repo, "offers", "--from", "book", "--gpu", "h100"}, wantErr: "--from book"},
		{name: "offers max-price not a number", args: []string{"--repo", repo, "offers", "--max-price", "cheap"}, wantErr: "--max-price"},
		{name: "offers sort bogus", args: []string{"--repo", repo, "offers", "--sort", "bogus"}, wantErr: `--sort: market: unknown sort "bogus"`},
		{name: "offers min-gpus negative", args: []string{"--repo", repo, "offers", "--min-gpus", "-1"}, wantErr: "--min-gpus must not be negative"},
		{name: "offers min-gpus not a number", args: []string{"--repo", repo, "offers", "--min-gpus", "many"}, wantErr: "invalid value"},
		{name: "offers min-free negative", args: []string{"--repo", repo, "offers", "--min-free", "-1"}, wantErr: "--min-free must not be negative"},
		{name: "daemon gpu-sim and no-gpu", args: []string{"--repo", repo, "daemon", "--gpu-sim", "dgxh100", "--no-gpu"}, wantErr: "--gpu-sim and --no-gpu conflict"},
		{name: "daemon log-level loud", args: []string{"--repo", repo, "daemon", "--log-level", "loud"}, wantErr: "--log-level"},
		{name: "daemon image-allow without docker", args: []string{"--repo", repo, "daemon", "--image-allow", "x/*"}, wantErr: "--image-allow needs --executor docker"},
		{name: "daemon port range", args: []string{"--repo", repo, "daemon", "--executor", "docker", "--port-range", "9-3"}, wantErr: "--port-range"},
		{name: "daemon env-only without sim", args: []string{"--repo", repo, "daemon", "--executor", "docker", "--docker-env-only-gpus"}, wantErr: "simulated GPUs"},
		{name: "daemon vcpus bogus", args: []string{"--repo", repo, "daemon", "--vcpus-per-gpu", "lots"}, wantErr: "--vcpus-per-gpu"},
		{name: "bid port without image", args: []string{"--repo", repo, "bid", "--gpu", "x", "--count", "1", "--price", "1", "--duration", "1m", "--port", "22"}, wantErr: "need --image"},
		{name: "bid port bogus", args: []string{"--repo", repo, "bid", "--gpu", "x", "--count", "1", "--price", "1", "--duration", "1m", "--image", "a/b", "--port", "99999"}, wantErr: "--port"},
		{name: "bid exec and image", args: []string{"--repo", repo, "bid", "--gpu", "x", "--count", "1", "--price", "1", "--duration", "1m", "--image", "a/b", "--exec", "--", "sh"}, wantErr: "conflict"},
		{name: "bid start on spot", args: []string{"--repo", repo, "bid", "--gpu", "nvidia-h100-sxm5-80gb", "--count", "1", "--price", "1", "--duration", "1m", "--start", "+5s"}, wantErr: "--start is for --type reserved"},
		{name: "evidence verify without file", args: []string{"--repo", repo, "evidence", "verify"}, wantErr: "needs --file"},
		{name: "devnet zero providers", args: []string{"devnet", "--providers", "0"}, wantErr: "--providers and --buyers must be 1..200"},
		{name: "simnet too few nodes", args: []string{"simnet", "--nodes", "3"}, wantErr: "simnet: 3 nodes, want 4..2000"},
		{name: "simnet unknown model", args: []string{"simnet", "--model", "dgx-nope"}, wantErr: `simnet: model "dgx-nope", want one of dgxa100`},
		{name: "simnet inter latency too high", args: []string{"simnet", "--inter", "50ms"}, wantErr: "want inter 0..40ms"},
		{name: "simnet hostile share too high", args: []string{"simnet", "--attack", "--hostile", "0.9"}, wantErr: "simnet: attack share 0.9, want 0..0.5"},
		{name: "gpus unknown sim model", args: []string{"gpus", "--gpu-sim", "dgxh999"}, wantErr: "want one of dgxa100"},
		{name: "bid price zero", args: []string{"--repo", repo, "bid", "--gpu", "nvidia-h100-sxm5-80gb", "--count", "1", "--price", "0", "--duration", "1m"}, wantErr: "--price 0: want more than 0"},
		{name: "bid price too high", args: []string{"--repo", repo, "bid", "--gpu", "nvidia-h100-sxm5-80gb", "--count", "1", "--price", "1000000000", "--duration", "1m"}, wantErr: "at most 1000000.00 USD"},
		{name: "bid count zero", args: []string{"--repo", repo, "bid", "--gpu", "nvidia-h100-sxm5-80gb", "--count", "0", "--price", "1", "--duration", "1m"}, wantErr: "positive whole number"},
		{name: "bid duration banana", args: []string{"--repo", repo, "bid", "--gpu", "nvidia-h100-sxm5-80gb", "--count", "1", "--price", "1", "--duration", "banana"}, wantErr: `invalid value "banana"`},
		{name: "settle ack amount abc", args: []string{"--repo", repo, "settle", "ack", "--peer", "x", "--amount", "abc"}, wantErr: "--amount"},
		{name: "daemon preempt margin", args: []string{"--repo", repo, "daemon", "--preempt-margin", "lots"}, wantErr: "want a whole number"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr := wantExit(t, tc.args, 2)
			checkUsageErr(t, stdout, stderr, tc.wantErr, tc.global, tc.args)
		})
	}
	t.Cleanup(func() { // after the parallel subtests
		if _, err := os.Stat(repo); !os.IsNotExist(err) {
			t.Errorf("a usage error touched the repo: stat %s: %v", repo, err)
		}
	})
}

func checkUsageErr(t *testing.T, stdout, stderr, wantErr string, global bool, args []string) {
	t.Helper()
	if stdout != "" {
		t.Errorf("suanli %q: a usage error printed to stdout:\n%s", args, stdout)
	}
	if !strings.Contains(stderr, wantErr) {
		t.Errorf("suanli %q: stderr does not say %q:\n%s", args, wantErr, stderr)
	}
	if global {
		if !strings.Contains(stderr, globalUsage) {
			t.Errorf("suanli %q: stderr has no usage:\n%s", args, stderr)
		}
		return
	}
	if !strings.Contains(stderr, "usage: suanli ") {
		t.Errorf("suanli %q: stderr has no usage line:\n%s", args, stderr)
	}
	if n := strings.Count(stderr, "\n"); n > 2 {
		t.Errorf("suanli %q: a misuse printed %d lines, want the reason and the usage line:\n%s", args, n, stderr)
	}
}

// help CMD [SUB] prints that command's flags, not the global usage.
func TestHelpCommand(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"help", "bid"}, "-duration"},
		{[]string{"help", "ask"}, "-resell"},
		{[]string{"help", "settle", "ack"}, "-amount"},
		{[]string{"help", "daemon"}, "-log-cap"},
	} {
		stdout, stderr := wantExit(t, tc.args, 0)
		if out := stdout + stderr; !strings.Contains(out, tc.want) || strings.Contains(out, globalUsage) {
			t.Errorf("suanli %q printed:\n%s\nwant the command's flags (%s), not the global usage", tc.args, out, tc.want)
		}
	}
	// A default stated in the help text is not followed by a sentinel's.
	_, stderr := wantExit(t, []string{"daemon", "-h"}, 0)
	if strings.Contains(stderr, "(default -1)") {
		t.Errorf("daemon -h shows a sentinel default:\n%s", stderr)
	}
}

// Every command refuses a flag it does not know and positional arguments.
func TestCommandUsageErrors(t *testing.T) {
	t.Parallel()
	repo := filepath.Join(t.TempDir(), "repo")
	for _, c := range commands {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			// Commands that take one positional argument get one too many.
			extra := []string{"extra"}
			if takesArg := c.args != "" && !strings.HasPrefix(c.args, "-") && !strings.HasPrefix(c.args, "["); takesArg {
				extra = []string{"nvidia-h100-sxm5-80gb", "extra"}
			}
			for _, args := range [][]string{
				{"--repo", repo, c.name, "--no-such-flag"},
				append([]string{"--repo", repo, c.name}, extra...),
				append([]string{"--repo", repo, c.name}, append(extra, "args")...),
			} {
				stdout, stderr := wantExit(t, args, 2)
				if stdout != "" {
					t.Errorf("suanli %q printed to stdout:\n%s", args, stdout)
				}
				if want := "usage: suanli " + c.name; !strings.Contains(stderr, want) {
					t.Errorf("suanli %q: stderr does not have %q:\n%s", args, want, stderr)
				}
			}
			_, stderr := wantExit(t, []string{"--repo", repo, c.name, "--no-such-flag"}, 2)
			if want := "flag provided but not defined: -no-such-flag"; !strings.Contains(stderr, want) {
				t.Errorf("stderr does not say %q:\n%s", want, stderr)
			}
			_, stderr = wantExit(t, append([]string{"--repo", repo, c.name}, append(extra, "args")...), 2)
			if want := fmt.Sprintf("got %d:", len(extra)+1); !strings.Contains(stderr, want) {
				t.Errorf("stderr does not say %q:\n%s", want, stderr)
			}
		})
	}
	t.Cleanup(func() { // after the parallel subtests
		if _, err := os.Stat(repo); !os.IsNotExist(err) {
			t.Errorf("a usage error touched the repo: stat %s: %v", repo, err)
		}
	})
}

func TestHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}, {"--repo", t.TempDir(), "help"}} {
		stdout, stderr := wantExit(t, args, 0)
		if !strings.Contains(stdout, globalUsage) {
			t.Errorf("suanli %q: no usage on stdout:\n%s", args, stdout)
		}
		for _, c := range commands {
			if !strings.Contains(stdout, "  "+c.name+" ") {
				t.Errorf("suanli %q: usage does not list %s:\n%s", args, c.name, stdout)
			}
		}
		if stderr != "" {
			t.Errorf("suanli %q: stderr:\n%s", args, stderr)
		}
	}
	// A command's -h prints its flags and exits 0.
	for _, c := range commands {
		if c.name == "version" {
			continue // takes no flags (and ignores them: see TestCommandUsageErrors)
		}
		_, stderr := wantExit(t, []string{c.name, "-h"}, 0)
		if !strings.Contains(stderr, "-repo") {
			t.Errorf("suanli %s -h does not list the global flags:\n%s", c.name, stderr)
		}
	}
	_, stderr := wantExit(t, []string{"offers", "-h"}, 0)
	for _, f := range []string{"-gpu", "-max-price", "-min-gpus", "-min-free", "-sort", "-region"} {
		if !strings.Contains(stderr, f) {
			t.Errorf("suanli offers -h does not list %s:\n%s", f, stderr)
		}
	}
	for cmd, f := range map[string]string{"ask": "-replenish", "daemon": "-credit-limit"} {
		if _, stderr := wantExit(t, []string{cmd, "-h"}, 0); !strings.Contains(stderr, f) {
			t.Errorf("suanli %s -h does not list %s:\n%s", cmd, f, stderr)
		}
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	stdout, _ := wantExit(t, []string{"version"}, 0)
	if stdout != version+"\n" {
		t.Errorf("version printed %q, want %q", stdout, version+"\n")
	}
}

func TestInit(t *testing.T) {
	t.Parallel()
	repo := filepath.Join(t.TempDir(), "repo")
	stdout, _ := wantExit(t, []string{"--repo", repo, "init", "--stamp-bits", "8"}, 0)
	if !strings.Contains(stdout, "initialized repo "+repo) || !strings.Contains(stdout, "not encrypted") {
		t.Errorf("init printed:\n%s", stdout)
	}
	for _, f := range []string{"config.json", "keystore/identity.key", "version"} {
		fi, err := os.Stat(filepath.Join(repo, f))
		if err != nil {
			t.Fatalf("init did not create %s: %v", f, err)
		}
		if !fi.Mode().IsRegular() {
			t.Errorf("%s: mode %v, want a regular file", f, fi.Mode())
		}
	}
	if fi, _ := os.Stat(filepath.Join(repo, "keystore/identity.key")); fi.Mode().Perm() != 0o600 {
		t.Errorf("identity.key mode %v, want 0600", fi.Mode().Perm())
	}
	if b, _ := os.ReadFile(filepath.Join(repo, "version")); strings.TrimSpace(string(b)) != node.RepoVersion {
		t.Errorf("version file %q, want %q", b, node.RepoVersion)
	}
	cfg, err := node.LoadConfig(repo)
	if err != nil {
		t.Fatal(err)
	}
	if def := node.DefaultConfig(); cfg.Region != def.Region || cfg.Price != def.Price || cfg.Currency != def.Currency || cfg.API != def.API {
		t.Errorf("config %+v, want the defaults %+v", cfg, def)
	}
	key, err := node.LoadKey(repo, nil)
	if err != nil {
		t.Fatalf("the key is not loadable without a passphrase: %v", err)
	}
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout, id.String()) {
		t.Errorf("init did not print the peer ID %s:\n%s", id, stdout)
	}
	keyBefore, _ := os.ReadFile(filepath.Join(repo, "keystore/identity.key"))

	// A second init refuses and leaves the key alone.
	code, stdout, stderr := runCLI(t, "--repo", repo, "init", "--stamp-bits", "8")
	if code == 0 || code == 2 {
		t.Fatalf("second init exited %d, want a failure (1)\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "already initialized") {
		t.Errorf("second init: stderr does not say the repo is already initialized:\n%s", stderr)
	}
	if keyAfter, _ := os.ReadFile(filepath.Join(repo, "keystore/identity.key")); !bytes.Equal(keyBefore, keyAfter) {
		t.Error("second init changed the identity key")
	}
}

func TestInitJSON(t *testing.T) {
	t.Parallel()
	repo := filepath.Join(t.TempDir(), "repo")
	stdout, _ := wantExit(t, []string{"init", "--repo", repo, "--json", "--stamp-bits", "8"}, 0) // global flags after the command
	var got struct {
		ID        string `json:"id"`
		Repo      string `json:"repo"`
		Encrypted *bool  `json:"encrypted"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("init --json: %v\n%s", err, stdout)
	}
	if got.Repo != repo || got.Encrypted == nil || *got.Encrypted {
		t.Errorf("init --json = %s, want repo %s, encrypted false", stdout, repo)
	}
	if got.ID != keyID(t, repo, nil) {
		t.Errorf("init --json id %s, key's ID %s", got.ID, keyID(t, repo, nil))
	}
}

// keyID is the peer ID of the repo's identity key.
func keyID(t *testing.T, repo string, pass []byte) string {
	t.Helper()
	key, err := node.LoadKey(repo, pass)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return id.String()
}

// idJSON decodes `suanli id --json`, checking its shape: exactly id and addrs,
// addrs an array (never null).
func idJSON(t *testing.T, stdout string) (id peer.ID, addrs []string) {
	t.Helper()
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(stdout), &raw); err != nil {
		t.Fatalf("id --json: %v\n%s", err, stdout)
	}
	if len(raw) != 2 || raw["id"] == nil || raw["addrs"] == nil {
		t.Fatalf("id --json = %s, want exactly the keys id and addrs", stdout)
	}
	var s string
	if err := json.Unmarshal(raw["id"], &s); err != nil {
		t.Fatalf("id --json: id: %v", err)
	}
	if id, err := peer.Decode(s); err != nil {
		t.Fatalf("id --json: id %q is not a peer ID: %v", s, err)
	} else if err := id.Validate(); err != nil {
		t.Fatalf("id --json: id %q: %v", s, err)
	}
	id, _ = peer.Decode(s)
	if string(raw["addrs"]) == "null" {
		t.Fatalf("id --json: addrs is null, want an array: %s", stdout)
	}
	if err := json.Unmarshal(raw["addrs"], &addrs); err != nil {
		t.Fatalf("id --json: addrs: %v", err)
	}
	return id, addrs
}

func TestIDWithoutDaemon(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	wantExit(t, []string{"--repo", repo, "init", "--stamp-bits", "8"}, 0)
	stdout, stderr := wantExit(t, []string{"--repo", repo, "id", "--json"}, 0)
	if stderr != "" {
		t.Errorf("stderr: %s", stderr)
	}
	id, addrs := idJSON(t, stdout)
	if len(addrs) != 0 {
		t.Errorf("addrs %q without a daemon, want []", addrs)
	}
	if want := keyID(t, repo, nil); id.String() != want {
		t.Errorf("id %s, the key's ID is %s", id, want)
	}
	// Plain output: just the ID.
	stdout, _ = wantExit(t, []string{"--repo", repo, "id"}, 0)
	if stdout != id.String()+"\n" {
		t.Errorf("id printed %q, want %q", stdout, id.String()+"\n")
	}
}

func TestIDNotInitialized(t *testing.T) {
	t.Parallel()
	repo := filepath.Join(t.TempDir(), "none")
	_, stderr := wantExit(t, []string{"--repo", repo, "id"}, 1)
	if !strings.Contains(stderr, "not initialized") || !strings.Contains(stderr, "suanli init") {
		t.Errorf("stderr does not say to run suanli init:\n%s", stderr)
	}
}

// Not parallel: it sets SUANLI_PASSPHRASE.
func TestIDEncryptedKey(t *testing.T) {
	repo := t.TempDir()
	t.Setenv("SUANLI_PASSPHRASE", "correct horse battery staple")
	stdout, _ := wantExit(t, []string{"--repo", repo, "--json", "init", "--stamp-bits", "8"}, 0)
	var initOut struct {
		ID        string `json:"id"`
		Encrypted bool   `json:"encrypted"`
	}
	if err := json.Unmarshal([]byte(stdout), &initOut); err != nil || !initOut.Encrypted {
		t.Fatalf("init --json with SUANLI_PASSPHRASE = %s (%v), want encrypted", stdout, err)
	}
	if _, err := node.LoadKey(repo, nil); err == nil {
		t.Fatal("the key loads without a passphrase")
	}
	// With the passphrase: the same ID.
	stdout, _ = wantExit(t, []string{"--repo", repo, "id", "--json"}, 0)
	if id, _ := idJSON(t, stdout); id.String() != initOut.ID {
		t.Errorf("id %s, init said %s", id, initOut.ID)
	}

	// Without it: a failure that mentions the passphrase.
	os.Unsetenv("SUANLI_PASSPHRASE") // t.Setenv restores it
	code, stdout, stderr := runCLI(t, "--repo", repo, "id", "--json")
	if code != 1 {
		t.Fatalf("id without the passphrase exited %d, want 1\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "passphrase") {
		t.Errorf("stderr does not mention the passphrase:\n%s", stderr)
	}
	if stdout != "" {
		t.Errorf("stdout: %s", stdout)
	}

	// A wrong one: also a failure about the passphrase.
	t.Setenv("SUANLI_PASSPHRASE", "wrong")
	_, stderr = wantExit(t, []string{"--repo", repo, "id"}, 1)
	if !strings.Contains(stderr, "passphrase") {
		t.Errorf("wrong passphrase: stderr does not mention the passphrase:\n%s", stderr)
	}

	// --passphrase-file works in its place.
	os.Unsetenv("SUANLI_PASSPHRASE")
	pf := filepath.Join(t.TempDir(), "pass")
	if err := os.WriteFile(pf, []byte("correct horse battery staple\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, _ = wantExit(t, []string{"--repo", repo, "id", "--passphrase-file", pf}, 0)
	if strings.TrimSpace(stdout) != initOut.ID {
		t.Errorf("id --passphrase-file printed %q, want %s", stdout, initOut.ID)
	}
}

func TestGPUsWithoutNVML(t *testing.T) {
	t.Parallel()
	b, openErr := gpu.Open()
	if openErr == nil {
		b.Close()
		t.Skip("this machine has NVML and a GPU")
	}
	stdout, stderr := wantExit(t, []string{"gpus"}, 1)
	if stdout != "" {
		t.Errorf("stdout: %s", stdout)
	}
	// The reason is NVML's, word for word.
	if !strings.Contains(stderr, openErr.Error()) || !strings.Contains(strings.ToLower(stderr), "nvml") {
		t.Errorf("stderr does not carry NVML's reason %q:\n%s", openErr, stderr)
	}
	if strings.Contains(stderr, "usage:") {
		t.Errorf("no GPU is not a usage error:\n%s", stderr)
	}
}

func TestGPUsSim(t *testing.T) {
	t.Parallel()
	stdout, _ := wantExit(t, []string{"gpus", "--gpu-sim", "dgxh100", "--json"}, 0)
	var r api.GPUReport
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("gpus --json: %v\n%s", err, stdout)
	}
	if len(r.GPUs) != 8 {
		t.Fatalf("gpus --gpu-sim dgxh100: %d GPUs, want 8", len(r.GPUs))
	}
	uuids := map[string]bool{}
	for i, g := range r.GPUs {
		if g.Market != "nvidia-h100-sxm5-80gb" {
			t.Errorf("GPU %d: market %q, want nvidia-h100-sxm5-80gb", i, g.Market)
		}
		if g.Index != i || g.UUID == "" || g.Name == "" || g.MemoryBytes == 0 || g.Telemetry == nil {
			t.Errorf("GPU %d: %+v", i, g)
		}
		uuids[g.UUID] = true
	}
	if len(uuids) != 8 {
		t.Errorf("%d distinct UUIDs, want 8", len(uuids))
	}
	if r.Attestation == "" || r.Backend == "" {
		t.Errorf("report %+v lacks backend or attestation", r)
	}

	// The table names the market on every GPU's line.
	stdout, _ = wantExit(t, []string{"gpus", "--gpu-sim", "dgxh100"}, 0)
	if n := strings.Count(stdout, "nvidia-h100-sxm5-80gb"); n != 8 {
		t.Errorf("table lists the market %d times, want 8:\n%s", n, stdout)
	}

	_, stderr := wantExit(t, []string{"gpus", "--gpu-sim", "no-such-machine"}, 2)
	if !strings.Contains(stderr, "no-such-machine") {
		t.Errorf("unknown model: stderr:\n%s", stderr)
	}
}

func TestNoDaemon(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	wantExit(t, []string{"--repo", repo, "init", "--stamp-bits", "8"}, 0)
	for _, args := range [][]string{
		{"--repo", repo, "offers"},
		{"--repo", repo, "offers", "--gpu", "h100", "--json"},
		{"--repo", repo, "peers"},
		{"--repo", repo, "--json", "peers"},
	} {
		stdout, stderr := wantExit(t, args, 1)
		if stdout != "" {
			t.Errorf("suanli %q: stdout: %s", args, stdout)
		}
		if !strings.Contains(stderr, "no daemon running") || !strings.Contains(stderr, "suanli daemon") {
			t.Errorf("suanli %q: stderr does not say no daemon runs and how to start one:\n%s", args, stderr)
		}
	}
}
