package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestClientDeps keeps the client small: a program that only talks to a
// daemon must not link libp2p, Badger or NVML (nor the node that does).
func TestClientDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/suanli/suanli/node/client").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps gave %d packages, want the standard library's and ours", len(deps))
	}
	for _, d := range deps {
		for _, banned := range []string{"libp2p", "badger", "go-nvml", "github.com/suanli/suanli/node/executor", "github.com/suanli/suanli/market"} {
			if strings.Contains(d, banned) {
				t.Errorf("node/client depends on %s", d)
			}
		}
		if d == "github.com/suanli/suanli/node" {
			t.Error("node/client depends on node")
		}
	}
}
