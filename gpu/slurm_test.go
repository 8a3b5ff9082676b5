package gpu

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testCluster is the cluster contrib/slurm/slurm-up.sh started
// (SLURM_CONF); skipped without one unless CI is set.
func testCluster(t *testing.T) Slurm {
	t.Helper()
	conf := os.Getenv("SLURM_CONF")
	if _, err := exec.LookPath("sinfo"); conf == "" || err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("CI is set but no Slurm cluster is (SLURM_CONF, sinfo): .ci/run starts one with contrib/slurm/slurm-up.sh")
		}
		t.Skip("no Slurm cluster: run contrib/slurm/slurm-up.sh DIR and set SLURM_CONF")
	}
	lockCluster(t, conf)
	return Slurm{Conf: conf}
}

// lockCluster holds the cluster for this test alone until it ends: go
// test runs packages in parallel, and the GPU counts the tests check
// assume no other test's jobs.
func lockCluster(t *testing.T, conf string) {
	f, err := os.OpenFile(filepath.Join(filepath.Dir(conf), "tests.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
}

// confNode is a node's gres as the config states it.
type confNode struct {
	name, typ string
	n         int
}

// confGPUs reads the nodes' gres the way the config states them:
// "Gres=gpu:TYPE:N" on each NodeName line of slurm.conf, in its order.
func confGPUs(t *testing.T, conf string) []confNode {
	t.Helper()
	b, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	var nodes []confNode
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "NodeName=") {
			continue
		}
		var c confNode
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "NodeName="); ok {
				c.name = v
			}
			if v, ok := strings.CutPrefix(f, "Gres="); ok {
				g, err := ParseGres(v)
				if err != nil || len(g) != 1 {
					t.Fatalf("config gres %q: %v", v, err)
				}
				c.typ, c.n = g[0].Type, g[0].Count
			}
		}
		if c.n > 0 {
			nodes = append(nodes, c)
		}
	}
	if len(nodes) == 0 {
		t.Fatalf("%s has no node with gpu gres", conf)
	}
	return nodes
}

// TestSlurmInventory: the inventory matches the cluster's config, maps
// the gres type to the configured market key, and leaves out the GPUs a
// cluster user's job holds but not those of Suanli's own lease jobs.
func TestSlurmInventory(t *testing.T) {
	s := testCluster(t)
	nodes := confGPUs(t, s.Conf)
	typ, n := nodes[0].typ, 0
	var want []SlurmGPU
	for _, c := range nodes {
		for i := range c.n {
			want = append(want, SlurmGPU{Node: c.name, Type: c.typ, Index: i})
		}
		n += c.n
	}
	b, err := OpenSlurm(context.Background(), SlurmBackendConfig{Slurm: s, JobPrefix: "suanli-",
		Markets: map[string]string{typ: "nvidia-h100-sxm5-80gb"}})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := b.Inventory()
	if err != nil {
		t.Fatal(err)
	}
	if inv.Backend != "slurm:"+b.Cluster() || len(inv.Devices) != n {
		t.Fatalf("inventory %s with %d GPUs, want slurm:%s with %d", inv.Backend, len(inv.Devices), b.Cluster(), n)
	}
	for i, d := range inv.Devices {
		g, err := ParseSlurmUUID(d.UUID)
		want[i].Cluster = b.Cluster()
		if err != nil || g != want[i] {
			t.Errorf("device %d: %+v (%v)", i, g, err)
		}
		if d.Market != "nvidia-h100-sxm5-80gb" || d.MemoryBytes != 80<<30 {
			t.Errorf("device %d: market %q memory %d", i, d.Market, d.MemoryBytes)
		}
	}
	hold := func(name string, k int) string {
		t.Helper()
		out, err := s.Run(context.Background(), []byte("#!/bin/sh\nexec sleep 300\n"), "sbatch", "--parsable",
			"--job-name="+name, "--output=/dev/null", "--gres=gpu:"+typ+":"+string(rune('0'+k)))
		if err != nil {
			t.Fatal(err)
		}
		id := strings.TrimSpace(string(out))
		t.Cleanup(func() { s.Run(context.Background(), nil, "scancel", "--signal=KILL", "--full", id) })
		waitSlurm(t, func() bool {
			jobs, _ := s.Jobs(context.Background())
			return slices.ContainsFunc(jobs, func(j SlurmJob) bool { return j.ID == id && j.State == "RUNNING" })
		})
		return id
	}
	hold("cluster-user", 3)
	hold("suanli-lease", 2)
	inv, err = b.Inventory()
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Devices) != n-3 {
		t.Fatalf("with a cluster user's job on 3 GPUs and a lease's on 2: %d GPUs offered, want %d", len(inv.Devices), n-3)
	}
	if len(nodes) < 2 {
		t.Fatalf("the cluster has one node; this test needs two (contrib/slurm/slurm-up.sh -n 2)")
	}
	// A reservation of the last node, begun: a maintenance window sells
	// nothing, the provider's own reservation (its job prefix) does.
	last := nodes[len(nodes)-1].name
	offered := func() (k int) {
		t.Helper()
		inv, err := b.Inventory()
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range inv.Devices {
			if SlurmNodeOf(d.UUID) == last {
				k++
			}
		}
		return k
	}
	before := offered()
	for _, c := range []struct {
		name string
		sold bool
	}{{"suanli-lease.owner", true}, {"maint", false}} {
		if _, err := s.Run(context.Background(), nil, "scontrol", "create", "reservation", "ReservationName="+c.name,
			"StartTime=now", "Duration=10", "Users=root", "Nodes="+last, "Flags=IGNORE_JOBS"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Run(context.Background(), nil, "scontrol", "delete", "ReservationName="+c.name) })
		got := offered()
		s.Run(context.Background(), nil, "scontrol", "delete", "ReservationName="+c.name)
		if want := map[bool]int{true: before, false: 0}[c.sold]; got != want {
			t.Errorf("with reservation %s of %s: %d of its GPUs offered, want %d", c.name, last, got, want)
		}
	}
	if got := offered(); got != before {
		t.Errorf("after the reservations: %d GPUs of %s offered, want %d", got, last, before)
	}
}

func waitSlurm(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting on Slurm")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestParseGres(t *testing.T) {
	for in, want := range map[string][]SlurmGres{
		"gpu:h100:8(S:0-1)": {{Type: "h100", Count: 8}},
		"gpu:4":             {{Count: 4}},
		"gpu:h100:2(IDX:0-1,5),gpu:a100:1(IDX:N/A)": {{Type: "h100", Count: 2, Used: []int{0, 1, 5}}, {Type: "a100", Count: 1}},
		"nic:2,gpu:l4:1(IDX:3)":                     {{Type: "l4", Count: 1, Used: []int{3}}},
		"(null)":                                    nil,
	} {
		got, err := ParseGres(in)
		if err != nil || !slices.EqualFunc(got, want, func(a, b SlurmGres) bool {
			return a.Type == b.Type && a.Count == b.Count && slices.Equal(a.Used, b.Used)
		}) {
			t.Errorf("ParseGres(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"gpu:h100:x", "gpu:h100:2(IDX:3-1)", "gpu:a:b:c:1", "gpu:1(IDX:-4)"} {
		if _, err := ParseGres(bad); err == nil {
			t.Errorf("ParseGres(%q) accepted", bad)
		}
	}
	g := SlurmGPU{Cluster: "c", Node: "n-1", Type: "h100", Index: 7}
	if back, err := ParseSlurmUUID(g.UUID()); err != nil || back != g {
		t.Errorf("UUID round trip: %+v, %v", back, err)
	}
	for _, bad := range []string{"GPU-1234", "slurm:c:n:h100", "slurm::n:t:1", "slurm:c:n:t:-1"} {
		if _, err := ParseSlurmUUID(bad); err == nil {
			t.Errorf("ParseSlurmUUID(%q) accepted", bad)
		}
	}
}

func FuzzParseGres(f *testing.F) {
	f.Add("gpu:h100:2(IDX:0-1,5),gpu:a100:1(IDX:N/A)")
	f.Add("gpu:4(S:0)")
	f.Add("gpu:x:99999999(IDX:0-99999999)")
	f.Fuzz(func(t *testing.T, s string) {
		gs, err := ParseGres(s)
		if err != nil {
			return
		}
		for _, g := range gs {
			if g.Count < 0 || !slices.IsSorted(g.Used) {
				t.Fatalf("%q: %+v", s, g)
			}
		}
	})
}

func FuzzParseSlurmJSON(f *testing.F) {
	f.Add([]byte(`{"jobs":[{"job_id":7,"name":"suanli-x","job_state":"RUNNING","exit_code":768,"gres_detail":["gpu:h100:2(IDX:0-1)"],"job_resources":{"allocated_nodes":[{"nodename":"vm"}]}}]}`))
	f.Add([]byte(`{"nodes":[{"name":"vm","state":"mixed","gres":"gpu:h100:8","gres_used":"gpu:h100:2(IDX:0-1)"}]}`))
	f.Add([]byte(`{"jobs":[{"job_id":"x"}]}`))
	f.Add([]byte(`{"jobs":[{"job_id":8,"het_job_id":7,"resv_name":"suanli-L.P","start_time":1796368275,"end_time":1796368277,"gres_detail":["gpu:h100:3(IDX:0-2)"],"job_resources":{"allocated_nodes":[{"nodename":"vm-2"}]}}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if jobs, err := ParseSqueue(b); err == nil {
			for _, j := range jobs {
				if j.ExitCode < 0 || j.ExitCode > 255 || j.Signal < 0 {
					t.Fatalf("job %+v", j)
				}
			}
		}
		parseSinfo(b)
	})
}

// TestSlurmLocalTelemetry: a daemon on a compute node samples its GPUs
// through NVML (here the first of a simulated DGX H100's, as many as the
// node has) under their Slurm UUIDs,
// the ones its offer lists; an unknown node or a count that does not
// match gres is refused; the offer's facts say Slurm, its version and
// how many nodes a lease may span.
func TestSlurmLocalTelemetry(t *testing.T) {
	s := testCluster(t)
	nodes := confGPUs(t, s.Conf)
	node, n := nodes[0].name, nodes[0].n
	ctx := context.Background()
	sim, err := OpenSim("dgxh100", 7)
	if err != nil {
		t.Fatal(err)
	}
	if n > 8 {
		t.Fatalf("node %s has %d GPUs, the simulated DGX 8", node, n)
	}
	local := firstGPUs{sim, n}
	b, err := OpenSlurm(ctx, SlurmBackendConfig{Slurm: s, Local: local, LocalNode: node})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	inv, err := b.Inventory()
	if err != nil {
		t.Fatal(err)
	}
	ts, err := b.Telemetry()
	if err != nil || len(ts) != n {
		t.Fatalf("telemetry: %d samples, %v; want %d", len(ts), err, n)
	}
	for i, tm := range ts {
		if SlurmNodeOf(inv.Devices[i].UUID) != node || tm.UUID != inv.Devices[i].UUID || tm.MemoryTotalBytes == 0 || tm.PowerMilliwatts == 0 {
			t.Errorf("sample %d: %+v, want NVML's counters for %s", i, tm, inv.Devices[i].UUID)
		}
	}
	f, err := b.Facts(ctx)
	if err != nil || f.Scheduler != "slurm" || strings.Count(f.Version, ".") != 2 || f.MaxNodes != len(nodes) {
		t.Errorf("facts %+v, %v", f, err)
	}
	if SlurmNodeOf(inv.Devices[0].UUID) != node || SlurmNodeOf("GPU-1") != "" {
		t.Errorf("SlurmNodeOf")
	}
	if _, err := OpenSlurm(ctx, SlurmBackendConfig{Slurm: s, Local: local, LocalNode: "nosuch"}); err == nil {
		t.Error("an unknown local node was accepted")
	}
	if _, err := localMap("c", SlurmNode{Name: node, GPUs: []SlurmGres{{Type: "h100", Count: 8}}}, make([]Device, 4)); err == nil {
		t.Error("8 gres and 4 NVML devices were paired")
	}
	// Without Local there are no counters.
	plain, err := OpenSlurm(ctx, SlurmBackendConfig{Slurm: s})
	if err != nil {
		t.Fatal(err)
	}
	if ts, err := plain.Telemetry(); err != nil || len(ts) != 0 {
		t.Errorf("telemetry without NVML: %v, %v", ts, err)
	}
}

// firstGPUs is a machine with the first n GPUs of another.
type firstGPUs struct {
	Backend
	n int
}

func (f firstGPUs) Inventory() (*Inventory, error) {
	inv, err := f.Backend.Inventory()
	if err == nil {
		inv.Devices = inv.Devices[:f.n]
	}
	return inv, err
}

func (f firstGPUs) Telemetry() ([]Telemetry, error) {
	ts, err := f.Backend.Telemetry()
	if err == nil {
		ts = ts[:f.n]
	}
	return ts, err
}
