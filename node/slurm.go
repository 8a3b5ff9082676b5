package node

import (
	"context"
	"errors"
	"time"

	"github.com/suanli/suanli/gpu"
	"github.com/suanli/suanli/node/executor"
)

// ExecSlurm is the Slurm executor's name.
const ExecSlurm = executor.Slurm

// SlurmConfig makes a provider sell the GPUs of a Slurm cluster: the
// inventory is the cluster's gpu gres (gpu.SlurmBackend), and leases run
// as Slurm jobs (executor.SlurmExecutor) when the "slurm" executor is
// allowed.
type SlurmConfig struct {
	// Slurm is the cluster's CLI (SLURM_CONF and the commands' directory).
	Slurm gpu.Slurm
	// Cluster names the cluster in GPU UUIDs; default its ClusterName.
	Cluster string
	// Markets maps a gres type to its market key, e.g. "h100" ->
	// "nvidia-h100-sxm5-80gb".
	Markets map[string]string
	// Partitions limits the inventory to nodes of these partitions.
	Partitions []string
	// Partition runs on-demand and reserved leases (default: the
	// cluster's default partition); SpotPartition runs spot leases (a
	// preemptible tier whose jobs Slurm signals before cancelling them).
	Partition, SpotPartition string
	// WorkRoot holds the jobs' working directories and output files; on
	// a cluster it must be shared with the compute nodes.
	WorkRoot string
}

// WithSlurm makes the node a provider of a Slurm cluster's GPUs (see
// SlurmConfig); allow leases to run on it with WithExecutors("slurm").
func WithSlurm(cfg SlurmConfig) Option {
	return func(o *options) error {
		if o.gpuSim != "" || o.noGPU || o.backend != nil {
			return errors.New("node: WithSlurm conflicts with WithGPUSim/WithGPUBackend/WithoutGPU")
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		b, err := gpu.OpenSlurm(ctx, gpu.SlurmBackendConfig{Slurm: cfg.Slurm, Cluster: cfg.Cluster,
			Markets: cfg.Markets, Partitions: cfg.Partitions, JobPrefix: executor.SlurmJobPrefix})
		if err != nil {
			return err
		}
		o.backend, o.slurm = b, &cfg
		return nil
	}
}
