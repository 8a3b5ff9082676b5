package executor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// testProcess is a process executor with a work root, cgroup parent and
// uid range of the test's own; it is skipped where this machine cannot
// isolate (not root), and fails under CI, which runs as root.
func testProcess(t *testing.T) *ProcessExecutor {
	t.Helper()
	parent := fmt.Sprintf("suanli-test-%d", time.Now().UnixNano())
	base := uint32(1_950_000_000 + (time.Now().UnixNano()%1000)*100)
	root := t.TempDir()
	os.Chmod(root, 0o711)
	os.Chmod(filepath.Dir(root), 0o711)
	p, err := NewProcess(ProcessConfig{WorkRoot: filepath.Join(root, "work"), CgroupParent: parent, UIDMin: base, UIDMax: base + 9})
	if err != nil {
		if os.Getenv("CI") != "" || os.Geteuid() == 0 {
			t.Fatal(err)
		}
		t.Skipf("skipped: this machine cannot isolate process workloads: %v", err)
	}
	t.Cleanup(func() {
		for _, d := range p.cg.parentDirs() {
			os.Remove(d)
		}
	})
	return p
}

func waitDone(t *testing.T, e Execution, what string) {
	t.Helper()
	select {
	case <-e.Done():
	case <-time.After(60 * time.Second):
		t.Fatalf("%s: the workload never ended", what)
	}
}

// runAs is the uid a process workload runs as.
func runAs(e Execution) uint32 { return e.(*processRun).meta.UID }

// TestProcessEscapes: a hostile process workload tries to read the
// daemon's environment, cwd and repo (its key and API token), and
// reports what it reached; it reaches nothing. The control reads its own
// work dir and environment, which must work.
func TestProcessEscapes(t *testing.T) {
	t.Setenv("SUANLI_PASSPHRASE", "daemon-secret-passphrase")
	p := testProcess(t)
	repo := filepath.Join(t.TempDir(), "repo")
	if err := os.Mkdir(repo, 0o700); err != nil { // the daemon's, as a node's repo is
		t.Fatal(err)
	}
	for _, f := range []string{"api.token", "identity.key"} {
		if err := os.WriteFile(filepath.Join(repo, f), []byte("daemon-secret-"+f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	probe := strings.Join([]string{
		"echo control-env=$SUANLI_LEASE",
		"echo x > own && cat own && echo control-workdir",
		fmt.Sprintf("cat /proc/%d/environ && echo REACHED-environ", os.Getpid()),
		fmt.Sprintf("cat /proc/$PPID/environ | tr '\\0' '\\n' | grep -q SUANLI_PASSPHRASE && echo REACHED-parent-environ"),
		fmt.Sprintf("ls /proc/%d/cwd/ && echo REACHED-cwd", os.Getpid()),
		fmt.Sprintf("cat %s/api.token && echo REACHED-token", repo),
		fmt.Sprintf("cat %s/identity.key && echo REACHED-key", repo),
		fmt.Sprintf("ls %s && echo REACHED-repo", repo),
		fmt.Sprintf("ls %s && echo REACHED-other-leases", p.workDirs()),
		fmt.Sprintf("ls %s && echo REACHED-state", p.stateRoot()),
		fmt.Sprintf("echo $$ > %s/cgroup.procs && echo REACHED-cgroup-escape", filepath.Join(p.cg.root, "freezer")),
		"kill -9 1 && echo REACHED-kill-init",
		"id -u",
	}, "; ")
	var out, errOut syncBuffer
	run, err := p.Start(context.Background(), Workload{LeaseID: "escape-probe", GPUs: []string{"GPU-1", "GPU-2"},
		Command: []string{"sh", "-c", probe}, Stdout: &out, Stderr: &errOut})
	if err != nil {
		t.Fatal(err)
	}
	uid := runAs(run)
	dir := workDirOf(run)
	waitDone(t, run, "probe")
	got := out.String()
	if strings.Contains(got, "REACHED") || strings.Contains(got, "daemon-secret") {
		t.Errorf("the workload reached the daemon's secrets:\n%s", got)
	}
	for _, want := range []string{"control-env=escape-probe", "control-workdir", strconv.FormatUint(uint64(uid), 10)} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks the honest %q (stderr %q):\n%s", want, errOut.String(), got)
		}
	}
	if uid == uint32(os.Geteuid()) || uid < p.cfg.UIDMin || uid > p.cfg.UIDMax {
		t.Errorf("ran as uid %d, want one of %d-%d and never the daemon's", uid, p.cfg.UIDMin, p.cfg.UIDMax)
	}
	if filepath.Dir(dir) != p.workDirs() {
		t.Errorf("ran in %s, want a directory under %s", dir, p.workDirs())
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("work dir %s left behind: %v", dir, err)
	}
}

// TestProcessEnvironment: the workload sees exactly the leased GPUs and a
// scrubbed environment, none of the daemon's variables.
func TestProcessEnvironment(t *testing.T) {
	t.Setenv("SUANLI_PASSPHRASE", "secret")
	p := testProcess(t)
	var out syncBuffer
	run, err := p.Start(context.Background(), Workload{LeaseID: "L1", GPUs: []string{"GPU-1", "GPU-2"},
		Command: []string{"sh", "-c", "pwd; env"}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	dir := workDirOf(run)
	waitDone(t, run, "env")
	if res := run.Result(); res.Code != 0 {
		t.Fatalf("Result = %+v", res)
	}
	got := out.String()
	if strings.Contains(got, "SUANLI_PASSPHRASE") || strings.Contains(got, "secret") {
		t.Errorf("the workload saw the daemon's environment:\n%s", got)
	}
	for _, want := range []string{"CUDA_VISIBLE_DEVICES=GPU-1,GPU-2", "SUANLI_LEASE=L1", "HOME=" + dir} {
		if !strings.Contains(got, want) {
			t.Errorf("environment lacks %q:\n%s", want, got)
		}
	}
	if !strings.HasPrefix(got, dir+"\n") {
		t.Errorf("ran in %q, want %s", got, dir)
	}
	for _, w := range []Workload{{Image: "x"}, {Command: []string{"no-such-command-here"}}} {
		if _, err := p.Start(context.Background(), w); !errors.Is(err, ErrRefused) {
			t.Errorf("Start(%+v) = %v, want ErrRefused", w, err)
		}
	}
}

// TestProcessRefusesUnsafeUser: the executor refuses to start as root or
// as the daemon's uid, or with a range that holds an account.
func TestProcessRefusesUnsafeUser(t *testing.T) {
	testProcess(t) // skips where the machine cannot isolate at all
	for _, cfg := range []ProcessConfig{
		{User: strconv.Itoa(os.Geteuid())},
		{User: "root"},
		{User: "no-such-user-here"},
		{UIDMin: 0, UIDMax: 10},
		{UIDMin: uint32(os.Geteuid()), UIDMax: uint32(os.Geteuid()) + 1},
	} {
		cfg.WorkRoot = t.TempDir()
		if _, err := NewProcess(cfg); err == nil {
			t.Errorf("NewProcess(%+v) = nil error, want refused", cfg)
		}
	}
	if _, err := NewProcess(ProcessConfig{WorkRoot: t.TempDir(), CgroupRoot: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "cgroup") {
		t.Errorf("NewProcess without cgroups = %v, want refused naming cgroups", err)
	}
}

// TestProcessSetsidEscape: descendants that leave the process group by
// setsid or a double fork do not outlive Stop, nor the main process's
// exit; nothing runs as the lease's uid afterwards.
func TestProcessSetsidEscape(t *testing.T) {
	p := testProcess(t)
	escape := "setsid sleep 300 & (sh -c 'sleep 301 &' &); "
	for _, tc := range []struct {
		name, cmd string
		stop      bool
	}{
		{"stopped", escape + "echo started; sleep 300", true},
		{"main exits", escape + "echo started; sleep 2; exit 7", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out syncBuffer
			run, err := p.Start(context.Background(), Workload{LeaseID: "esc-" + strings.ReplaceAll(tc.name, " ", "-"),
				Command: []string{"sh", "-c", tc.cmd}, Stdout: &out})
			if err != nil {
				t.Fatal(err)
			}
			uid := runAs(run)
			// The control: the escapees run, as the lease's uid, outside
			// the main process's group and session.
			waitFor(t, "the escapees to run", 30*time.Second, func() (bool, string) {
				return len(pidsOfUID(uid)) >= 4 && strings.Contains(out.String(), "started"), fmt.Sprint(pidsOfUID(uid))
			})
			if tc.stop {
				run.Stop(time.Second)
			}
			waitDone(t, run, tc.name)
			if left := pidsOfUID(uid); len(left) > 0 {
				t.Errorf("processes of uid %d outlived the lease: %v", uid, left)
			}
			if p.cg.exists(leaseName(run.(*processRun).w.LeaseID)) {
				t.Error("the lease's cgroup is left behind")
			}
			res := run.Result()
			if tc.stop && res.Signal == "" || !tc.stop && res.Code != 7 {
				t.Errorf("Result = %+v", res)
			}
		})
	}
}

// TestProcessLimits: the CPU, memory and processes sold are the lease's
// cgroup limits; a workload over its memory is killed and reported so.
func TestProcessLimits(t *testing.T) {
	p := testProcess(t)
	if p.cg.v2 {
		t.Skip("checks the cgroup v1 files of this machine class")
	}
	run, err := p.Start(context.Background(), Workload{LeaseID: "limits", Command: []string{"sleep", "300"},
		Limits: Limits{MilliCPUs: 1500, MemoryBytes: 64 << 20, Pids: 32}})
	if err != nil {
		t.Fatal(err)
	}
	defer run.Stop(time.Second)
	at := func(ctl, f string) string {
		b, _ := os.ReadFile(filepath.Join(p.cg.root, ctl, p.cg.parent, "limits", f))
		return strings.TrimSpace(string(b))
	}
	for f, want := range map[[2]string]string{
		{"memory", "memory.limit_in_bytes"}: strconv.Itoa(64 << 20),
		{"cpu", "cpu.cfs_quota_us"}:         "150000",
		{"cpu", "cpu.cfs_period_us"}:        "100000",
		{"pids", "pids.max"}:                "32",
	} {
		if got := at(f[0], f[1]); got != want {
			t.Errorf("%s/%s = %q, want %q", f[0], f[1], got, want)
		}
	}
	run.Stop(time.Second)

	oom, err := p.Start(context.Background(), Workload{LeaseID: "oom", Command: []string{"sh", "-c", "x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo survived"},
		Limits: Limits{MemoryBytes: 32 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, oom, "oom")
	if res := oom.Result(); !res.OOMKilled {
		t.Errorf("Result = %+v, want OOM-killed", res)
	}
}

// TestProcessAdopt: a daemon that goes away leaves the workload running;
// a new executor adopts it only with the recorded proof, follows its
// output and ends all of it. A bare PID or a stranger's handle is never
// killed.
func TestProcessAdopt(t *testing.T) {
	p := testProcess(t)
	w := Workload{LeaseID: "adopt", Command: []string{"sh", "-c", "setsid sleep 300 & i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.2; done"}}
	run, err := p.Start(context.Background(), w)
	if err != nil {
		t.Fatal(err)
	}
	handle := run.Info().Handle
	uid := runAs(run)
	run.(Detacher).Detach() // the daemon goes; the workload stays
	if res := run.Result(); !res.Detached {
		t.Fatalf("Result after Detach = %+v", res)
	}
	if len(pidsOfUID(uid)) == 0 {
		t.Fatal("the workload died with its daemon")
	}
	p2, err := NewProcess(p.cfg)
	if err != nil {
		t.Fatal(err)
	}
	// A stranger's process: its bare PID as the handle adopts nothing and
	// kills nothing of it.
	stranger, err := p.Start(context.Background(), Workload{LeaseID: "stranger", Command: []string{"sleep", "300"}})
	if err != nil {
		t.Fatal(err)
	}
	defer stranger.Stop(time.Second)
	spid := stranger.(*processRun).meta.Pid
	if _, err := p2.Adopt(context.Background(), Workload{LeaseID: "not-a-lease"}, strconv.Itoa(spid)); !errors.Is(err, ErrGone) {
		t.Errorf("Adopt of a bare PID = %v, want ErrGone", err)
	}
	if _, err := startTime(spid); err != nil {
		t.Error("adopting a bare PID killed that process")
	}
	var out syncBuffer
	w.Stdout = &out
	adopted, err := p2.Adopt(context.Background(), w, handle)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the adopted workload's output", 30*time.Second, func() (bool, string) {
		return strings.Contains(out.String(), "tick"), out.String()
	})
	adopted.Stop(time.Second)
	waitDone(t, adopted, "adopted")
	if left := pidsOfUID(uid); len(left) > 0 {
		t.Errorf("processes of the adopted lease outlived Stop: %v", left)
	}
	if res := adopted.Result(); res.Code != -1 || res.Signal == "" {
		t.Errorf("Result = %+v, want killed", res)
	}
	if _, err := p2.Adopt(context.Background(), w, handle); !errors.Is(err, ErrGone) {
		t.Errorf("Adopt after the end = %v, want ErrGone", err)
	}

	// A workload that ended while no daemon watched reports its exit code.
	quick, err := p.Start(context.Background(), Workload{LeaseID: "quick", Command: []string{"sh", "-c", "sleep 1; exit 5"}})
	if err != nil {
		t.Fatal(err)
	}
	qh := quick.Info().Handle
	quick.(Detacher).Detach()
	waitFor(t, "the unwatched workload to end", 30*time.Second, func() (bool, string) {
		return len(p.cg.procs("quick")) == 0, ""
	})
	ended, err := p2.Adopt(context.Background(), Workload{LeaseID: "quick"}, qh)
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, ended, "ended")
	if res := ended.Result(); res.Code != 5 {
		t.Errorf("Result = %+v, want the recorded exit code 5", res)
	}
}
