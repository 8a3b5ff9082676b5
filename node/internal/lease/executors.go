package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/suanli/suanli/gpu"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/executor"
	"github.com/suanli/suanli/proto"
)

// ExecutorsConfig is what NewExecutors builds a provider's executors from.
type ExecutorsConfig struct {
	// Names are the executors allowed besides reserve (process, docker,
	// slurm).
	Names   []string
	Process executor.ProcessConfig
	Docker  *executor.DockerConfig // nil: docker's defaults
	// Slurm is the Slurm executor, built by the node from its cluster's
	// configuration (nil: none configured).
	Slurm *executor.SlurmExecutor
	// Owner names this node in what the executors leave on the host.
	Owner string
	GPUs  gpu.Backend // nil: a buyer
	Log   *slog.Logger
}

// NewExecutors builds the executors the provider allows and what each
// enforces; the node's isolation level is the weakest of them.
func NewExecutors(c ExecutorsConfig) (map[string]executor.Executor, *api.IsolationView, error) {
	execs := map[string]executor.Executor{executor.Reserve: executor.ReserveExecutor{}}
	isoView := &api.IsolationView{Level: api.IsolationNone, Executors: []api.ExecutorIsolation{}}
	add := func(e api.ExecutorIsolation) {
		if len(isoView.Executors) == 0 || slices.Index(IsolationLevels, e.Level) < slices.Index(IsolationLevels, isoView.Level) {
			isoView.Level = e.Level
		}
		isoView.Executors = append(isoView.Executors, e)
	}
	busy := SetBusy(c.GPUs)
	if slices.Contains(c.Names, executor.Process) {
		pc := c.Process
		pc.OnBusy, pc.Owner = busy, c.Owner
		if pc.WorkRoot == "" {
			pc.WorkRoot = filepath.Join(os.TempDir(), "suanli-work")
		}
		p, err := executor.NewProcess(pc)
		if err != nil {
			return nil, nil, fmt.Errorf("node: process executor: %w", err)
		}
		execs[executor.Process] = p
		add(processIsolation(p))
	}
	if slices.Contains(c.Names, executor.Docker) {
		cfg := executor.DockerConfig{}
		if c.Docker != nil {
			cfg = *c.Docker
		}
		if cfg.OnBusy == nil {
			cfg.OnBusy = busy
		}
		cfg.Owner = c.Owner
		if _, sim := c.GPUs.(gpu.Simulator); cfg.EnvOnlyGPUs && !sim && c.GPUs != nil {
			return nil, nil, errors.New("node: env-only GPUs are for simulated GPUs only: real GPUs need the engine's NVIDIA runtime")
		}
		d, err := executor.NewDocker(cfg)
		if err != nil {
			return nil, nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		nvidia, err := d.Ping(ctx)
		cancel()
		if err != nil {
			return nil, nil, fmt.Errorf("node: docker executor: %w", err)
		}
		if !nvidia && !cfg.EnvOnlyGPUs {
			c.Log.Warn("the container engine has no NVIDIA runtime: docker leases will be refused")
		}
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		iso, err := d.Isolation(ctx)
		cancel()
		if err != nil {
			return nil, nil, fmt.Errorf("node: docker executor: %w", err)
		}
		add(dockerIsolation(iso))
		if !iso.UserNS {
			c.Log.Warn("the container engine does not remap user namespaces: a container's root is the host's root, held back only by dropped capabilities (set userns-remap, see README)")
		}
		if !iso.DiskQuota {
			c.Log.Warn("the container engine's storage has no quota: the disk sold is a memory-backed /scratch, and leases asking for a writable root are refused when disk is sold", "driver", iso.StorageDriver)
		}
		execs[executor.Docker] = d
	} else if c.Docker != nil {
		return nil, nil, errors.New("node: WithDocker without WithExecutors(\"docker\")")
	}
	if slices.Contains(c.Names, executor.Slurm) {
		if c.Slurm == nil {
			return nil, nil, errors.New("node: the slurm executor needs WithSlurm")
		}
		execs[executor.Slurm] = c.Slurm
	}
	return execs, isoView, nil
}

// SetBusy tells a simulated backend that a workload runs on gpus (a
// no-op on real GPUs).
func SetBusy(b gpu.Backend) func(gpus []string, busy bool) {
	return func(gpus []string, busy bool) {
		if sim, ok := b.(gpu.Simulator); ok {
			for _, g := range gpus {
				sim.SetBusy(g, busy)
			}
		}
	}
}

// executorFor is the executor that runs a workload asking for name: on a
// provider that sells a Slurm cluster and runs no local processes, a
// command (the process executor's spec) runs as a Slurm job.
func (m *Manager) executorFor(name string) string {
	if name != executor.Process {
		return name
	}
	if _, ok := m.executors[executor.Process]; ok {
		return name
	}
	if _, ok := m.executors[executor.Slurm]; ok {
		return executor.Slurm
	}
	return name
}

// IsolationLevels orders the levels, weakest first, as the offer's
// proto.IsolationLevel numbers them (from 1).
var IsolationLevels = []string{api.IsolationNone, api.IsolationProcess, api.IsolationContainer, api.IsolationContainerUserNS}

// IsolationProto is the offer's form of a level.
func IsolationProto(level string) proto.IsolationLevel {
	if i := slices.Index(IsolationLevels, level); i >= 0 {
		return proto.IsolationLevel(i + 1)
	}
	return proto.IsolationLevel_ISOLATION_LEVEL_UNSPECIFIED
}

// IsolationName is a level as the API shows it ("" when unstated).
func IsolationName(l proto.IsolationLevel) string {
	if i := int(l) - 1; i >= 0 && i < len(IsolationLevels) {
		return IsolationLevels[i]
	}
	return ""
}

// IsolationAtLeast reports whether an offer's level meets min ("": any).
func IsolationAtLeast(l proto.IsolationLevel, min string) bool {
	return min == "" || slices.Index(IsolationLevels, IsolationName(l)) >= slices.Index(IsolationLevels, min)
}

func processIsolation(p *executor.ProcessExecutor) api.ExecutorIsolation {
	iso := p.Isolation()
	who := "each lease its own uid of " + iso.UIDs
	if iso.User != "" {
		who = "the account " + iso.User + ", one lease at a time"
	}
	return api.ExecutorIsolation{Executor: executor.Process, Level: api.IsolationProcess,
		Enforced: []string{
			"runs as " + who + ", never the daemon's uid",
			"cgroup " + iso.Cgroups + " per lease: CPU, memory and processes sold are limits; Stop ends every descendant (setsid, double fork)",
			"private 0700 work dir under " + iso.WorkRoot + ", scrubbed environment",
		},
		NotEnforced: []string{"disk sold", "network: the workload shares the host's network", "the host's files readable by any user"},
	}
}

func dockerIsolation(iso executor.DockerIsolation) api.ExecutorIsolation {
	e := api.ExecutorIsolation{Executor: executor.Docker, Level: api.IsolationContainer,
		Enforced: []string{"container per lease, capabilities dropped, no new privileges, read-only root", iso.Network, iso.Disk, "logs capped at " + iso.Logs}}
	if iso.UserNS {
		e.Level = api.IsolationContainerUserNS
		e.Enforced = append(e.Enforced, "user namespaces: a container's root is an unprivileged host uid")
	} else {
		e.NotEnforced = append(e.NotEnforced, "user namespaces: a container's root is the host's root (set userns-remap)")
	}
	if !iso.DiskQuota {
		e.NotEnforced = append(e.NotEnforced, "storage quota on "+iso.StorageDriver+": no writable root when disk is sold")
	}
	return e
}
