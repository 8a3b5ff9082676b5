package executor

import (
	"context"
	"fmt"
	"os"
	osexec "os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

var (
	_ Adopter   = (*ProcessExecutor)(nil)
	_ Execution = (*processRun)(nil)
)

// ProcessExecutor runs the buyer's command as a local process in its own
// process group, with CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES set to
// exactly the leased GPU UUIDs. It isolates nothing but what it is told:
// the child gets a scrubbed environment (none of the daemon's variables,
// such as SUANLI_PASSPHRASE), a fresh working directory under WorkRoot
// (never the daemon's repo), and runs as User when set. Use docker for
// workloads you do not trust.
type ProcessExecutor struct {
	// WorkRoot holds one working directory per lease, removed when the
	// workload ends. Default: the system temp dir.
	WorkRoot string
	// User, when set, is the unprivileged account (name or uid) the child
	// runs as; the daemon must be allowed to switch to it.
	User string
	// OnBusy, when set, is told when the process starts and ends (the
	// simulator marks the GPUs busy).
	OnBusy func(gpus []string, busy bool)
}

// Name implements Executor.
func (*ProcessExecutor) Name() string { return Process }

// processEnv is the whole environment of a process workload.
func processEnv(w Workload, dir string) []string {
	devs := strings.Join(w.GPUs, ",")
	return []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + dir, "TMPDIR=" + dir, "LANG=C.UTF-8",
		"CUDA_VISIBLE_DEVICES=" + devs, "NVIDIA_VISIBLE_DEVICES=" + devs,
		"SUANLI_LEASE=" + w.LeaseID, "SUANLI_GPUS=" + devs,
	}
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
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// Start implements Executor.
func (p *ProcessExecutor) Start(_ context.Context, w Workload) (Execution, error) {
	if len(w.Command) == 0 {
		return nil, fmt.Errorf("%w: process executor: no command", ErrRefused)
	}
	if w.Image != "" || len(w.Ports) > 0 {
		return nil, fmt.Errorf("%w: process executor: an image or ports need the docker executor", ErrRefused)
	}
	var cred *syscall.Credential
	if p.User != "" {
		c, err := lookupCredential(p.User)
		if err != nil {
			return nil, err
		}
		cred = c
	}
	root := p.WorkRoot
	if root == "" {
		root = os.TempDir()
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("executor: process work root: %w", err)
	}
	dir, err := os.MkdirTemp(root, "suanli-lease-")
	if err != nil {
		return nil, fmt.Errorf("executor: process work dir: %w", err)
	}
	if cred != nil {
		os.Chown(dir, int(cred.Uid), int(cred.Gid))
	}
	cmd := osexec.Command(w.Command[0], w.Command[1:]...)
	cmd.Dir, cmd.Env = dir, processEnv(w, dir)
	cmd.Stdout, cmd.Stderr = orDiscard(w.Stdout), orDiscard(w.Stderr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%w: process executor: %v", ErrRefused, err)
	}
	if p.OnBusy != nil {
		p.OnBusy(w.GPUs, true)
	}
	r := &processRun{cmd: cmd, done: make(chan struct{}), started: time.Now()}
	go func() {
		err := cmd.Wait()
		res := ExitResult{Code: cmd.ProcessState.ExitCode()}
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.Code, res.Signal = -1, ws.Signal().String()
		} else if err != nil && res.Code == 0 {
			res.Error = err.Error()
		}
		if p.OnBusy != nil {
			p.OnBusy(w.GPUs, false)
		}
		os.RemoveAll(dir)
		r.mu.Lock()
		r.res = res
		r.mu.Unlock()
		close(r.done)
	}()
	return r, nil
}

type processRun struct {
	cmd     *osexec.Cmd
	done    chan struct{}
	started time.Time
	mu      sync.Mutex
	res     ExitResult
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
	return Info{Executor: Process, Handle: strconv.Itoa(r.cmd.Process.Pid), State: state, GPUAccess: "host", Started: r.started}
}

// Stop sends SIGTERM to the process group, then SIGKILL after grace.
func (r *processRun) Stop(grace time.Duration) error {
	pgid := r.cmd.Process.Pid
	select {
	case <-r.done:
		return nil
	default:
	}
	syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(grace):
		syscall.Kill(-pgid, syscall.SIGKILL)
		<-r.done
	}
	// Whatever the leader left behind in its group goes too.
	syscall.Kill(-pgid, syscall.SIGKILL)
	return nil
}

// Adopt implements Adopter. A process left behind by a killed daemon ran
// unwatched, its output lost, so it is not taken back: its process group
// (the handle) is killed and Adopt returns ErrGone.
func (p *ProcessExecutor) Adopt(_ context.Context, w Workload, handle string) (Execution, error) {
	pgid, err := strconv.Atoi(handle)
	if err != nil || pgid <= 1 {
		return nil, fmt.Errorf("%w: not a process group: %q", ErrGone, handle)
	}
	syscall.Kill(-pgid, syscall.SIGKILL)
	return nil, fmt.Errorf("%w: process group %d of lease %s killed: it ran unwatched", ErrGone, pgid, w.LeaseID)
}

// Sweep implements Adopter: processes leave nothing behind to sweep.
func (*ProcessExecutor) Sweep(context.Context, func(string) bool) ([]string, error) { return nil, nil }

// workDirOf is used by tests: the directory a process workload ran in.
func workDirOf(e Execution) string {
	if r, ok := e.(*processRun); ok {
		return filepath.Clean(r.cmd.Dir)
	}
	return ""
}
