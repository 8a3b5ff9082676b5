package executor

import (
	"slices"
	"strings"
	"time"
)

// Meter is an Execution whose scheduler records when the workload held
// its GPUs and how many (Slurm's job record). The lease logic bills from
// that record — its start instead of the moment Start returned, its end
// instead of the moment Done closed — and checks the GPU count against
// the lease's; the receipts it signs are unchanged.
type Meter interface {
	Usage() Usage
}

// Usage is what a scheduler recorded of one workload.
type Usage struct {
	// Source names the record, e.g. "slurm job 42".
	Source string
	// Start is when the scheduler gave the workload its GPUs (zero until
	// it has); End when it took them back (zero while it runs).
	Start, End time.Time
	// GPUs is how many GPUs were allocated, over every node; Nodes the
	// nodes, sorted.
	GPUs  int
	Nodes []string
}

// Held is how long the workload held its GPUs up to now (to End once it
// has ended).
func (u Usage) Held(now time.Time) time.Duration {
	if u.Start.IsZero() {
		return 0
	}
	end := u.End
	if end.IsZero() {
		end = now
	}
	return max(end.Sub(u.Start), 0)
}

var _ Meter = (*slurmRun)(nil)

// Usage implements Meter from squeue's record of the job (which the
// controller keeps for MinJobAge after it ends; the run keeps the last one
// it read): its StartTime, its EndTime once it has ended (squeue's
// EndTime of a running job is only its time limit), and the gres indices
// allocated on each node. Slurm records times to the second.
func (r *slurmRun) Usage() Usage {
	r.mu.Lock()
	defer r.mu.Unlock()
	u := Usage{Source: "slurm job " + r.id, Start: r.job.Start}
	if ended(r.job.State) && !r.job.End.IsZero() {
		u.End = r.job.End
	}
	for n, gs := range r.job.GPUs {
		u.Nodes = append(u.Nodes, n)
		for _, g := range gs {
			// Used are the indices; an allocation listed without them
			// counts by its count.
			u.GPUs += max(len(g.Used), g.Count)
		}
	}
	slices.SortFunc(u.Nodes, strings.Compare)
	return u
}
