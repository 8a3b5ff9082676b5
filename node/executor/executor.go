// Package executor runs a lease's workload on exactly the leased GPUs: the
// contract the lease logic knows (Executor, Execution) and the built-in
// executors behind it — reserve (hold the GPUs, run nothing), process (the
// buyer's argv as a local process) and docker (the buyer's image as a
// container on the Docker Engine).
//
// Everything an executor creates outside the daemon carries the lease ID
// (the container label LeaseLabel, for docker), so a restarted daemon can
// adopt what still runs and remove what no lease owns, and nothing else.
package executor

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/suanli/suanli/node/api"
)

// Executor runs a lease's workload on its GPUs. The lease logic knows only
// this contract (and the optional Adopter), so kubernetes or slurm
// executors can be added by implementing it.
//
// Implementations are safe for concurrent use.
type Executor interface {
	// Name is how providers allow it and buyers ask for it, e.g. "docker".
	Name() string
	// Start begins w on exactly w.GPUs. It returns once the workload runs
	// (for docker: the image is present and the container started), or
	// with the reason it cannot; ctx bounds that preparation, not the run.
	Start(ctx context.Context, w Workload) (Execution, error)
}

// Adopter is an Executor whose workloads outlive the daemon (containers),
// so that a restarted daemon can take them back.
type Adopter interface {
	Executor
	// Adopt takes back the workload of lease w.LeaseID, last known by
	// handle (Info.Handle), if it still runs; otherwise it removes
	// whatever of it is left and returns ErrGone.
	Adopt(ctx context.Context, w Workload, handle string) (Execution, error)
	// Sweep removes every object labelled with a lease for which keep
	// returns false, and reports the leases it removed.
	Sweep(ctx context.Context, keep func(leaseID string) bool) ([]string, error)
}

// Workload is what one lease runs.
type Workload struct {
	LeaseID string
	// GPUs are the leased GPU UUIDs, in the lease's order.
	GPUs []string
	// Command is the buyer's argv: the process to run, or for docker the
	// container's command (empty: the image's own).
	Command []string
	// Image is the container image reference (docker only).
	Image string
	// Ports are container TCP ports to publish on the provider's host
	// (docker only).
	Ports []uint16
	// SSHKey is an authorized_keys line for the container's root user
	// (docker only; the image must run sshd).
	SSHKey string
	// WritableRoot leaves the container's root filesystem writable; by
	// default it is read-only with a writable /scratch volume and /tmp.
	WritableRoot bool
	// Limits are the resources the lease bought (docker only).
	Limits Limits
	// End is when the lease ends (zero: not known); a scheduler's executor
	// (slurm) makes it the job's time limit.
	End time.Time
	// Spot says the lease may be preempted; a scheduler's executor (slurm)
	// places it in its preemptible partition.
	Spot bool
	// Stdout and Stderr receive the workload's output; nil discards it.
	Stdout, Stderr io.Writer
}

// Limits bound a workload's resources; zero fields do not limit.
type Limits struct {
	// MilliCPUs is the CPU time, in thousandths of a CPU.
	MilliCPUs int64 `json:"milli_cpus,omitempty"`
	// MemoryBytes is the memory limit (swap included: no swap).
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	// DiskBytes is the scratch space sold; recorded, enforced only where
	// the engine's storage supports quotas.
	DiskBytes int64 `json:"disk_bytes,omitempty"`
	// Pids bounds the processes and threads.
	Pids int64 `json:"pids,omitempty"`
}

// Execution is one running workload.
type Execution interface {
	// Done is closed when the workload has ended, by itself or by Stop.
	Done() <-chan struct{}
	// Stop ends the workload: politely first (SIGTERM), by force after
	// grace (SIGKILL), and removes what it made. It returns when the
	// workload has ended.
	Stop(grace time.Duration) error
	// Result is how the workload ended; valid once Done is closed.
	Result() ExitResult
	// Info is what the buyer and the lease view see of the workload now.
	Info() Info
}

// LogFollower is an Execution whose output can be read again from a time
// on (containers keep theirs), e.g. for a buyer reconnecting after the
// provider restarted.
type LogFollower interface {
	// FollowLogs copies the output since since to stdout and stderr until
	// the workload ends or ctx is done.
	FollowLogs(ctx context.Context, since time.Time, stdout, stderr io.Writer) error
}

// Detacher is an Execution whose workload can outlive the daemon: Detach
// stops watching it without stopping it (the daemon is shutting down and
// will adopt it on restart). Done then closes with Result().Detached set.
type Detacher interface {
	Detach()
}

// ExitResult is how a workload ended; the API shows it as it is.
type ExitResult = api.ExitResult

// Endpoint is a published container port.
type Endpoint = api.Endpoint

// Info describes a workload.
type Info struct {
	Executor string `json:"executor"`
	// Handle names the workload outside the daemon: the process group for
	// process, the container ID for docker.
	Handle string `json:"handle,omitempty"`
	// Image is the reference the buyer asked for, ImageID what ran
	// (sha256:…), RepoDigest its registry digest when it has one.
	Image      string `json:"image,omitempty"`
	ImageID    string `json:"image_id,omitempty"`
	RepoDigest string `json:"repo_digest,omitempty"`
	// State is the container's state as the engine reports it (running,
	// exited, …), or running/exited for a process.
	State     string     `json:"state,omitempty"`
	Endpoints []Endpoint `json:"endpoints,omitempty"`
	// GPUAccess says how the GPUs reach the workload: "nvidia" (engine
	// device requests for exactly the leased UUIDs), "env-only" (simulated
	// GPUs: the UUIDs are in the environment, no device is attached), or
	// "host" for a process.
	GPUAccess string    `json:"gpu_access,omitempty"`
	Limits    Limits    `json:"limits,omitzero"`
	Started   time.Time `json:"started,omitzero"`
}

// Names of the built-in executors.
const (
	Reserve = "reserve"
	Process = "process"
	Docker  = "docker"
)

// Errors.
var (
	// ErrRefused is returned (wrapped, with the reason) when a workload is
	// refused before anything is created: an image not allowed, a bad
	// reference, too many ports, no GPU runtime.
	ErrRefused = errors.New("executor: workload refused")
	// ErrGone is returned by Adopt when the lease's workload no longer runs.
	ErrGone = errors.New("executor: workload no longer runs")
	// ErrEngine is returned (wrapped) when the container engine cannot be
	// reached or fails.
	ErrEngine = errors.New("executor: container engine failed")
)

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
