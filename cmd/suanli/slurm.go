package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/suanli/suanli/gpu"
	"github.com/suanli/suanli/node"
)

// slurmFlags are the daemon's flags for selling a Slurm cluster's GPUs.
type slurmFlags struct {
	backend               string
	conf, bin             string
	markets, partitions   listFlag
	partition, spot, work string
}

func (f *slurmFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.backend, "backend", "nvml", "where the GPUs come from: `nvml` (this machine) or slurm (a Slurm cluster's gpu gres)")
	fs.StringVar(&f.conf, "slurm-conf", "", "slurm: the cluster's slurm.conf `file` (default $SLURM_CONF or Slurm's own)")
	fs.StringVar(&f.bin, "slurm-bin", "", "slurm: `dir`ectory of sinfo, squeue, sbatch, scancel (default $PATH)")
	fs.Var(&f.markets, "slurm-market", "slurm: map a gres type to a market key, `TYPE=KEY` e.g. h100=nvidia-h100-sxm5-80gb (repeatable)")
	fs.Var(&f.partitions, "slurm-sell-partition", "slurm: sell only the nodes of this `partition` (repeatable; default all)")
	fs.StringVar(&f.partition, "slurm-partition", "", "slurm: `partition` for on-demand and reserved leases (default the cluster's default)")
	fs.StringVar(&f.spot, "slurm-spot-partition", "", "slurm: preemptible `partition` for spot leases (default --slurm-partition)")
	fs.StringVar(&f.work, "slurm-work-dir", "", "slurm: `dir` for the jobs' working directories and output, shared with the compute nodes (default the temp dir)")
}

// options turns the flags into node options; conflict says whether
// another GPU source (--gpu-sim, --no-gpu) was asked for.
func (f *slurmFlags) options(conflict bool) ([]node.Option, error) {
	switch f.backend {
	case "nvml":
		if f.conf != "" || len(f.markets) > 0 || f.partition != "" || f.spot != "" || f.work != "" || len(f.partitions) > 0 || f.bin != "" {
			return nil, fmt.Errorf("%w: the --slurm-* flags need --backend slurm", errUsage)
		}
		return nil, nil
	case "slurm":
	default:
		return nil, fmt.Errorf("%w: --backend %q: want nvml or slurm", errUsage, f.backend)
	}
	if conflict {
		return nil, fmt.Errorf("%w: --backend slurm conflicts with --gpu-sim and --no-gpu", errUsage)
	}
	cfg := node.SlurmConfig{Slurm: gpu.Slurm{Conf: f.conf, Bin: f.bin}, Partitions: f.partitions,
		Partition: f.partition, SpotPartition: f.spot, WorkRoot: f.work, Markets: map[string]string{}}
	if cfg.Slurm.Conf == "" {
		cfg.Slurm.Conf = os.Getenv("SLURM_CONF")
	}
	for _, m := range f.markets {
		typ, key, ok := strings.Cut(m, "=")
		if !ok || typ == "" || key == "" {
			return nil, fmt.Errorf("%w: --slurm-market %q: want TYPE=KEY", errUsage, m)
		}
		cfg.Markets[typ] = key
	}
	return []node.Option{node.WithSlurm(cfg)}, nil
}
