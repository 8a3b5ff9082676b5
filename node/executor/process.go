package executor

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	osexec "os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

var (
	_ Adopter     = (*ProcessExecutor)(nil)
	_ Execution   = (*processRun)(nil)
	_ Detacher    = (*processRun)(nil)
	_ LogFollower = (*processRun)(nil)
)

// Default uid range of the process executor: one unprivileged uid per
// lease, far above the accounts of a usual system and of the subordinate
// ranges (/etc/subuid) container engines hand out.
const (
	DefaultUIDMin = 1_900_000_000
	DefaultUIDMax = 1_900_000_999
)

// ProcessConfig configures the process executor.
type ProcessConfig struct {
	// WorkRoot holds the leases' working directories (each 0700, owned by
	// the lease's uid) and their state (the daemon's alone). It must not
	// be inside the daemon's repo. Default: $TMPDIR/suanli-work.
	WorkRoot string
	// User, when set, is the one unprivileged account (name or uid) every
	// process lease runs as, one lease at a time. It may not be the
	// daemon's own uid, nor root.
	User string
	// UIDMin and UIDMax are the uids leases run as when User is unset,
	// each lease its own. They must name no account on the system.
	// Default DefaultUIDMin–DefaultUIDMax.
	UIDMin, UIDMax uint32
	// CgroupRoot is where cgroups are mounted (default /sys/fs/cgroup)
	// and CgroupParent the subtree leases go in (default "suanli").
	CgroupRoot, CgroupParent string
	// Owner names this daemon (the node sets its peer ID): Sweep and Adopt
	// touch only the workloads it recorded, where daemons share WorkRoot.
	Owner string
	// OnBusy, when set, is told when the process starts and ends (the
	// simulator marks the GPUs busy).
	OnBusy func(gpus []string, busy bool)
}

// ProcessExecutor runs the buyer's command as a local process, with
// CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES set to exactly the
// leased GPU UUIDs, isolated from the provider and from other tenants:
//
//   - never as the daemon's uid: each lease gets an unprivileged uid of
//     its own (or the one configured User, one lease at a time), with no
//     supplementary groups, so it can read neither the daemon's
//     /proc/PID/environ, cwd and files nor another lease's;
//   - in a cgroup of its own, with the CPU, memory and processes sold as
//     limits; Stop, and the end of the main process, kill everything in
//     it, so a workload that calls setsid or double-forks does not
//     outlive the lease;
//   - in a new session, with a scrubbed environment and a private
//     working directory (0700) outside the daemon's repo;
//   - its output in files, so that it survives a daemon killed with -9,
//     and a restarted daemon adopts it, after proving it is the lease's
//     (its cgroup holds it and its start time matches).
//
// NewProcess refuses to build an executor on a machine where this cannot
// be done (no cgroups, not allowed to switch uid), saying why.
type ProcessExecutor struct {
	cfg     ProcessConfig
	cg      *cgroups
	single  *syscall.Credential // User, when set
	daemon  int                 // the daemon's uid
	mu      sync.Mutex
	uidUsed map[uint32]string // uid → lease
}

// NewProcess checks that this machine can isolate process workloads and
// returns the executor, or the reason it cannot.
func NewProcess(cfg ProcessConfig) (*ProcessExecutor, error) {
	p := &ProcessExecutor{cfg: cfg, daemon: os.Geteuid(), uidUsed: map[uint32]string{}}
	if p.cfg.WorkRoot == "" {
		p.cfg.WorkRoot = filepath.Join(os.TempDir(), "suanli-work")
	}
	if !filepath.IsAbs(p.cfg.WorkRoot) {
		return nil, fmt.Errorf("executor: process work root %q: want an absolute path", p.cfg.WorkRoot)
	}
	if cfg.User != "" {
		c, err := lookupCredential(cfg.User)
		if err != nil {
			return nil, err
		}
		if c.Uid == 0 || int(c.Uid) == p.daemon || c.Gid == 0 {
			return nil, fmt.Errorf("executor: --process-user %s is uid %d gid %d: workloads may not run as root or as the daemon's own uid (%d), which can read the node's key, token and passphrase", cfg.User, c.Uid, c.Gid, p.daemon)
		}
		p.single = c
	} else {
		if p.cfg.UIDMin == 0 && p.cfg.UIDMax == 0 {
			p.cfg.UIDMin, p.cfg.UIDMax = DefaultUIDMin, DefaultUIDMax
		}
		if p.cfg.UIDMin == 0 || p.cfg.UIDMax < p.cfg.UIDMin || p.cfg.UIDMax >= 1<<32-1 {
			return nil, fmt.Errorf("executor: process uid range %d-%d: want 1 <= MIN <= MAX < 4294967295", p.cfg.UIDMin, p.cfg.UIDMax)
		}
		if d := uint32(p.daemon); d >= p.cfg.UIDMin && d <= p.cfg.UIDMax {
			return nil, fmt.Errorf("executor: process uid range %d-%d holds the daemon's own uid %d", p.cfg.UIDMin, p.cfg.UIDMax, d)
		}
		if u, err := accountIn(p.cfg.UIDMin, p.cfg.UIDMax); err != nil {
			return nil, err
		} else if u != "" {
			return nil, fmt.Errorf("executor: process uid range %d-%d holds the account %s: choose uids no account uses", p.cfg.UIDMin, p.cfg.UIDMax, u)
		}
	}
	if err := canSwitchUser(); err != nil {
		return nil, err
	}
	cg, err := detectCgroups(cfg.CgroupRoot, cfg.CgroupParent)
	if err != nil {
		return nil, err
	}
	p.cg = cg
	for _, d := range []string{p.cfg.WorkRoot, p.stateRoot(), p.workDirs()} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, fmt.Errorf("executor: process work root: %w", err)
		}
	}
	// The state is the daemon's alone; the work dirs' parent lets each
	// uid reach its own directory and list none.
	if err := os.Chmod(p.stateRoot(), 0o700); err != nil {
		return nil, fmt.Errorf("executor: process state dir: %w", err)
	}
	for _, d := range []string{p.cfg.WorkRoot, p.workDirs()} {
		if err := os.Chmod(d, 0o711); err != nil {
			return nil, fmt.Errorf("executor: process work root: %w", err)
		}
	}
	// The leases' uids must reach their work dirs.
	for d := filepath.Dir(p.cfg.WorkRoot); ; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm()&0o001 == 0 {
			return nil, fmt.Errorf("executor: process work root %s: its parent %s is not searchable by other users, so a lease's uid cannot reach its work dir", p.cfg.WorkRoot, d)
		}
		if d == "/" {
			break
		}
	}
	return p, nil
}

// accountIn returns an account of /etc/passwd with a uid in lo..hi, if any.
func accountIn(lo, hi uint32) (string, error) {
	f, err := os.Open("/etc/passwd")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", nil
		}
		return "", fmt.Errorf("executor: reading the accounts: %v", err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fs := strings.Split(s.Text(), ":")
		if len(fs) < 3 {
			continue
		}
		if uid, err := strconv.ParseUint(fs[2], 10, 32); err == nil && uint32(uid) >= lo && uint32(uid) <= hi {
			return fs[0], nil
		}
	}
	return "", nil
}

// canSwitchUser checks that the daemon holds what starting a workload as
// another uid takes: CAP_SETUID, CAP_SETGID, CAP_CHOWN and CAP_KILL.
func canSwitchUser() error {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return fmt.Errorf("executor: reading this process's capabilities: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			eff, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				break
			}
			var missing []string
			for _, c := range []struct {
				bit  uint
				name string
			}{{unix.CAP_SETUID, "CAP_SETUID"}, {unix.CAP_SETGID, "CAP_SETGID"}, {unix.CAP_CHOWN, "CAP_CHOWN"}, {unix.CAP_KILL, "CAP_KILL"}} {
				if eff&(1<<c.bit) == 0 {
					missing = append(missing, c.name)
				}
			}
			if len(missing) > 0 {
				return fmt.Errorf("executor: the process executor runs each lease as its own uid, and this daemon lacks %s (run it as root or grant them: see contrib/systemd)", strings.Join(missing, ", "))
			}
			return nil
		}
	}
	return errors.New("executor: cannot tell this process's capabilities")
}

// Name implements Executor.
func (*ProcessExecutor) Name() string { return Process }

// Isolation says what the executor enforces, for status and the offer.
func (p *ProcessExecutor) Isolation() ProcessIsolation {
	iso := ProcessIsolation{Cgroups: p.cg.version(), WorkRoot: p.cfg.WorkRoot}
	if p.single != nil {
		iso.User = p.cfg.User
	} else {
		iso.UIDs = fmt.Sprintf("%d-%d", p.cfg.UIDMin, p.cfg.UIDMax)
	}
	return iso
}

// ProcessIsolation is what the process executor enforces.
type ProcessIsolation struct {
	// UIDs is the range leases run as, one uid each; User the one account
	// they run as instead, one lease at a time.
	UIDs string `json:"uids,omitempty"`
	User string `json:"user,omitempty"`
	// Cgroups is the cgroup version each lease is contained and limited by.
	Cgroups  string `json:"cgroups"`
	WorkRoot string `json:"work_root"`
}

func (p *ProcessExecutor) stateRoot() string { return filepath.Join(p.cfg.WorkRoot, "state") }
func (p *ProcessExecutor) workDirs() string  { return filepath.Join(p.cfg.WorkRoot, "work") }

// leaseName is the lease's name in paths and cgroups.
func leaseName(lease string) string {
	if validCgroupName(lease) && len(lease) <= 100 {
		return lease
	}
	h := sha256.Sum256([]byte(lease))
	return "h-" + hex.EncodeToString(h[:16])
}

// processEnv is the whole environment of a process workload.
func processEnv(w Workload, dir string) []string {
	devs := strings.Join(w.GPUs, ",")
	return []string{
		"PATH=" + workloadPath,
		"HOME=" + dir, "TMPDIR=" + dir, "LANG=C.UTF-8",
		"CUDA_VISIBLE_DEVICES=" + devs, "NVIDIA_VISIBLE_DEVICES=" + devs,
		"SUANLI_LEASE=" + w.LeaseID, "SUANLI_GPUS=" + devs,
	}
}

const workloadPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// lookPath finds argv0 on the workload's PATH.
func lookPath(argv0 string) (string, error) {
	if strings.Contains(argv0, "/") {
		if st, err := os.Stat(argv0); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%s is not an executable file", argv0)
		}
		return argv0, nil
	}
	for _, d := range filepath.SplitList(workloadPath) {
		f := filepath.Join(d, argv0)
		if st, err := os.Stat(f); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return f, nil
		}
	}
	return "", fmt.Errorf("%s: not found on %s", argv0, workloadPath)
}

func lookupCredential(name string) (*syscall.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		if u, err = user.LookupId(name); err != nil {
			return nil, fmt.Errorf("%w: user %q: %v", ErrRefused, name, err)
		}
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("%w: user %q has no numeric uid/gid", ErrRefused, name)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// takeUID reserves a uid for lease: one no lease holds and no process
// runs as.
func (p *ProcessExecutor) takeUID(lease string) (*syscall.Credential, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.single != nil {
		for _, l := range p.uidUsed {
			return nil, fmt.Errorf("%w: process executor: lease %s runs as %s, and leases do not share a uid", ErrRefused, l, p.cfg.User)
		}
		p.uidUsed[p.single.Uid] = lease
		c := *p.single
		return &c, nil
	}
	busy := uidsRunning()
	for uid := p.cfg.UIDMin; ; uid++ {
		if _, ok := p.uidUsed[uid]; !ok && !busy[uid] {
			p.uidUsed[uid] = lease
			return &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}, nil
		}
		if uid == p.cfg.UIDMax {
			return nil, fmt.Errorf("%w: process executor: every uid of %d-%d is in use", ErrRefused, p.cfg.UIDMin, p.cfg.UIDMax)
		}
	}
}

// releaseUID ends whatever still runs as the lease's uid (a uid of the
// range is the lease's alone) and the files it left in the shared
// temporary directories, and frees the uid.
func (p *ProcessExecutor) releaseUID(uid uint32) {
	if p.single == nil {
		for i := 0; i < 50; i++ {
			pids := pidsOfUID(uid)
			if len(pids) == 0 {
				break
			}
			for _, pid := range pids {
				syscall.Kill(pid, syscall.SIGKILL)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for _, dir := range []string{"/tmp", "/var/tmp", "/dev/shm"} {
		es, _ := os.ReadDir(dir)
		for _, e := range es {
			fi, err := os.Lstat(filepath.Join(dir, e.Name()))
			if st, ok := fi.Sys().(*syscall.Stat_t); err == nil && ok && st.Uid == uid {
				os.RemoveAll(filepath.Join(dir, e.Name()))
			}
		}
	}
	p.mu.Lock()
	delete(p.uidUsed, uid)
	p.mu.Unlock()
}

// uidsRunning is the set of uids that processes run as.
func uidsRunning() map[uint32]bool {
	m := map[uint32]bool{}
	es, _ := os.ReadDir("/proc")
	for _, e := range es {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if fi, err := os.Stat(filepath.Join("/proc", e.Name())); err == nil && !zombie(e.Name()) {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				m[st.Uid] = true
			}
		}
	}
	return m
}

func pidsOfUID(uid uint32) []int {
	var out []int
	es, _ := os.ReadDir("/proc")
	for _, e := range es {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if fi, err := os.Stat(filepath.Join("/proc", e.Name())); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid == uid && !zombie(e.Name()) {
				out = append(out, pid)
			}
		}
	}
	return out
}

// zombie reports whether the process has ended and waits to be reaped
// (by whoever it was reparented to): it holds nothing but its PID.
func zombie(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+3 > len(s) || s[i+2] == 'Z' || s[i+2] == 'X'
}

// startTime is the process's start time in clock ticks since boot (field
// 22 of /proc/PID/stat): with the PID, it names one process for good.
func startTime(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("malformed stat")
	}
	fs := strings.Fields(s[i+1:])
	if len(fs) < 20 {
		return 0, errors.New("malformed stat")
	}
	return strconv.ParseUint(fs[19], 10, 64)
}

// procMeta is what the daemon keeps, in the lease's state directory, of a
// process workload, for a restarted daemon to adopt it.
type procMeta struct {
	Owner   string    `json:"owner"`
	Lease   string    `json:"lease"`
	UID     uint32    `json:"uid"`
	Pid     int       `json:"pid"`
	Start   uint64    `json:"start"`
	Started time.Time `json:"started"`
	WorkDir string    `json:"work_dir"`
}

func (m procMeta) handle() string { return fmt.Sprintf("%d/%d", m.Pid, m.Start) }

// shimScript runs the buyer's argv once the daemon has put the shell in
// the lease's cgroup (it writes a byte to fd 3), then records the exit
// code on fd 4, which the workload does not inherit.
const shimScript = `read _ <&3; exec 3<&-; "$@" 4>&-; s=$?; echo $s >&4; exit $s`

// Start implements Executor.
func (p *ProcessExecutor) Start(_ context.Context, w Workload) (_ Execution, err error) {
	if len(w.Command) == 0 {
		return nil, fmt.Errorf("%w: process executor: no command", ErrRefused)
	}
	if w.Image != "" || len(w.Ports) > 0 {
		return nil, fmt.Errorf("%w: process executor: an image or ports need the docker executor", ErrRefused)
	}
	if _, err := lookPath(w.Command[0]); err != nil {
		return nil, fmt.Errorf("%w: process executor: %v", ErrRefused, err)
	}
	name := leaseName(w.LeaseID)
	state := filepath.Join(p.stateRoot(), name)
	if p.cg.exists(name) || fileExists(state) {
		return nil, fmt.Errorf("%w: process executor: lease %s already has a workload", ErrRefused, w.LeaseID)
	}
	cred, err := p.takeUID(w.LeaseID)
	if err != nil {
		return nil, err
	}
	work := filepath.Join(p.workDirs(), name)
	cleanup := func() {
		p.cg.killAll(name)
		p.cg.remove(name)
		os.RemoveAll(work)
		os.RemoveAll(state)
		p.releaseUID(cred.Uid)
	}
	defer func() {
		if err != nil {
			cleanup()
		}
	}()
	if err := os.Mkdir(state, 0o700); err != nil {
		return nil, fmt.Errorf("executor: process state dir: %w", err)
	}
	if err := os.Mkdir(work, 0o700); err != nil {
		return nil, fmt.Errorf("executor: process work dir: %w", err)
	}
	if err := os.Chown(work, int(cred.Uid), int(cred.Gid)); err != nil {
		return nil, fmt.Errorf("executor: process work dir: %w", err)
	}
	if err := p.cg.create(name, w.Limits); err != nil {
		return nil, err
	}
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	open := func(n string) (*os.File, error) {
		f, err := os.OpenFile(filepath.Join(state, n), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err == nil {
			files = append(files, f)
		}
		return f, err
	}
	stdout, err1 := open("stdout")
	stderr, err2 := open("stderr")
	exit, err3 := open("exit")
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, fmt.Errorf("executor: process output files: %w", err)
	}
	gate, release, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	files = append(files, gate, release)
	cmd := osexec.Command("/bin/sh", append([]string{"-c", shimScript, "suanli-lease"}, w.Command...)...)
	cmd.Dir, cmd.Env = work, processEnv(w, work)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.ExtraFiles = []*os.File{gate, exit}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: cred}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%w: process executor: %v", ErrRefused, err)
	}
	pid := cmd.Process.Pid
	if err := p.cg.add(name, pid); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, err
	}
	st, err := startTime(pid)
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("executor: process start time: %v", err)
	}
	meta := procMeta{Owner: p.cfg.Owner, Lease: w.LeaseID, UID: cred.Uid, Pid: pid, Start: st, Started: time.Now(), WorkDir: work}
	b, _ := json.Marshal(meta)
	if err := os.WriteFile(filepath.Join(state, "meta.json"), b, 0o600); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("executor: process state: %v", err)
	}
	// In its cgroup: let it run.
	if _, err := release.Write([]byte{'\n'}); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("executor: starting the workload: %v", err)
	}
	r := p.newRun(w, name, state, meta)
	r.tail(0, 0)
	go func() {
		err := cmd.Wait()
		res := ExitResult{Code: cmd.ProcessState.ExitCode()}
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.Code, res.Signal = -1, ws.Signal().String()
		} else if err != nil && res.Code == 0 {
			res.Error = err.Error()
		}
		r.exited(res)
	}()
	if p.cfg.OnBusy != nil {
		p.cfg.OnBusy(w.GPUs, true)
	}
	return r, nil
}

func fileExists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func (p *ProcessExecutor) newRun(w Workload, name, state string, meta procMeta) *processRun {
	return &processRun{p: p, w: w, name: name, state: state, meta: meta, done: make(chan struct{}), stopTail: make(chan struct{})}
}

// processRun is one lease's process workload.
type processRun struct {
	p     *ProcessExecutor
	w     Workload
	name  string
	state string
	meta  procMeta

	done     chan struct{}
	stopTail chan struct{}
	tails    sync.WaitGroup

	mu       sync.Mutex
	res      ExitResult
	finished bool
	detached bool
	stopping bool
}

// tail copies what the workload writes to its output files to the
// lease's writers, from the given offsets, until the run ends, and keeps
// marks of how far the output had come when, for FollowLogs.
func (r *processRun) tail(outFrom, errFrom int64) {
	for _, t := range []struct {
		file string
		from int64
		to   io.Writer
	}{{"stdout", outFrom, r.w.Stdout}, {"stderr", errFrom, r.w.Stderr}} {
		if t.to == nil {
			continue
		}
		r.tails.Add(1)
		go func() {
			defer r.tails.Done()
			tailFile(filepath.Join(r.state, t.file), t.from, t.to, r.stopTail, nil)
		}()
	}
	r.tails.Add(1)
	go func() {
		defer r.tails.Done()
		r.markOutput()
	}()
}

// tailFile copies path from offset from to w until stop or ctx closes,
// then what is left.
func tailFile(path string, from int64, w io.Writer, stop <-chan struct{}, ctx <-chan struct{}) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	f.Seek(from, io.SeekStart)
	for {
		io.Copy(w, f)
		select {
		case <-stop:
			io.Copy(w, f) // the last lines
			return
		case <-ctx:
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// markOutput appends to the state's marks file, while the run is watched,
// the time and the output files' sizes whenever they grow: FollowLogs
// starts from the last mark at or before the time asked for, so a buyer
// reattaching after a restart gets what it missed (and perhaps again up to
// a quarter second of what it had).
func (r *processRun) markOutput() {
	f, err := os.OpenFile(filepath.Join(r.state, "marks"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	var lo, le int64 = -1, -1
	for {
		o, e := fileSize(filepath.Join(r.state, "stdout")), fileSize(filepath.Join(r.state, "stderr"))
		if o != lo || e != le {
			fmt.Fprintf(f, "%d %d %d\n", time.Now().UnixMilli(), lo, le)
			lo, le = o, e
		}
		select {
		case <-r.stopTail:
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// FollowLogs implements LogFollower: the output since since (to within a
// quarter second), until the workload ends or ctx is done.
func (r *processRun) FollowLogs(ctx context.Context, since time.Time, stdout, stderr io.Writer) error {
	var from [2]int64
	if b, err := os.ReadFile(filepath.Join(r.state, "marks")); err == nil && !since.IsZero() {
		for _, line := range strings.Split(string(b), "\n") {
			var t, o, e int64
			if n, _ := fmt.Sscan(line, &t, &o, &e); n != 3 || t > since.UnixMilli() {
				continue
			}
			from = [2]int64{max(o, 0), max(e, 0)}
		}
	}
	var wg sync.WaitGroup
	for i, t := range []struct {
		file string
		to   io.Writer
	}{{"stdout", stdout}, {"stderr", stderr}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tailFile(filepath.Join(r.state, t.file), from[i], orDiscard(t.to), r.stopTail, ctx.Done())
		}()
	}
	wg.Wait()
	return ctx.Err()
}

// exited is called once the main process has ended: whatever it left in
// its cgroup is killed, the output drained, the lease's traces removed.
func (r *processRun) exited(res ExitResult) {
	r.mu.Lock()
	if r.detached || r.finished {
		r.mu.Unlock()
		return
	}
	r.finished = true
	r.mu.Unlock()
	p := r.p
	if err := p.cg.killAll(r.name); err != nil && res.Error == "" {
		res.Error = err.Error()
	}
	if oom := r.oomKilled(); oom {
		res.OOMKilled, res.Error = true, "killed for exceeding its memory limit"
	}
	close(r.stopTail)
	r.tails.Wait()
	p.cg.remove(r.name)
	os.RemoveAll(r.meta.WorkDir)
	os.RemoveAll(r.state)
	p.releaseUID(r.meta.UID)
	if p.cfg.OnBusy != nil {
		p.cfg.OnBusy(r.w.GPUs, false)
	}
	r.mu.Lock()
	r.res = res
	r.mu.Unlock()
	close(r.done)
}

// oomKilled reports whether the kernel killed a process of the lease for
// its memory limit.
func (r *processRun) oomKilled() bool {
	var file, key string
	if r.p.cg.v2 {
		file, key = filepath.Join(r.p.cg.procsDir(r.name), "memory.events"), "oom_kill"
	} else {
		file, key = filepath.Join(r.p.cg.root, "memory", r.p.cg.parent, r.name, "memory.oom_control"), "oom_kill"
	}
	b, _ := os.ReadFile(file)
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == key && f[1] != "0" {
			return true
		}
	}
	return false
}

func (r *processRun) Done() <-chan struct{} { return r.done }

func (r *processRun) Result() ExitResult {
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.res
}

func (r *processRun) Info() Info {
	state := "running"
	select {
	case <-r.done:
		state = "exited"
	default:
	}
	return Info{Executor: Process, Handle: r.meta.handle(), State: state, GPUAccess: "host", Limits: r.w.Limits, Started: r.meta.Started}
}

// Stop sends SIGTERM to every process of the lease, then SIGKILL to all
// of them after grace: its cgroup, not its process group, is what is
// ended, so nothing escapes by setsid or a double fork.
func (r *processRun) Stop(grace time.Duration) error {
	select {
	case <-r.done:
		return nil
	default:
	}
	r.mu.Lock()
	r.stopping = true
	r.mu.Unlock()
	r.p.cg.signal(r.name, syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(grace):
		r.p.cg.killAll(r.name)
		<-r.done
	}
	return nil
}

// Detach implements Detacher: the workload runs on, unwatched; a
// restarted daemon adopts it.
func (r *processRun) Detach() {
	r.mu.Lock()
	if r.finished {
		r.mu.Unlock()
		<-r.done
		return
	}
	r.detached = true
	r.res = ExitResult{Code: -1, Detached: true}
	r.mu.Unlock()
	close(r.stopTail)
	r.tails.Wait()
	close(r.done)
}

// Adopt implements Adopter. A workload left running by a daemon that was
// killed or restarted is taken back only when it can be proved to be the
// lease's: the lease's cgroup (which only the daemon can make) holds the
// process the handle names, with the start time recorded. A bare PID is
// never trusted or killed; what the lease's cgroup holds otherwise is
// killed, and if the workload ended while the daemon was away its exit
// code is reported.
func (p *ProcessExecutor) Adopt(_ context.Context, w Workload, handle string) (Execution, error) {
	name := leaseName(w.LeaseID)
	state := filepath.Join(p.stateRoot(), name)
	var meta procMeta
	b, err := os.ReadFile(filepath.Join(state, "meta.json"))
	if err == nil {
		err = json.Unmarshal(b, &meta)
	}
	gone := func(why string) (Execution, error) {
		p.cg.killAll(name)
		p.cg.remove(name)
		if meta.WorkDir != "" {
			os.RemoveAll(meta.WorkDir)
		}
		os.RemoveAll(state)
		if meta.UID != 0 && p.owns(meta.UID) {
			p.releaseUID(meta.UID)
		}
		return nil, fmt.Errorf("%w: lease %s: %s", ErrGone, w.LeaseID, why)
	}
	if err == nil && meta.Owner != p.cfg.Owner {
		return nil, fmt.Errorf("%w: lease %s: its process is another daemon's", ErrGone, w.LeaseID)
	}
	if err != nil || meta.Lease != w.LeaseID {
		return gone("no record of its process on this provider")
	}
	if handle != meta.handle() {
		return gone(fmt.Sprintf("handle %q is not the recorded %s", handle, meta.handle()))
	}
	if !p.owns(meta.UID) {
		return gone(fmt.Sprintf("uid %d is not this executor's", meta.UID))
	}
	p.mu.Lock()
	if l, ok := p.uidUsed[meta.UID]; ok && l != w.LeaseID {
		p.mu.Unlock()
		return gone(fmt.Sprintf("uid %d is held by lease %s", meta.UID, l))
	}
	p.uidUsed[meta.UID] = w.LeaseID
	p.mu.Unlock()
	r := p.newRun(w, name, state, meta)
	alive := p.cg.contains(name, meta.Pid)
	if st, err := startTime(meta.Pid); err != nil || st != meta.Start {
		alive = false
	}
	if !alive {
		// It ended while the daemon was away: its recorded exit stands.
		r.tail(0, 0)
		r.exited(r.recordedExit())
		return r, nil
	}
	pidfd, err := unix.PidfdOpen(meta.Pid, 0)
	if err != nil {
		return gone(fmt.Sprintf("cannot watch process %d: %v", meta.Pid, err))
	}
	// The pidfd names the process for good; check it is still the one.
	if st, err := startTime(meta.Pid); err != nil || st != meta.Start {
		unix.Close(pidfd)
		r.tail(0, 0)
		r.exited(r.recordedExit())
		return r, nil
	}
	r.tail(fileSize(filepath.Join(state, "stdout")), fileSize(filepath.Join(state, "stderr")))
	go func() {
		defer unix.Close(pidfd)
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		for {
			select {
			case <-r.stopTail:
				return // detached
			default:
			}
			n, err := unix.Poll(fds, 200)
			if err == nil && n > 0 {
				break
			}
		}
		r.exited(r.recordedExit())
	}()
	if p.cfg.OnBusy != nil {
		p.cfg.OnBusy(w.GPUs, true)
	}
	return r, nil
}

func (p *ProcessExecutor) owns(uid uint32) bool {
	if p.single != nil {
		return uid == p.single.Uid
	}
	return uid >= p.cfg.UIDMin && uid <= p.cfg.UIDMax
}

func fileSize(p string) int64 {
	if fi, err := os.Stat(p); err == nil {
		return fi.Size()
	}
	return 0
}

// recordedExit is the exit code the shim wrote, for a workload this
// daemon did not start.
func (r *processRun) recordedExit() ExitResult {
	b, _ := os.ReadFile(filepath.Join(r.state, "exit"))
	code, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		r.mu.Lock()
		stopping := r.stopping
		r.mu.Unlock()
		if stopping {
			return ExitResult{Code: -1, Signal: "killed"}
		}
		return ExitResult{Code: -1, Error: "the workload ended without an exit code"}
	}
	return ExitResult{Code: code}
}

// Sweep implements Adopter: it ends and removes the workloads of leases
// keep does not keep (what a daemon killed before recording the end left).
func (p *ProcessExecutor) Sweep(_ context.Context, keep func(string) bool) ([]string, error) {
	var removed []string
	es, _ := os.ReadDir(p.stateRoot())
	for _, e := range es {
		var meta procMeta
		b, err := os.ReadFile(filepath.Join(p.stateRoot(), e.Name(), "meta.json"))
		if err != nil || json.Unmarshal(b, &meta) != nil || leaseName(meta.Lease) != e.Name() || meta.Owner != p.cfg.Owner {
			continue
		}
		if keep(meta.Lease) {
			continue
		}
		p.mu.Lock()
		running := p.uidUsed[meta.UID] == meta.Lease
		p.mu.Unlock()
		if running {
			continue
		}
		p.cg.killAll(e.Name())
		p.cg.remove(e.Name())
		os.RemoveAll(filepath.Join(p.workDirs(), e.Name()))
		os.RemoveAll(filepath.Join(p.stateRoot(), e.Name()))
		if p.owns(meta.UID) {
			p.releaseUID(meta.UID)
		}
		removed = append(removed, meta.Lease)
	}
	return removed, nil
}

// workDirOf is used by tests: the directory a process workload ran in.
func workDirOf(e Execution) string {
	if r, ok := e.(*processRun); ok {
		return r.meta.WorkDir
	}
	return ""
}
