package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Executor runs a lease's workload on its GPUs. The lease logic knows only
// this contract, so docker, kubernetes or slurm executors can be added by
// implementing it and naming it in WithExecutors.
//
// Implementations are safe for concurrent use.
type Executor interface {
	// Name is how providers allow it and buyers ask for it, e.g. "process".
	Name() string
	// Start begins w on exactly w.GPUs and returns at once.
	Start(ctx context.Context, w Workload) (Execution, error)
}

// Workload is what one lease runs.
type Workload struct {
	LeaseID string
	// GPUs are the leased GPU UUIDs, in the lease's order.
	GPUs []string
	// Command is the buyer's argv; empty for executors that run nothing.
	Command []string
	// Stdout and Stderr receive the workload's output; nil discards it.
	Stdout, Stderr io.Writer
}

// Execution is one running workload.
type Execution interface {
	// Done is closed when the workload has ended, by itself or by Stop.
	Done() <-chan struct{}
	// Stop ends the workload: politely first, by force after grace. It
	// returns when the workload has ended.
	Stop(grace time.Duration) error
	// Result is how the workload ended; valid once Done is closed.
	Result() ExitResult
}

// ExitResult is how a workload ended.
type ExitResult struct {
	Code   int    `json:"code"`             // exit code; -1 when killed by a signal
	Signal string `json:"signal,omitempty"` // the signal that killed it
	Error  string `json:"error,omitempty"`  // why it could not run, if so
}

// Names of the built-in executors.
const (
	ExecReserve = "reserve"
	ExecProcess = "process"
)

// ErrExecutor is returned when a lease asks for an executor the provider
// does not allow.
var ErrExecutor = errors.New("node: executor not allowed by this provider")

var (
	_ Executor  = ReserveExecutor{}
	_ Executor  = ProcessExecutor{}
	_ Execution = (*reservation)(nil)
	_ Execution = (*processRun)(nil)
)

// ReserveExecutor holds the GPUs for the buyer and runs nothing: bare-metal
// style, the buyer reaches the machine by arrangement.
type ReserveExecutor struct{}

// Name implements Executor.
func (ReserveExecutor) Name() string { return ExecReserve }

// Start implements Executor.
func (ReserveExecutor) Start(context.Context, Workload) (Execution, error) {
	return &reservation{done: make(chan struct{})}, nil
}

type reservation struct {
	once sync.Once
	done chan struct{}
}

func (r *reservation) Done() <-chan struct{} { return r.done }
func (r *reservation) Stop(time.Duration) error {
	r.once.Do(func() { close(r.done) })
	return nil
}
func (r *reservation) Result() ExitResult { return ExitResult{} }

// ProcessExecutor runs the buyer's command as a local process in its own
// process group, with CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES set to
// exactly the leased GPU UUIDs. OnBusy, when set, is told when the process
// starts and ends (the simulator marks the GPUs busy).
type ProcessExecutor struct {
	OnBusy func(gpus []string, busy bool)
}

// Name implements Executor.
func (ProcessExecutor) Name() string { return ExecProcess }

// Start implements Executor.
func (p ProcessExecutor) Start(_ context.Context, w Workload) (Execution, error) {
	if len(w.Command) == 0 {
		return nil, errors.New("node: process executor: no command")
	}
	cmd := exec.Command(w.Command[0], w.Command[1:]...)
	devs := strings.Join(w.GPUs, ",")
	cmd.Env = append(os.Environ(), "CUDA_VISIBLE_DEVICES="+devs, "NVIDIA_VISIBLE_DEVICES="+devs, "SUANLI_LEASE="+w.LeaseID)
	cmd.Stdout, cmd.Stderr = orDiscard(w.Stdout), orDiscard(w.Stderr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("node: process executor: %w", err)
	}
	if p.OnBusy != nil {
		p.OnBusy(w.GPUs, true)
	}
	r := &processRun{cmd: cmd, done: make(chan struct{})}
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
		r.res = res
		close(r.done)
	}()
	return r, nil
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

type processRun struct {
	cmd  *exec.Cmd
	done chan struct{}
	res  ExitResult
}

func (r *processRun) Done() <-chan struct{} { return r.done }

func (r *processRun) Result() ExitResult {
	<-r.done
	return r.res
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
