package executor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroups is the tree the process executor puts each lease in: one
// directory per lease under Parent, in each cgroup v1 controller it
// uses (memory, cpu, pids, freezer) or in the cgroup v2 tree. Membership
// is what proves a process is the lease's: every descendant stays in it
// whatever it does (setsid, double fork), and an unprivileged workload
// cannot move itself out (the directories are the daemon's).
type cgroups struct {
	root   string // the cgroup mount, /sys/fs/cgroup
	parent string // our subtree, "suanli"
	v2     bool
}

// v1Controllers are the cgroup v1 hierarchies a lease is put in.
var v1Controllers = []string{"memory", "cpu", "pids", "freezer"}

// detectCgroups finds the cgroup version under root and checks that this
// process may make the lease cgroups: the reason it cannot otherwise.
func detectCgroups(root, parent string) (*cgroups, error) {
	if root == "" {
		root = "/sys/fs/cgroup"
	}
	if parent == "" {
		parent = "suanli"
	}
	if !validCgroupName(filepath.Base(parent)) || filepath.IsAbs(parent) || strings.Contains(parent, "..") {
		return nil, fmt.Errorf("executor: cgroup parent %q: want a relative path", parent)
	}
	c := &cgroups{root: root, parent: parent}
	if _, err := os.Stat(filepath.Join(root, "memory", "memory.limit_in_bytes")); err == nil {
		for _, ctl := range v1Controllers {
			if _, err := os.Stat(filepath.Join(root, ctl, "cgroup.procs")); err != nil {
				return nil, fmt.Errorf("executor: cgroup v1 controller %s is not mounted under %s: the process executor cannot contain or limit workloads", ctl, root)
			}
		}
	} else if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		c.v2 = true
	} else {
		return nil, fmt.Errorf("executor: no cgroup v1 memory controller or cgroup v2 tree under %s: the process executor cannot contain or limit workloads", root)
	}
	for _, d := range c.parentDirs() {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("executor: cannot make the lease cgroups' parent %s (run as root, or give the daemon that directory): %v", d, err)
		}
	}
	if c.v2 {
		// Controllers reach a child only when every ancestor under the
		// root enables them for its children.
		dir := root
		for _, part := range strings.Split(parent, "/") {
			if err := enableV2(dir); err != nil {
				return nil, err
			}
			dir = filepath.Join(dir, part)
		}
		if err := enableV2(dir); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func enableV2(dir string) error {
	have, _ := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	for _, ctl := range []string{"memory", "cpu", "pids"} {
		if slices.Contains(strings.Fields(string(have)), ctl) {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+ctl), 0); err != nil {
			return fmt.Errorf("executor: enabling the %s controller in %s: %v", ctl, dir, err)
		}
	}
	return nil
}

func (c *cgroups) version() string {
	if c.v2 {
		return "v2"
	}
	return "v1"
}

func (c *cgroups) parentDirs() []string {
	if c.v2 {
		return []string{filepath.Join(c.root, c.parent)}
	}
	var ds []string
	for _, ctl := range v1Controllers {
		ds = append(ds, filepath.Join(c.root, ctl, c.parent))
	}
	return ds
}

// dirs are the lease's cgroup directories.
func (c *cgroups) dirs(name string) []string {
	var ds []string
	for _, p := range c.parentDirs() {
		ds = append(ds, filepath.Join(p, name))
	}
	return ds
}

// procsDir is the directory whose cgroup.procs lists the lease's
// processes (every v1 hierarchy holds them all; freezer is used).
func (c *cgroups) procsDir(name string) string {
	if c.v2 {
		return filepath.Join(c.root, c.parent, name)
	}
	return filepath.Join(c.root, "freezer", c.parent, name)
}

func validCgroupName(s string) bool {
	if s == "" || s == "." || s == ".." || len(s) > 200 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// create makes the lease's cgroups with its limits.
func (c *cgroups) create(name string, l Limits) error {
	for _, d := range c.dirs(name) {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("executor: cgroup %s: %v", d, err)
		}
	}
	var writes [][2]string
	if c.v2 {
		d := c.procsDir(name)
		if l.MemoryBytes > 0 {
			writes = append(writes, [2]string{filepath.Join(d, "memory.max"), strconv.FormatInt(l.MemoryBytes, 10)},
				[2]string{filepath.Join(d, "memory.swap.max"), "0"})
		}
		if l.MilliCPUs > 0 {
			writes = append(writes, [2]string{filepath.Join(d, "cpu.max"), strconv.FormatInt(l.MilliCPUs*100, 10) + " 100000"})
		}
		if l.Pids > 0 {
			writes = append(writes, [2]string{filepath.Join(d, "pids.max"), strconv.FormatInt(l.Pids, 10)})
		}
	} else {
		at := func(ctl, file string) string { return filepath.Join(c.root, ctl, c.parent, name, file) }
		if l.MemoryBytes > 0 {
			writes = append(writes, [2]string{at("memory", "memory.limit_in_bytes"), strconv.FormatInt(l.MemoryBytes, 10)})
			if _, err := os.Stat(at("memory", "memory.memsw.limit_in_bytes")); err == nil {
				writes = append(writes, [2]string{at("memory", "memory.memsw.limit_in_bytes"), strconv.FormatInt(l.MemoryBytes, 10)})
			}
		}
		if l.MilliCPUs > 0 {
			writes = append(writes, [2]string{at("cpu", "cpu.cfs_period_us"), "100000"},
				[2]string{at("cpu", "cpu.cfs_quota_us"), strconv.FormatInt(l.MilliCPUs*100, 10)})
		}
		if l.Pids > 0 {
			writes = append(writes, [2]string{at("pids", "pids.max"), strconv.FormatInt(l.Pids, 10)})
		}
	}
	for _, w := range writes {
		if err := os.WriteFile(w[0], []byte(w[1]), 0); err != nil && !(strings.HasSuffix(w[0], "swap.max") && errors.Is(err, os.ErrNotExist)) {
			return fmt.Errorf("executor: cgroup limit %s=%s: %v", w[0], w[1], err)
		}
	}
	return nil
}

// add puts pid into the lease's cgroups.
func (c *cgroups) add(name string, pid int) error {
	for _, d := range c.dirs(name) {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("executor: moving %d into %s: %v", pid, d, err)
		}
	}
	return nil
}

// exists reports whether the lease's cgroup is there.
func (c *cgroups) exists(name string) bool {
	_, err := os.Stat(filepath.Join(c.procsDir(name), "cgroup.procs"))
	return err == nil
}

// procs lists the processes in the lease's cgroup.
func (c *cgroups) procs(name string) []int {
	b, err := os.ReadFile(filepath.Join(c.procsDir(name), "cgroup.procs"))
	if err != nil {
		return nil
	}
	var ps []int
	for _, f := range strings.Fields(string(b)) {
		if p, err := strconv.Atoi(f); err == nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// contains reports whether pid is in the lease's cgroup.
func (c *cgroups) contains(name string, pid int) bool {
	return slices.Contains(c.procs(name), pid)
}

// signal sends sig to every process in the lease's cgroup.
func (c *cgroups) signal(name string, sig syscall.Signal) {
	for _, p := range c.procs(name) {
		syscall.Kill(p, sig)
	}
}

// killAll ends every process of the lease: the cgroup is frozen so that
// nothing forks between the listing and the kill, every member killed,
// and thawed, until it is empty.
func (c *cgroups) killAll(name string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		if len(c.procs(name)) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("executor: cgroup of %s still holds %v", name, c.procs(name))
		}
		if c.v2 {
			if err := os.WriteFile(filepath.Join(c.procsDir(name), "cgroup.kill"), []byte("1"), 0); err != nil {
				c.freezeV2(name, true)
				c.signal(name, syscall.SIGKILL)
				c.freezeV2(name, false)
			}
		} else {
			state := filepath.Join(c.procsDir(name), "freezer.state")
			os.WriteFile(state, []byte("FROZEN"), 0)
			for i := 0; i < 100; i++ {
				b, _ := os.ReadFile(state)
				if strings.TrimSpace(string(b)) == "FROZEN" {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			c.signal(name, syscall.SIGKILL)
			os.WriteFile(state, []byte("THAWED"), 0)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (c *cgroups) freezeV2(name string, on bool) {
	v := "0"
	if on {
		v = "1"
	}
	os.WriteFile(filepath.Join(c.procsDir(name), "cgroup.freeze"), []byte(v), 0)
}

// remove deletes the lease's (empty) cgroups.
func (c *cgroups) remove(name string) error {
	var errs []error
	for _, d := range c.dirs(name) {
		if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("%s: %v", d, err))
		}
	}
	return errors.Join(errs...)
}

// leases lists the lease cgroups under the parent.
func (c *cgroups) leases() []string {
	es, _ := os.ReadDir(filepath.Join(c.procsDir("x"), ".."))
	var out []string
	for _, e := range es {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}
