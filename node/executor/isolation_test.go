package executor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
)

// TestDockerIsolation: two leases on one engine, each checked by
// inspecting the engine's and the kernel's configuration (never by
// sending traffic anywhere but loopback): each has its own network with
// inter-container traffic off, firewall rules that drop what its bridge
// sends to the host, the LAN, link-local and metadata addresses, a
// container made from the checked image ID, and a /scratch of exactly
// the disk sold, which a probe then tries to overfill through its
// published port on 127.0.0.1.
func TestDockerIsolation(t *testing.T) {
	d, c, img := testDocker(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	iso, err := d.Isolation(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if iso.StorageDriver == "fuse-overlayfs" && iso.DiskQuota {
		t.Errorf("Isolation = %+v: fuse-overlayfs has no quota", iso)
	}
	start := func(lease string) (Execution, Info) {
		w := Workload{LeaseID: lease, Image: img, Ports: []uint16{8080}, Limits: Limits{MemoryBytes: 256 << 20, DiskBytes: 1 << 20}}
		cleanupLease(t, d, lease)
		run, err := d.Start(ctx, w)
		if err != nil {
			t.Fatal(err)
		}
		return run, run.Info()
	}
	la, lb := leaseID(t)+"-a", leaseID(t)+"-b"
	runA, infoA := start(la)
	runB, _ := start(lb)

	for _, lease := range []string{la, lb} {
		ins, err := c.ContainerInspect(ctx, containerName(lease), client.ContainerInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := string(ins.Container.HostConfig.NetworkMode); got != networkName(lease) {
			t.Errorf("lease %s: network mode %q, want its own network %q", lease, got, networkName(lease))
		}
		if !strings.HasPrefix(ins.Container.Config.Image, "sha256:") {
			t.Errorf("lease %s: container made from %q, want the checked image ID", lease, ins.Container.Config.Image)
		}
		nw, err := c.NetworkInspect(ctx, networkName(lease), client.NetworkInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		o := nw.Network.Options
		if o["com.docker.network.bridge.enable_icc"] != "false" || o["com.docker.network.bridge.name"] != bridgeName(lease) {
			t.Errorf("lease %s: network options %v, want ICC off on bridge %s", lease, o, bridgeName(lease))
		}
		if len(nw.Network.Containers) != 1 {
			t.Errorf("lease %s: its network holds %d containers, want 1", lease, len(nw.Network.Containers))
		}
		if _, err := net.InterfaceByName(bridgeName(lease)); err != nil {
			t.Errorf("lease %s: bridge %s not in the host's namespace: %v", lease, bridgeName(lease), err)
		}
		rules, err := d.fw.rulesOf(lease)
		if err != nil {
			t.Fatal(err)
		}
		br := "-i " + bridgeName(lease)
		want := []string{"-A INPUT " + br + " -m comment", "-A INPUT " + br}
		for _, cidr := range []string{"169.254.0.0/16", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10"} {
			want = append(want, "-A DOCKER-USER -d "+cidr+" "+br)
		}
		for _, w := range want {
			if !slices.ContainsFunc(rules, func(r string) bool { return strings.HasPrefix(r, w) && strings.HasSuffix(r, "-j DROP") }) {
				t.Errorf("lease %s: no rule %q … -j DROP", lease, w)
			}
		}
		// The drops come before anything that accepts: the chains' first
		// rules are the lease's (the engine's RETURN and ACCEPTs after).
		for _, chain := range []string{"INPUT", "DOCKER-USER"} {
			all, _ := d.fw.run("-S", chain)
			lines := strings.Split(strings.TrimSpace(all), "\n")
			firstOther, lastOurs := len(lines), -1
			for i, l := range lines {
				if !strings.HasPrefix(l, "-A ") {
					continue
				}
				if strings.Contains(l, "suanli-lease=") {
					lastOurs = i
				} else if i < firstOther {
					firstOther = i
				}
			}
			if lastOurs > firstOther {
				t.Errorf("chain %s: a lease's rule comes after another's rule:\n%s", chain, all)
			}
		}
	}
	nA, _ := c.NetworkInspect(ctx, networkName(la), client.NetworkInspectOptions{})
	nB, _ := c.NetworkInspect(ctx, networkName(lb), client.NetworkInspectOptions{})
	if nA.Network.ID == nB.Network.ID {
		t.Error("two leases share a network")
	}

	// The disk sold is enforced: 1 MiB sold, 64 MiB refused; 512 KiB (the
	// control) fits.
	base := fmt.Sprintf("http://127.0.0.1:%d", infoA.Endpoints[0].HostPort)
	waitFor(t, "the probe to answer", 30*time.Second, func() (bool, string) {
		code, body, err := httpGet(base + "/env")
		return err == nil && code == 200, fmt.Sprint(code, body, err)
	})
	if code, body, err := httpGet(base + "/fill?path=/scratch/small&mb=0"); err != nil || code != 200 {
		t.Errorf("writing nothing to /scratch: %d %q %v", code, body, err)
	}
	code, body, _ := httpGet(base + "/fill?path=/scratch/big&mb=64")
	if code == 200 || !strings.Contains(body, "no space") {
		t.Errorf("writing 64 MiB to a 1 MiB /scratch = %d %q, want refused for space", code, body)
	}
	code, body, _ = httpGet(base + "/fill?path=/scratch/big&mb=0")
	if code != 200 {
		t.Errorf("rewriting /scratch/big empty = %d %q", code, body)
	}
	if code, body, _ := httpGet(base + "/write?path=/scratch/x"); code != 200 {
		t.Errorf("the control: a small write to /scratch = %d %q, want ok", code, body)
	}

	// A writable root cannot be bounded on an engine without quota.
	if !iso.DiskQuota {
		w := Workload{LeaseID: leaseID(t) + "-w", Image: img, WritableRoot: true, Limits: Limits{DiskBytes: 1 << 20}}
		cleanupLease(t, d, w.LeaseID)
		if _, err := d.Start(ctx, w); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "quota") {
			t.Errorf("writable root with disk sold on %s = %v, want refused", iso.StorageDriver, err)
		}
		assertNoLeftovers(t, c, w.LeaseID)
	}

	runA.Stop(time.Second)
	runB.Stop(time.Second)
	for _, lease := range []string{la, lb} {
		assertNoLeftovers(t, c, lease)
		if rules, _ := d.fw.rulesOf(lease); len(rules) > 0 {
			t.Errorf("lease %s left firewall rules %q", lease, rules)
		}
		if _, err := c.NetworkInspect(ctx, networkName(lease), client.NetworkInspectOptions{}); err == nil {
			t.Errorf("lease %s left its network", lease)
		}
	}
}

// TestDockerAllowListBeforePull: an image the allow-list refuses is never
// pulled, even where a digest entry is allowed: the engine sees no pull
// request (the requests are recorded on the way).
func TestDockerAllowListBeforePull(t *testing.T) {
	d, _, img := testDocker(t, func(c *DockerConfig) {
		c.Images.Patterns = append(c.Images.Patterns, "sha256:"+strings.Repeat("ab", 32))
	})
	proxy, host := newEngineProxy(t)
	pc, err := client.New(client.WithHost(host), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	cfg := d.cfg
	cfg.Client = pc
	rec, err := NewDocker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, ref := range []string{"evil.example/fill-the-disk:latest", "evil.example/x@sha256:" + strings.Repeat("cd", 32)} {
		w := Workload{LeaseID: leaseID(t), Image: ref}
		if _, err := rec.Start(ctx, w); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "not allowed") {
			t.Errorf("Start(%s) = %v, want refused as not allowed", ref, err)
		}
	}
	// The control: an allowed image runs, through the same recording proxy.
	w := Workload{LeaseID: leaseID(t), Image: img}
	cleanupLease(t, d, w.LeaseID)
	run, err := rec.Start(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	run.Stop(time.Second)
	sent := proxy.sent()
	if strings.Contains(sent, "/images/create") {
		t.Errorf("the engine was asked to pull:\n%s", sent)
	}
	if !strings.Contains(sent, "/containers/create") {
		t.Error("the recording proxy saw no request: the control did not go through it")
	}
}
