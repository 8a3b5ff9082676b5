package executor

import (
	"errors"
	"strings"
	"testing"

	"github.com/distribution/reference"
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
	// A digest entry admits only references pinned to it, never a name.
	pinned := "sha256:" + strings.Repeat("ab", 32)
	for ref, want := range map[string][2]bool{
		"evil.example/x@" + pinned: {true, true},
		"busybox@" + pinned:        {true, true},
		"busybox":                  {false, false},
		"evil.example/x:latest":    {false, false},
		"evil.example/x@sha256:" + strings.Repeat("cd", 32):   {false, false},
		"suanli-test/echo@sha256:" + strings.Repeat("cd", 32): {true, false},
	} {
		n, err := ParseImage(ref)
		if err != nil {
			t.Fatal(err)
		}
		if ok, byDigest := pol.AllowsRef(n); ok != want[0] || byDigest != want[1] {
			t.Errorf("AllowsRef(%q) = %v, %v; want %v, %v", ref, ok, byDigest, want[0], want[1])
		}
	}
	for _, bad := range [][]string{{""}, {"sha256:12"}, {"[a"}} {
		if _, err := ParseImagePolicy(bad); err == nil {
			t.Errorf("ParseImagePolicy(%q) = nil error, want refused", bad)
		}
	}
	var none ImagePolicy
	n, _ := ParseImage("busybox")
	if ok, _ := none.AllowsRef(n); ok || none.AllowsName(n) {
		t.Error("the zero policy allows something")
	}
}

func FuzzAdmit(f *testing.F) {
	f.Add("suanli-test/echo:v1", []byte{0x1f, 0x90}, "ssh-ed25519 AAAA k")
	f.Add("Not A//Ref::", []byte{0, 0}, "")
	f.Add("ghcr.io/org/app@sha256:"+strings.Repeat("0", 64), []byte{}, "\x00")
	pol, _ := ParseImagePolicy([]string{"suanli-test/*", "sha256:" + strings.Repeat("ab", 32)})
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
			if perr != nil || len(w.Ports) > MaxPorts {
				t.Fatalf("Admit let through %+v", w)
			}
			c, pinned := n.(reference.Canonical)
			if !pol.AllowsName(n) && !(pinned && c.Digest().String() == "sha256:"+strings.Repeat("ab", 32)) {
				t.Fatalf("Admit let through %+v", w)
			}
		}
	})
}
