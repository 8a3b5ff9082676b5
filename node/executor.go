package node

import (
	"errors"
	"fmt"
	"slices"

	"github.com/suanli/suanli/node/executor"
	"github.com/suanli/suanli/node/internal/provider"
)

// The executor contract lives in node/executor; these names keep the
// node's API in one place for embedders.
type (
	// Executor runs a lease's workload (see executor.Executor).
	Executor = executor.Executor
	// Workload is what one lease runs.
	Workload = executor.Workload
	// Execution is one running workload.
	Execution = executor.Execution
	// ExitResult is how a workload ended.
	ExitResult = executor.ExitResult
	// Endpoint is a published container port of a lease.
	Endpoint = executor.Endpoint
	// DockerConfig configures the docker executor.
	DockerConfig = executor.DockerConfig
)

// Names of the built-in executors.
const (
	ExecReserve = executor.Reserve
	ExecProcess = executor.Process
	ExecDocker  = executor.Docker
)

// WithExecutors sets the executors a provider allows, by name: "reserve"
// (always allowed), "process", "docker" (configured by WithDocker) and
// "slurm" (with WithSlurm).
// Default: reserve only.
func WithExecutors(names ...string) Option {
	return func(o *options) error {
		for _, n := range names {
			if !slices.Contains([]string{ExecReserve, ExecProcess, ExecDocker, ExecSlurm}, n) {
				return fmt.Errorf("node: unknown executor %q (want reserve, process, docker or slurm)", n)
			}
		}
		o.executors = names
		return nil
	}
}

// WithDocker configures the docker executor (allowed with
// WithExecutors("docker")): which images may run, the host port range,
// what to do on an engine without the NVIDIA runtime.
func WithDocker(cfg DockerConfig) Option {
	return func(o *options) error { o.docker = &cfg; return nil }
}

// WithProcessUser runs process workloads as user (a name or uid), one
// lease at a time, rather than each as a uid of its own range; it may not
// be root or the daemon's own uid.
func WithProcessUser(user string) Option {
	return func(o *options) error { o.process.User = user; return nil }
}

// WithProcessUIDs sets the uids process workloads run as, one per lease
// (default executor.DefaultUIDMin–DefaultUIDMax); no account may use them.
func WithProcessUIDs(lo, hi uint32) Option {
	return func(o *options) error {
		if lo == 0 || hi < lo {
			return fmt.Errorf("node: process uid range %d-%d", lo, hi)
		}
		o.process.UIDMin, o.process.UIDMax = lo, hi
		return nil
	}
}

// WithProcessConfig configures the process executor in full (tests: a
// work root and cgroup parent of their own).
func WithProcessConfig(cfg executor.ProcessConfig) Option {
	return func(o *options) error { o.process = cfg; return nil }
}

// WithResourcesPerGPU sets what each leased GPU comes with on this
// provider, published in its offer and enforced on containers: vCPUs (in
// thousandths), RAM and disk bytes. Zero fields are derived from the host
// (its cores and memory shared out among its GPUs).
func WithResourcesPerGPU(milliCPUs int64, ramBytes, diskBytes uint64) Option {
	return func(o *options) error {
		if milliCPUs < 0 {
			return errors.New("node: negative vCPUs per GPU")
		}
		o.perGPU = provider.PerGPU{MilliCPUs: milliCPUs, RAM: ramBytes, Disk: diskBytes}
		return nil
	}
}
