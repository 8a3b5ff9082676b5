package executor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestImagePolicy(t *testing.T) {
	pol, err := ParseImagePolicy([]string{"suanli-test/*", "ghcr.io/org/*", "sha256:" + strings.Repeat("ab", 32)})
	if err != nil {
		t.Fatal(err)
	}
	for ref, want := range map[string]bool{
		"suanli-test/echo":                                  true,
		"suanli-test/echo:v1":                               true,
		"docker.io/suanli-test/echo":                        true,
		"ghcr.io/org/app@sha256:" + strings.Repeat("0", 64): true,
		"ghcr.io/other/app":                                 false,
		"busybox":                                           false,
		"suanli-test/echo/deeper":                           false,
		"evil.io/suanli-test/echo":                          false,
	} {
		n, err := ParseImage(ref)
		if err != nil {
			t.Fatalf("ParseImage(%q) = %v", ref, err)
		}
		if got := pol.AllowsName(n); got != want {
			t.Errorf("AllowsName(%q) = %v, want %v", ref, got, want)
		}
	}
	if !pol.AllowsDigest("sha256:"+strings.Repeat("ab", 32)) || !pol.AllowsDigest("x/y@sha256:"+strings.Repeat("ab", 32)) || pol.AllowsDigest("sha256:"+strings.Repeat("cd", 32)) {
		t.Error("AllowsDigest does not match exactly the digest allowed")
	}
	for _, bad := range [][]string{{""}, {"sha256:12"}, {"[a"}} {
		if _, err := ParseImagePolicy(bad); err == nil {
			t.Errorf("ParseImagePolicy(%q) = nil error, want refused", bad)
		}
	}
	var none ImagePolicy
	n, _ := ParseImage("busybox")
	if none.AllowsName(n) || none.HasDigests() {
		t.Error("the zero policy allows something")
	}
}

func FuzzAdmit(f *testing.F) {
	f.Add("suanli-test/echo:v1", []byte{0x1f, 0x90}, "ssh-ed25519 AAAA k")
	f.Add("Not A//Ref::", []byte{0, 0}, "")
	f.Add("ghcr.io/org/app@sha256:"+strings.Repeat("0", 64), []byte{}, "\x00")
	pol, _ := ParseImagePolicy([]string{"suanli-test/*"})
	d := &DockerExecutor{cfg: DockerConfig{Images: pol}}
	f.Fuzz(func(t *testing.T, image string, ports []byte, key string) {
		w := Workload{Image: image, SSHKey: key}
		for i := 0; i+1 < len(ports); i += 2 {
			w.Ports = append(w.Ports, uint16(ports[i])<<8|uint16(ports[i+1]))
		}
		err := d.Admit(w)
		if err != nil && !errors.Is(err, ErrRefused) {
			t.Fatalf("Admit = %v, not ErrRefused", err)
		}
		if err == nil {
			n, perr := ParseImage(image)
			if perr != nil || !pol.AllowsName(n) || len(w.Ports) > MaxPorts {
				t.Fatalf("Admit let through %+v", w)
			}
		}
	})
}

func TestProcessExecutorIsolation(t *testing.T) {
	t.Setenv("SUANLI_PASSPHRASE", "secret")
	root := t.TempDir()
	p := &ProcessExecutor{WorkRoot: root}
	var out syncBuffer
	run, err := p.Start(context.Background(), Workload{LeaseID: "L1", GPUs: []string{"GPU-1", "GPU-2"},
		Command: []string{"sh", "-c", "pwd; env"}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	dir := workDirOf(run)
	<-run.Done()
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
	if filepath.Dir(dir) != filepath.Clean(root) || !strings.HasPrefix(got, dir+"\n") {
		t.Errorf("ran in %q (output %q), want a fresh directory under %s", dir, got, root)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("work dir %s left behind: %v", dir, err)
	}
	if _, err := p.Start(context.Background(), Workload{Image: "x"}); !errors.Is(err, ErrRefused) {
		t.Errorf("Start without a command = %v, want ErrRefused", err)
	}
	if _, err := (&ProcessExecutor{User: "no-such-user-here"}).Start(context.Background(), Workload{Command: []string{"true"}}); !errors.Is(err, ErrRefused) {
		t.Errorf("Start as an unknown user = %v, want ErrRefused", err)
	}
}

func TestProcessStopAndAdopt(t *testing.T) {
	p := &ProcessExecutor{WorkRoot: t.TempDir()}
	run, err := p.Start(context.Background(), Workload{LeaseID: "L2", Command: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	run.Stop(time.Second)
	if res := run.Result(); res.Signal == "" {
		t.Errorf("Result = %+v, want killed by a signal", res)
	}
	if time.Since(start) > 20*time.Second {
		t.Error("Stop did not stop the process")
	}
	// An orphan from a killed daemon is killed, not adopted.
	orphan, err := p.Start(context.Background(), Workload{LeaseID: "L3", Command: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Adopt(context.Background(), Workload{LeaseID: "L3"}, orphan.Info().Handle); !errors.Is(err, ErrGone) {
		t.Errorf("Adopt = %v, want ErrGone", err)
	}
	select {
	case <-orphan.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the orphan's process group still runs after Adopt")
	}
}
