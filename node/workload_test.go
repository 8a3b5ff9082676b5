package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/executor"
	"github.com/suanli/suanli/node/executor/dockertest"
)

// startDockerNet is a provider whose leases may run suanli-test/* images
// on the local engine (env-only GPUs: these are simulated), and a buyer.
func startDockerNet(t testing.TB) (provider, buyer *node.Node, image string, engine func() (containers, volumes []string)) {
	t.Helper()
	c := dockertest.Engine(t)
	image = dockertest.EchoImage(t, c)
	pol, err := executor.ParseImagePolicy([]string{"suanli-test/*"})
	if err != nil {
		t.Fatal(err)
	}
	provider, buyer = startLeaseNet(t, node.WithExecutors("reserve", "docker"),
		node.WithDocker(node.DockerConfig{Images: pol, EnvOnlyGPUs: true, PortMin: 22000, PortMax: 22999}))
	// Only this provider's objects: other tests share the engine.
	return provider, buyer, image, func() ([]string, []string) {
		return dockertest.Leftovers(t, c, executor.OwnerLabel, provider.PeerID().String())
	}
}

// tradeWorkload makes provider and buyer trade 2 GPUs for d, the bid
// asking for the workload of req, and returns the lease.
func tradeWorkload(t *testing.T, ctx context.Context, provider, buyer *node.Node, d string, req api.OrderRequest) string {
	t.Helper()
	if _, err := provider.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: h100, Count: 2, Price: "2.40", MinDuration: "1s"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the buyer to see the ask", func() (bool, string) {
		b, err := buyer.Book(ctx, h100, "USD")
		return err == nil && len(b.Asks) == 1, sprint(b, err)
	})
	req.Side, req.Market, req.Count, req.Price, req.Duration, req.IOC = "bid", h100, 2, "2.50", d, true
	bid, err := buyer.PlaceOrder(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(bid.Fills) != 1 || bid.Fills[0].Lease == "" {
		t.Fatalf("bid = %+v, want one fill with a lease", bid)
	}
	return bid.Fills[0].Lease
}

func TestLeaseDockerWorkload(t *testing.T) {
	provider, buyer, image, leftovers := startDockerNet(t)
	ctx := marketCtx(t)
	key := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBuyerKey buyer@laptop"
	id := tradeWorkload(t, ctx, provider, buyer, "6s", api.OrderRequest{Image: image, Ports: []uint16{8080}, SSHKey: key})

	var bv api.LeaseView
	waitFor(t, ctx, "the buyer to see its container's endpoint", func() (bool, string) {
		var err error
		bv, err = buyer.Lease(ctx, id)
		return err == nil && len(bv.Endpoints) == 1 && bv.ContainerState == "running", sprint(bv, err)
	})
	if bv.Executor != "docker" || bv.GPUAccess != "env-only" || !strings.HasPrefix(bv.ImageDigest, "sha256:") || bv.Image != image {
		t.Errorf("buyer's lease = %+v, want docker, env-only GPUs, the image and its digest", bv)
	}
	ep := bv.Endpoints[0]
	if ep.ContainerPort != 8080 || ep.Host != "127.0.0.1" || ep.HostPort < 22000 || ep.HostPort > 22999 {
		t.Errorf("endpoint = %+v, want 8080 published on 127.0.0.1:22000-22999", ep)
	}
	base := fmt.Sprintf("http://%s:%d", ep.Host, ep.HostPort)
	var env []string
	waitFor(t, ctx, "the container to answer on its published port", func() (bool, string) {
		resp, err := http.Get(base + "/env")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		return json.NewDecoder(resp.Body).Decode(&env) == nil, fmt.Sprint(resp.Status)
	})
	gpus := strings.Join(bv.GPUs, ",")
	for _, want := range []string{"CUDA_VISIBLE_DEVICES=" + gpus, "NVIDIA_VISIBLE_DEVICES=" + gpus, "SUANLI_LEASE=" + id} {
		if !slices.Contains(env, want) {
			t.Errorf("the container's environment lacks %q: %v", want, env)
		}
	}
	resp, err := http.Get(base + "/file?path=/root/.ssh/authorized_keys")
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != key+"\n" {
			t.Errorf("authorized_keys = %q, want the buyer's key", b)
		}
	}
	waitFor(t, ctx, "the container's output on the buyer", func() (bool, string) {
		logs, err := buyer.Logs(ctx, id, 0)
		var all strings.Builder
		for _, c := range logs.Chunks {
			all.WriteString(c.Data)
		}
		return err == nil && strings.Contains(all.String(), "hello from lease "+id+" gpus="+gpus), all.String()
	})
	pv := waitLeaseClosed(t, ctx, provider, id)
	bv = waitLeaseClosed(t, ctx, buyer, id)
	if pv.Reason != "completed" || bv.Reason != "completed" {
		t.Errorf("reasons = %q, %q; want completed on both sides", pv.Reason, bv.Reason)
	}
	if pv.ContainerState != "exited" || pv.Exit == nil {
		t.Errorf("provider's lease = %+v, want the container stopped with an exit status", pv)
	}
	if cs, vs := leftovers(); len(cs)+len(vs) > 0 {
		t.Errorf("after the lease: containers %v, volumes %v; want none", cs, vs)
	}
	// Billing began when the container ran: the provider bills no more
	// GPU time than the lease's length on 2 GPUs.
	rs, err := provider.Receipts(ctx, id)
	if err != nil || len(rs) == 0 {
		t.Fatalf("Receipts = %v, %v", rs, err)
	}
	var ms uint64
	for _, r := range rs {
		ms += r.GPUMillis
	}
	if ms == 0 || ms > 2*6000 {
		t.Errorf("billed %d GPU-ms, want some and at most 2 × 6 s", ms)
	}
}

func TestLeaseDockerWorkloadEnds(t *testing.T) {
	provider, buyer, image, leftovers := startDockerNet(t)
	ctx := marketCtx(t)
	t.Run("exits at once", func(t *testing.T) {
		id := tradeWorkload(t, ctx, provider, buyer, "30s", api.OrderRequest{Image: image, Exec: []string{"/app", "exit", "3"}})
		pv := waitLeaseClosed(t, ctx, provider, id)
		bv := waitLeaseClosed(t, ctx, buyer, id)
		if pv.Reason != "exited" || bv.Reason != "exited" {
			t.Errorf("reasons = %q (provider), %q (buyer); want exited", pv.Reason, bv.Reason)
		}
		if pv.Exit == nil || pv.Exit.Code != 3 {
			t.Errorf("provider's exit = %+v, want code 3", pv.Exit)
		}
		waitFor(t, ctx, "the exit status on the buyer", func() (bool, string) {
			v, err := buyer.Lease(ctx, id)
			return err == nil && v.Exit != nil && v.Exit.Code == 3 && strings.Contains(v.Note, "code 3"), sprint(v, err)
		})
		if end := pv.ClosedAt; end == nil || end.Sub(pv.Start) > 20*time.Second {
			t.Errorf("closed at %v after a start at %v: billing did not stop with the workload", end, pv.Start)
		}
		if cs, vs := leftovers(); len(cs)+len(vs) > 0 {
			t.Errorf("containers %v, volumes %v left; want none", cs, vs)
		}
	})
	t.Run("image not allowed", func(t *testing.T) {
		id := tradeWorkload(t, ctx, provider, buyer, "30s", api.OrderRequest{Image: "busybox:latest"})
		pv := waitLeaseClosed(t, ctx, provider, id)
		bv := waitLeaseClosed(t, ctx, buyer, id)
		if pv.Reason != "failed" || bv.Reason != "failed" || !strings.Contains(pv.Note, "not allowed") || !strings.Contains(bv.Note, "not allowed") {
			t.Errorf("leases = %+v / %+v; want failed on both sides, saying the image is not allowed", pv, bv)
		}
		if cs, vs := leftovers(); len(cs)+len(vs) > 0 {
			t.Errorf("containers %v, volumes %v left; want none", cs, vs)
		}
	})
}

func TestLeaseExecutorNotAllowed(t *testing.T) {
	provider, buyer := startLeaseNet(t) // reserve only
	ctx := marketCtx(t)
	id := tradeWorkload(t, ctx, provider, buyer, "30s", api.OrderRequest{Image: "suanli-test/echo"})
	pv := waitLeaseClosed(t, ctx, provider, id)
	bv := waitLeaseClosed(t, ctx, buyer, id)
	if pv.Reason != "failed" || bv.Reason != "failed" || !strings.Contains(bv.Note, "executor not allowed") {
		t.Errorf("leases = %+v / %+v; want failed on both sides: executor not allowed", pv, bv)
	}
	// The exit status comes on the exec stream, not with the close: the
	// buyer may learn that the lease closed before it hears why.
	waitFor(t, ctx, "the refusal naming docker on the buyer", func() (bool, string) {
		v, err := buyer.Lease(ctx, id)
		return err == nil && v.Exit != nil && strings.Contains(v.Exit.Error, "docker"), sprint(v, err)
	})
}

func TestBidWorkloadRefused(t *testing.T) {
	_, buyer := startLeaseNet(t)
	ctx := marketCtx(t)
	for _, req := range []api.OrderRequest{
		{Side: "bid", Market: h100, Count: 1, Price: "2", Duration: "1m", Image: "Not A//Ref::"},
		{Side: "bid", Market: h100, Count: 1, Price: "2", Duration: "1m", Image: "x/y", Ports: []uint16{80, 80}},
		{Side: "bid", Market: h100, Count: 1, Price: "2", Duration: "1m", Ports: []uint16{80}},
		{Side: "ask", Market: h100, Count: 1, Price: "2", Image: "x/y"},
	} {
		if _, err := buyer.PlaceOrder(ctx, req); err == nil {
			t.Errorf("PlaceOrder(%+v) = nil error, want refused", req)
		}
	}
}

// TestLeaseDockerProviderRestart: a provider closed gracefully mid-lease
// leaves its container running; restarted on its repo and address, it
// adopts it and the lease completes, the buyer's output resuming.
func TestLeaseDockerProviderRestart(t *testing.T) {
	c := dockertest.Engine(t)
	image := dockertest.EchoImage(t, c)
	pol, _ := executor.ParseImagePolicy([]string{"suanli-test/*"})
	dockerOpts := []node.Option{node.WithExecutors("reserve", "docker"),
		node.WithDocker(node.DockerConfig{Images: pol, EnvOnlyGPUs: true, PortMin: 22000, PortMax: 22999})}
	provider, buyer := startLeaseNet(t, dockerOpts...)
	ctx := marketCtx(t)
	id := tradeWorkload(t, ctx, provider, buyer, "12s", api.OrderRequest{Image: image, Ports: []uint16{8080}})
	var before api.LeaseView
	waitFor(t, ctx, "the container running", func() (bool, string) {
		var err error
		before, err = buyer.Lease(ctx, id)
		return err == nil && before.ContainerState == "running" && before.Countersigned >= 1, sprint(before, err)
	})
	repo, addrs := provider.Repo(), provider.Addrs()
	if err := provider.Close(); err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("http://%s:%d/env", before.Endpoints[0].Host, before.Endpoints[0].HostPort)
	if resp, err := http.Get(url); err != nil {
		t.Errorf("the container stopped with its daemon: %v", err)
	} else {
		resp.Body.Close()
	}
	logsBefore, _ := buyer.Logs(ctx, id, 0)
	var listen []string
	for _, a := range addrs {
		listen = append(listen, strings.Split(a, "/p2p/")[0])
	}
	p2, err := node.New(append([]node.Option{node.WithRepo(repo), node.WithListen(listen...), node.WithAPI(""), node.WithLogger(quiet),
		node.WithBillingInterval(time.Second), node.WithGPUSim("dgxh100", 1), node.WithRegion("CN-GZ"), node.WithPrice("2.49", "USD"),
		node.WithBootstrap(buyer.Addrs()...)}, dockerOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p2.Close() })
	pv, err := p2.Lease(ctx, id)
	if err != nil || pv.ContainerState != "running" || len(pv.Endpoints) != 1 || pv.Endpoints[0] != before.Endpoints[0] {
		t.Fatalf("restarted provider's lease = %+v, %v; want the same container adopted", pv, err)
	}
	waitFor(t, ctx, "the buyer's output to resume", func() (bool, string) {
		l, err := buyer.Logs(ctx, id, logsBefore.Next)
		return err == nil && len(l.Chunks) > 0, sprint(l, err)
	})
	pv = waitLeaseClosed(t, ctx, p2, id)
	bv := waitLeaseClosed(t, ctx, buyer, id)
	if pv.Reason != "completed" || bv.Reason != "completed" {
		t.Errorf("reasons = %q, %q; want completed", pv.Reason, bv.Reason)
	}
	if cs, vs := dockertest.Leftovers(t, c, executor.LeaseLabel, id); len(cs)+len(vs) > 0 {
		t.Errorf("left containers %v volumes %v", cs, vs)
	}
}

// TestProcessWorkloadSeesNoRepo: a process workload runs outside the
// provider's repo with none of its environment: it cannot find the API
// token (nor the passphrase) by any path the daemon gives it.
func TestProcessWorkloadSeesNoRepo(t *testing.T) {
	t.Setenv("SUANLI_PASSPHRASE", "hunter2-secret")
	provider, buyer := startLeaseNet(t, node.WithExecutors("reserve", "process"))
	ctx := marketCtx(t)
	token, err := os.ReadFile(filepath.Join(provider.Repo(), "api.token"))
	if err != nil || len(strings.TrimSpace(string(token))) < 16 {
		t.Fatalf("provider's api.token = %q, %v", token, err)
	}
	script := `cat api.token; cat ../api.token; cat "$SUANLI_REPO/api.token"; echo "pwd=$(pwd) repo=$SUANLI_REPO pass=$SUANLI_PASSPHRASE"; env`
	id := trade(t, ctx, provider, buyer, "4s", "sh", "-c", script)
	var out string
	waitFor(t, ctx, "the workload's output", func() (bool, string) {
		logs, err := buyer.Logs(ctx, id, 0)
		var b strings.Builder
		for _, c := range logs.Chunks {
			b.WriteString(c.Data)
		}
		out = b.String()
		return err == nil && strings.Contains(out, "pwd="), out
	})
	if strings.Contains(out, strings.TrimSpace(string(token))) {
		t.Errorf("the workload read the provider's API token:\n%s", out)
	}
	if strings.Contains(out, "hunter2-secret") {
		t.Errorf("the workload saw the daemon's passphrase:\n%s", out)
	}
	if strings.Contains(out, "pwd="+provider.Repo()) {
		t.Errorf("the workload ran in the provider's repo:\n%s", out)
	}
}
