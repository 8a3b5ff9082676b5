package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/suanli/suanli/node/executor/dockertest"
)

// syncBuffer is an io.Writer tests can read while a workload writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func waitFor(t *testing.T, what string, d time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; last: %s", what, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// testDocker is an executor on the local engine allowing suanli-test/*,
// with env-only GPUs (no NVIDIA runtime here) and ports of its own range.
func testDocker(t *testing.T, mod func(*DockerConfig)) (*DockerExecutor, *client.Client, string) {
	t.Helper()
	c := dockertest.Engine(t)
	img := dockertest.EchoImage(t, c)
	pol, err := ParseImagePolicy([]string{"suanli-test/*"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := DockerConfig{Owner: "test-" + t.Name(), Images: pol, EnvOnlyGPUs: true, PortMin: 21000, PortMax: 21999, Client: c}
	if mod != nil {
		mod(&cfg)
	}
	d, err := NewDocker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d, c, img
}

func leaseID(t *testing.T) string {
	return fmt.Sprintf("test-%s-%d", strings.ReplaceAll(strings.ToLower(t.Name()), "/", "-"), time.Now().UnixNano())
}

func assertNoLeftovers(t *testing.T, c *client.Client, lease string) {
	t.Helper()
	cs, vs := dockertest.Leftovers(t, c, LeaseLabel, lease)
	if len(cs)+len(vs) > 0 {
		t.Errorf("lease %s left containers %v and volumes %v", lease, cs, vs)
	}
}

func cleanupLease(t *testing.T, d *DockerExecutor, lease string) {
	t.Cleanup(func() { d.remove(context.Background(), lease) })
}

func httpGet(url string) (int, string, error) {
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

func TestDockerLeaseWorkload(t *testing.T) {
	d, c, img := testDocker(t, nil)
	lease := leaseID(t)
	cleanupLease(t, d, lease)
	var out, errOut syncBuffer
	w := Workload{LeaseID: lease, GPUs: []string{"GPU-aaaa", "GPU-bbbb"}, Image: img, Ports: []uint16{8080},
		Limits: Limits{MilliCPUs: 1500, MemoryBytes: 256 << 20, Pids: 256}, Stdout: &out, Stderr: &errOut}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run, err := d.Start(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	info := run.Info()
	if info.Executor != Docker || info.GPUAccess != GPUAccessEnvOnly || !strings.HasPrefix(info.ImageID, "sha256:") || len(info.Endpoints) != 1 {
		t.Fatalf("Info = %+v, want docker, env-only GPUs, an image ID and one endpoint", info)
	}
	ep := info.Endpoints[0]
	if ep.ContainerPort != 8080 || ep.Host != "127.0.0.1" || ep.HostPort < 21000 || ep.HostPort > 21999 {
		t.Errorf("endpoint = %+v, want 8080 on 127.0.0.1 in 21000-21999", ep)
	}
	base := "http://" + net.JoinHostPort(ep.Host, strconv.Itoa(int(ep.HostPort)))
	var env []string
	waitFor(t, "the published port to answer", 30*time.Second, func() (bool, string) {
		code, body, err := httpGet(base + "/env")
		if err != nil || code != 200 {
			return false, fmt.Sprint(code, body, err)
		}
		return json.Unmarshal([]byte(body), &env) == nil, body
	})
	for _, want := range []string{"CUDA_VISIBLE_DEVICES=GPU-aaaa,GPU-bbbb", "NVIDIA_VISIBLE_DEVICES=GPU-aaaa,GPU-bbbb", "SUANLI_LEASE=" + lease} {
		if !slices.Contains(env, want) {
			t.Errorf("container env lacks %q: %v", want, env)
		}
	}
	waitFor(t, "the workload's output", 30*time.Second, func() (bool, string) {
		return strings.Contains(out.String(), "hello from lease "+lease+" gpus=GPU-aaaa,GPU-bbbb") && strings.Contains(errOut.String(), "echo: serving"), out.String() + "|" + errOut.String()
	})
	// The root is read-only, /scratch and /tmp are not.
	if code, body, _ := httpGet(base + "/write?path=/x"); code == 200 {
		t.Errorf("writing / = %d %q, want refused (read-only root)", code, body)
	}
	for _, p := range []string{"/scratch/x", "/tmp/x"} {
		if code, body, _ := httpGet(base + "/write?path=" + p); code != 200 {
			t.Errorf("writing %s = %d %q, want ok", p, code, body)
		}
	}

	ins, err := c.ContainerInspect(ctx, info.Handle, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hc := ins.Container.HostConfig
	switch {
	case hc.Memory != 256<<20 || hc.MemorySwap != 256<<20:
		t.Errorf("memory = %d (swap %d), want %d and no swap", hc.Memory, hc.MemorySwap, 256<<20)
	case hc.NanoCPUs != 1_500_000_000:
		t.Errorf("NanoCPUs = %d, want 1.5 CPUs", hc.NanoCPUs)
	case hc.PidsLimit == nil || *hc.PidsLimit != 256:
		t.Errorf("PidsLimit = %v, want 256", hc.PidsLimit)
	case hc.Privileged || hc.NetworkMode.IsHost() || hc.PidMode.IsHost():
		t.Errorf("privileged %v, network %q, pid %q: want none of the host's", hc.Privileged, hc.NetworkMode, hc.PidMode)
	case !slices.Equal(hc.CapDrop, []string{"ALL"}) || slices.Contains(hc.CapAdd, "SYS_ADMIN") || slices.Contains(hc.CapAdd, "NET_RAW"):
		t.Errorf("CapDrop %v CapAdd %v, want all dropped and no SYS_ADMIN/NET_RAW", hc.CapDrop, hc.CapAdd)
	case !slices.Contains(hc.SecurityOpt, "no-new-privileges"):
		t.Errorf("SecurityOpt = %v, want no-new-privileges", hc.SecurityOpt)
	case !hc.ReadonlyRootfs:
		t.Error("root filesystem writable, want read-only")
	case len(hc.Binds) > 0:
		t.Errorf("host binds %v, want none", hc.Binds)
	case ins.Container.Config.Labels[LeaseLabel] != lease:
		t.Errorf("labels = %v, want %s=%s", ins.Container.Config.Labels, LeaseLabel, lease)
	}
	for _, m := range hc.Mounts {
		if m.Type == "bind" {
			t.Errorf("mount %+v is a host mount", m)
		}
	}

	if err := run.Stop(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	<-run.Done()
	if res := run.Result(); res.Error != "" || res.OOMKilled {
		t.Errorf("Result = %+v, want a clean stop", res)
	}
	if !strings.Contains(out.String(), "bye") {
		t.Errorf("output %q lacks the workload's goodbye on SIGTERM", out.String())
	}
	assertNoLeftovers(t, c, lease)
	if _, _, err := httpGet(base + "/env"); err == nil {
		t.Error("the published port still answers after Stop")
	}
	if d.ports.used[ep.HostPort] != "" {
		t.Errorf("host port %d still held after Stop", ep.HostPort)
	}
}

func TestDockerRefusals(t *testing.T) {
	d, c, img := testDocker(t, nil)
	ctx := context.Background()
	cases := []struct {
		name string
		w    Workload
		want string
	}{
		{"image not allowed", Workload{Image: "busybox:latest"}, "not allowed"},
		{"malformed reference", Workload{Image: "Not A//Ref::"}, "image"},
		{"no image", Workload{}, "no image"},
		{"port 0", Workload{Image: img, Ports: []uint16{0}}, "port 0"},
		{"port twice", Workload{Image: img, Ports: []uint16{80, 80}}, "twice"},
		{"too many ports", Workload{Image: img, Ports: make([]uint16, MaxPorts+1)}, "ports"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.w.LeaseID = leaseID(t)
			cleanupLease(t, d, tc.w.LeaseID)
			_, err := d.Start(ctx, tc.w)
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start = %v, want ErrRefused mentioning %q", err, tc.want)
			}
			assertNoLeftovers(t, c, tc.w.LeaseID)
		})
	}
	t.Run("no NVIDIA runtime", func(t *testing.T) {
		strict, _, _ := testDocker(t, func(c *DockerConfig) { c.EnvOnlyGPUs = false })
		if nv, _ := strict.Ping(ctx); nv {
			t.Skip("this engine has the NVIDIA runtime")
		}
		w := Workload{LeaseID: leaseID(t), Image: img, GPUs: []string{"GPU-x"}}
		cleanupLease(t, strict, w.LeaseID)
		if _, err := strict.Start(ctx, w); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "NVIDIA runtime") {
			t.Fatalf("Start = %v, want refused for want of the NVIDIA runtime", err)
		}
		assertNoLeftovers(t, c, w.LeaseID)
	})
	t.Run("image missing and unpullable", func(t *testing.T) {
		w := Workload{LeaseID: leaseID(t), Image: "suanli-test/absent:nope"}
		cleanupLease(t, d, w.LeaseID)
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if _, err := d.Start(pctx, w); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "could not be pulled") {
			t.Fatalf("Start = %v, want refused: not present and not pullable", err)
		}
		assertNoLeftovers(t, c, w.LeaseID)
	})
}

func TestDockerWorkloadEnds(t *testing.T) {
	d, c, img := testDocker(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t.Run("exits at once", func(t *testing.T) {
		var out syncBuffer
		w := Workload{LeaseID: leaseID(t), Image: img, Command: []string{"/app", "exit", "3"}, Stdout: &out}
		cleanupLease(t, d, w.LeaseID)
		run, err := d.Start(ctx, w)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-run.Done():
		case <-ctx.Done():
			t.Fatal("the workload's exit was not seen")
		}
		if res := run.Result(); res.Code != 3 || res.OOMKilled {
			t.Errorf("Result = %+v, want exit code 3", res)
		}
		if !strings.Contains(out.String(), "exiting with 3") {
			t.Errorf("output %q lacks the last line before the exit", out.String())
		}
		if run.Info().State != "exited" {
			t.Errorf("state = %q, want exited", run.Info().State)
		}
		run.Stop(time.Second)
		assertNoLeftovers(t, c, w.LeaseID)
	})
	t.Run("OOM-killed", func(t *testing.T) {
		w := Workload{LeaseID: leaseID(t), Image: img, Command: []string{"/app", "oom"}, Limits: Limits{MemoryBytes: 48 << 20}}
		cleanupLease(t, d, w.LeaseID)
		run, err := d.Start(ctx, w)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-run.Done():
		case <-ctx.Done():
			t.Fatal("the OOM kill was not seen")
		}
		if res := run.Result(); !res.OOMKilled || res.Code == 0 {
			t.Errorf("Result = %+v, want OOM-killed", res)
		}
		run.Stop(time.Second)
		assertNoLeftovers(t, c, w.LeaseID)
	})
}

func TestDockerSSHKey(t *testing.T) {
	d, c, img := testDocker(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHxQ buyer@example"
	w := Workload{LeaseID: leaseID(t), Image: img, Ports: []uint16{8080}, SSHKey: key}
	cleanupLease(t, d, w.LeaseID)
	run, err := d.Start(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	defer run.Stop(time.Second)
	ep := run.Info().Endpoints[0]
	url := fmt.Sprintf("http://%s:%d/file?path=/root/.ssh/authorized_keys", ep.Host, ep.HostPort)
	waitFor(t, "authorized_keys in the container", 30*time.Second, func() (bool, string) {
		code, body, err := httpGet(url)
		return code == 200 && body == key+"\n", fmt.Sprint(code, body, err)
	})
	run.Stop(time.Second)
	assertNoLeftovers(t, c, w.LeaseID)
}

func TestDockerPorts(t *testing.T) {
	// A range of two ports, one of them taken by another program.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := uint16(l.Addr().(*net.TCPAddr).Port)
	d, c, img := testDocker(t, func(c *DockerConfig) { c.PortMin, c.PortMax = taken, taken+1 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := Workload{LeaseID: leaseID(t), Image: img, Ports: []uint16{8080}}
	cleanupLease(t, d, w.LeaseID)
	run, err := d.Start(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	if got := run.Info().Endpoints[0].HostPort; got != taken+1 {
		t.Errorf("host port = %d, want %d (the free one)", got, taken+1)
	}
	w2 := Workload{LeaseID: leaseID(t) + "-2", Image: img, Ports: []uint16{8080}}
	cleanupLease(t, d, w2.LeaseID)
	if _, err := d.Start(ctx, w2); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "free") {
		t.Errorf("second Start = %v, want refused: no free port in the range", err)
	}
	assertNoLeftovers(t, c, w2.LeaseID)
	run.Stop(time.Second)
	assertNoLeftovers(t, c, w.LeaseID)
}

func TestDockerAdoptAndSweep(t *testing.T) {
	d, c, img := testDocker(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := Workload{LeaseID: leaseID(t), Image: img, Ports: []uint16{8080}, GPUs: []string{"GPU-1"}}
	cleanupLease(t, d, w.LeaseID)
	run, err := d.Start(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	before := run.Info()
	run.(*dockerRun).cancel() // the daemon dies: nothing watches the container any more

	// A new executor, as in a restarted daemon.
	d2, err := NewDocker(d.cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	w.Stdout = &out
	adopted, err := d2.Adopt(ctx, w, before.Handle)
	if err != nil {
		t.Fatal(err)
	}
	after := adopted.Info()
	if after.Handle != before.Handle || len(after.Endpoints) != 1 || after.Endpoints[0] != before.Endpoints[0] || after.GPUAccess != GPUAccessEnvOnly {
		t.Errorf("adopted %+v, want the same container and endpoint as %+v", after, before)
	}
	if d2.ports.used[after.Endpoints[0].HostPort] != w.LeaseID {
		t.Error("the adopted container's host port is not marked used")
	}
	waitFor(t, "output of the adopted container", 10*time.Second, func() (bool, string) {
		return strings.Contains(out.String(), "tick"), out.String()
	})
	if code, _, err := httpGet(fmt.Sprintf("http://127.0.0.1:%d/env", after.Endpoints[0].HostPort)); err != nil || code != 200 {
		t.Errorf("adopted container's port: %d %v", code, err)
	}
	// Sweep keeps what is kept, removes the rest.
	if _, err := c.VolumeCreate(ctx, client.VolumeCreateOptions{Name: "suanli-orphan-" + w.LeaseID,
		Labels: map[string]string{LeaseLabel: "orphan-" + w.LeaseID, OwnerLabel: d.cfg.Owner}}); err != nil {
		t.Fatal(err)
	}
	// Another daemon's object on the same engine is not this one's to sweep.
	other := "suanli-other-" + w.LeaseID
	if _, err := c.VolumeCreate(ctx, client.VolumeCreateOptions{Name: other,
		Labels: map[string]string{LeaseLabel: "other-" + w.LeaseID, OwnerLabel: "another-daemon"}}); err != nil {
		t.Fatal(err)
	}
	defer c.VolumeRemove(ctx, other, client.VolumeRemoveOptions{Force: true})
	removed, err := d2.Sweep(ctx, func(l string) bool { return l == w.LeaseID })
	if err != nil || !slices.Contains(removed, "orphan-"+w.LeaseID) {
		t.Errorf("Sweep = %v, %v; want the orphan removed", removed, err)
	}
	assertNoLeftovers(t, c, "orphan-"+w.LeaseID)
	if _, vs := dockertest.Leftovers(t, c, LeaseLabel, "other-"+w.LeaseID); len(vs) != 1 {
		t.Errorf("Sweep removed another daemon's volume: left %v", vs)
	}
	if cs, _ := dockertest.Leftovers(t, c, LeaseLabel, w.LeaseID); len(cs) != 1 {
		t.Errorf("Sweep removed the kept lease's container: %v", cs)
	}
	adopted.Stop(time.Second)
	assertNoLeftovers(t, c, w.LeaseID)
	if _, err := d2.Adopt(ctx, w, before.Handle); !errors.Is(err, ErrGone) {
		t.Errorf("Adopt after the end = %v, want ErrGone", err)
	}
}

// engineProxy forwards a unix socket to the engine's, until cut.
type engineProxy struct {
	l     net.Listener
	mu    sync.Mutex
	conns []net.Conn
	req   syncBuffer // what clients sent
}

// sent is what the clients sent the engine.
func (p *engineProxy) sent() string { return p.req.String() }

func newEngineProxy(t *testing.T) (*engineProxy, string) {
	t.Helper()
	target := "/var/run/docker.sock"
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		if !strings.HasPrefix(h, "unix://") {
			t.Skipf("skipped: DOCKER_HOST %s is not a unix socket", h)
		}
		target = strings.TrimPrefix(h, "unix://")
	}
	sock := filepath.Join(t.TempDir(), "engine.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	p := &engineProxy{l: l}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("unix", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { io.Copy(up, io.TeeReader(c, &p.req)); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
	t.Cleanup(p.cut)
	return p, "unix://" + sock
}

// cut stops the proxy: the engine is gone, as far as its clients see.
func (p *engineProxy) cut() {
	p.l.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

func TestDockerEngineLost(t *testing.T) {
	d, c, img := testDocker(t, nil)
	proxy, host := newEngineProxy(t)
	pc, err := client.New(client.WithHost(host), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	cfg := d.cfg
	cfg.Client, cfg.EngineGrace = pc, 2*time.Second
	lost, err := NewDocker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := Workload{LeaseID: leaseID(t), Image: img}
	cleanupLease(t, d, w.LeaseID)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run, err := lost.Start(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	proxy.cut()
	select {
	case <-run.Done():
	case <-ctx.Done():
		t.Fatal("a lost engine was never noticed")
	}
	if res := run.Result(); res.Code != -1 || !strings.Contains(res.Error, "lost the container engine") {
		t.Errorf("Result = %+v, want the engine lost", res)
	}
	if err := run.Stop(time.Second); !errors.Is(err, ErrEngine) {
		t.Errorf("Stop with the engine gone = %v, want ErrEngine", err)
	}
	// The engine itself is fine: what the lease left is still removed by
	// label (as a restarted daemon's sweep would).
	d.remove(ctx, w.LeaseID)
	assertNoLeftovers(t, c, w.LeaseID)
}
