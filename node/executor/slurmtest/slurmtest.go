// Package slurmtest gives tests the Slurm cluster contrib/slurm/slurm-up.sh
// started (SLURM_CONF), one test at a time.
package slurmtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/suanli/suanli/gpu"
)

// Cluster is the cluster SLURM_CONF names, held for t alone until it
// ends: go test runs packages in parallel, and the tests fill the node.
// Register cleanups that cancel t's jobs after calling Cluster, so they
// run before the cluster is handed on. Without a cluster t is skipped,
// unless CI is set: CI starts one (.ci/run), so there it fails.
func Cluster(t testing.TB) gpu.Slurm {
	t.Helper()
	conf := os.Getenv("SLURM_CONF")
	if _, err := exec.LookPath("sbatch"); conf == "" || err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("CI is set but no Slurm cluster is (SLURM_CONF, sbatch): .ci/run starts one with contrib/slurm/slurm-up.sh")
		}
		t.Skip("no Slurm cluster: run contrib/slurm/slurm-up.sh DIR and set SLURM_CONF")
	}
	f, err := os.OpenFile(filepath.Join(filepath.Dir(conf), "tests.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return gpu.Slurm{Conf: conf}
}
