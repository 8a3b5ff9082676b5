package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/executor"
	"github.com/suanli/suanli/node/executor/dockertest"
)

// dockerNet is a provider daemon allowed to run suanli-test/* containers
// (simulated GPUs, so env-only) and a buyer daemon, on fixed p2p ports.
type dockerNet struct {
	killNet
	engine *client.Client
	image  string
}

func startDockerNet(t *testing.T, ports string) *dockerNet {
	t.Helper()
	c := dockertest.Engine(t)
	image := dockertest.EchoImage(t, c)
	k := startPair(t, "--executor", "docker", "--image-allow", "suanli-test/*", "--docker-env-only-gpus", "--port-range", ports)
	return &dockerNet{killNet: *k, engine: c, image: image}
}

// leftovers fails the test if anything labelled suanli.lease remains.
func (k *dockerNet) assertNothingLeft(t *testing.T) {
	t.Helper()
	poll(t, "no container or volume of the lease left", func() (bool, string) {
		cs, vs := dockertest.Leftovers(t, k.engine, executor.LeaseLabel, k.lease)
		return len(cs)+len(vs) == 0, fmt.Sprint(cs, vs)
	})
}

// endpoint waits for the buyer's view of the lease to show a running
// container and returns its published port's URL.
func (k *dockerNet) endpoint(t *testing.T) (string, api.LeaseView) {
	t.Helper()
	var l api.LeaseView
	poll(t, "the container's endpoint on the buyer", func() (bool, string) {
		code, out, errOut := runCLI(t, "--repo", k.repoB, "lease", "show", k.lease, "--json")
		l = api.LeaseView{}
		return code == 0 && json.Unmarshal([]byte(out), &l) == nil && len(l.Endpoints) == 1 && l.ContainerState == "running", out + errOut
	})
	return fmt.Sprintf("http://%s:%d", l.Endpoints[0].Host, l.Endpoints[0].HostPort), l
}

func get(url string) (string, error) {
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// TestDaemonDockerLease is the "done when": a buyer's bid --image
// --port --wait runs a container on the provider, on exactly the leased
// GPUs, reachable on a published port, its output in `suanli logs`, and
// nothing left on the engine after the lease.
func TestDaemonDockerLease(t *testing.T) {
	t.Parallel()
	k := startDockerNet(t, "23000-23499")
	var mu sync.Mutex
	var out bytes.Buffer
	done := make(chan int, 1)
	go func() {
		code, o, e := runCLI(t, "--repo", k.repoB, "bid", "--gpu", h100Market, "--count", "2", "--price", "2.50",
			"--duration", "8s", "--image", k.image, "--port", "8080", "--wait")
		mu.Lock()
		out.WriteString(o + e)
		mu.Unlock()
		done <- code
	}()
	l := k.leaseOn(t, k.repoB)
	k.lease = l.ID
	url, l := k.endpoint(t)
	var env []string
	poll(t, "the container to answer on its published port", func() (bool, string) {
		body, err := get(url + "/env")
		return err == nil && json.Unmarshal([]byte(body), &env) == nil, fmt.Sprint(body, err)
	})
	want := "CUDA_VISIBLE_DEVICES=" + strings.Join(l.GPUs, ",")
	if !strings.Contains(strings.Join(env, "\n"), want) {
		t.Errorf("the container's environment lacks %q: %v", want, env)
	}
	poll(t, "suanli logs to show the container's output", func() (bool, string) {
		code, o, e := runCLI(t, "--repo", k.repoB, "logs", k.lease)
		return code == 0 && strings.Contains(o, "hello from lease "+k.lease), o + e
	})
	code, show, _ := runCLI(t, "--repo", k.repoB, "lease", "show", k.lease)
	for _, w := range []string{"executor docker", "image digest sha256:", "container running, GPUs env-only", "port 8080 → 127.0.0.1:"} {
		if code != 0 || !strings.Contains(show, w) {
			t.Errorf("lease show lacks %q:\n%s", w, show)
		}
	}
	select {
	case code := <-done:
		mu.Lock()
		defer mu.Unlock()
		if code != 0 || !strings.Contains(out.String(), "port 8080 → 127.0.0.1:") || !strings.Contains(out.String(), "closed completed") {
			t.Errorf("bid --wait exited %d:\n%s\nwant the endpoint and the lease completed", code, out.String())
		}
	case <-time.After(deadline):
		t.Fatal("bid --wait did not return after the lease")
	}
	k.assertNothingLeft(t)
	if _, err := get(url + "/env"); err == nil {
		t.Error("the published port still answers after the lease")
	}
}

// TestKillProviderDocker: the provider daemon is killed with SIGKILL
// while its container runs; the container runs on unwatched, the
// restarted daemon adopts it by label, the buyer's log stream comes back,
// and the lease completes with both chains agreeing and nothing left.
func TestKillProviderDocker(t *testing.T) {
	t.Parallel()
	k := startDockerNet(t, "23500-23999")
	poll(t, "the bid to fill", func() (bool, string) {
		code, out, errOut := runCLI(t, "--repo", k.repoB, "bid", "--gpu", h100Market, "--count", "2", "--price", "2.50",
			"--duration", "25s", "--ioc", "--image", k.image, "--port", "8080")
		return code == 0 && strings.Contains(out, "filled"), out + errOut
	})
	k.lease = k.leaseOn(t, k.repoB).ID
	url, before := k.endpoint(t)
	k.waitCountersigned(t, k.repoP, 2)
	kill9(t, k.dP)
	if _, err := get(url + "/env"); err != nil {
		t.Errorf("the container died with its daemon: %v", err)
	}
	_, logsBefore, _ := runCLI(t, "--repo", k.repoB, "logs", k.lease)
	k.dP = startDaemon(t, k.repoP, k.argsP...)
	poll(t, "the restarted provider to adopt the container", func() (bool, string) {
		code, out, errOut := runCLI(t, "--repo", k.repoP, "lease", "show", k.lease, "--json")
		var l api.LeaseView
		return code == 0 && json.Unmarshal([]byte(out), &l) == nil && l.State == "running" && l.ContainerState == "running" &&
			len(l.Endpoints) == 1 && l.Endpoints[0] == before.Endpoints[0], out + errOut
	})
	poll(t, "the buyer's log stream to come back", func() (bool, string) {
		_, o, _ := runCLI(t, "--repo", k.repoB, "logs", k.lease)
		return len(o) > len(logsBefore) && strings.Contains(o[len(logsBefore):], "tick"), o[len(logsBefore):]
	})
	lp := k.waitClosed(t, k.repoP)
	lb := k.waitClosed(t, k.repoB)
	if lp.Reason != "completed" || lb.Reason != "completed" {
		t.Errorf("reasons = %q (provider), %q (buyer); want completed", lp.Reason, lb.Reason)
	}
	k.chainsAgree(t)
	k.assertNothingLeft(t)
}
