// Package dockertest gives tests a Docker Engine and a locally built
// workload image: no image is ever pulled. A test that needs the engine
// is skipped with a message where none answers, and fails instead under
// CI (the CI variable set), where the engine is expected.
package dockertest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/moby/moby/client"
)

// TestLabel marks what these helpers create, for cleanup by label.
const TestLabel = "suanli.test"

// Engine returns a client of the local engine, or skips (fails under CI).
func Engine(t testing.TB) *client.Client {
	t.Helper()
	c, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = c.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true})
		cancel()
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("no Docker Engine answers, and CI expects one: %v", err)
		}
		t.Skipf("skipped: no Docker Engine answers (%v); CI runs this test", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// EchoImage builds the echo workload (dockertest/echo) as a static binary,
// imports it as a FROM-scratch image named suanli-test/echo:<random> and
// returns that reference; the image is removed when the test ends.
func EchoImage(t testing.TB, c *client.Client) string {
	t.Helper()
	_, here, _, _ := runtime.Caller(0)
	bin := filepath.Join(t.TempDir(), "echo")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./echo")
	cmd.Dir = filepath.Dir(here)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the echo workload: %v\n%s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"tmp/", "scratch/", "root/"} {
		tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755, ModTime: time.Now()})
	}
	tw.WriteHeader(&tar.Header{Name: "app", Mode: 0o755, Size: int64(len(b)), ModTime: time.Now()})
	tw.Write(b)
	tw.Close()
	tag := make([]byte, 4)
	rand.Read(tag)
	ref := "suanli-test/echo:" + hex.EncodeToString(tag)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rc, err := c.ImageImport(ctx, client.ImageImportSource{Source: &buf, SourceName: "-"}, ref,
		client.ImageImportOptions{Changes: []string{`CMD ["/app"]`, "LABEL " + TestLabel + "=1", "EXPOSE 8080"}})
	if err != nil {
		t.Fatalf("importing the echo image: %v", err)
	}
	_, err = bytes.NewBuffer(nil).ReadFrom(rc)
	rc.Close()
	if err != nil {
		t.Fatalf("importing the echo image: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c.ImageRemove(ctx, ref, client.ImageRemoveOptions{Force: true, PruneChildren: true})
	})
	return ref
}

// Leftovers lists the containers and volumes labelled with lease (every
// lease when ""), for a test to assert that nothing leaked.
func Leftovers(t testing.TB, c *client.Client, label, lease string) (containers, volumes []string) {
	t.Helper()
	sel := label
	if lease != "" {
		sel += "=" + lease
	}
	f := make(client.Filters).Add("label", sel)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range cs.Items {
		containers = append(containers, x.ID)
	}
	vs, err := c.VolumeList(ctx, client.VolumeListOptions{Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs.Items {
		volumes = append(volumes, v.Name)
	}
	return containers, volumes
}
