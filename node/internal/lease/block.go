package lease

import (
	"context"
	"errors"
	"time"

	"github.com/suanli/suanli/node/executor"
)

// HoldBlock holds a reserved block's GPUs in the scheduler of the cluster
// this node sells, where it sells one whose executor can
// (executor.Reserver: a Slurm reservation from start to end), so the
// cluster's own users cannot take them before the block starts; its job
// then runs in the hold. Where the scheduler cannot hold exactly these
// GPUs (executor.ErrNoReservation: part of a node on Slurm 22.05, or a
// daemon that is no Slurm operator) the provider's book alone holds the
// block, as on a single machine, and HoldBlock says so in the log. Any
// other error means the GPUs cannot be held over the block: the trade
// should be refused.
func (m *Manager) HoldBlock(ctx context.Context, leaseID string, gpus []string, start, end time.Time) error {
	rs, ok := m.executors[executor.Slurm].(executor.Reserver)
	if !ok {
		return nil
	}
	name, err := rs.Reserve(ctx, leaseID, gpus, start, end)
	switch {
	case errors.Is(err, executor.ErrNoReservation):
		m.log.Info("reserved block held by the book alone", "lease", leaseID, "why", err)
		return nil
	case err != nil:
		return err
	}
	m.log.Info("reserved block held by the scheduler", "lease", leaseID, "reservation", name,
		"start", start.UTC().Format(time.RFC3339), "end", end.UTC().Format(time.RFC3339))
	return nil
}

// ReleaseBlock gives back HoldBlock's hold of a block whose trade was not
// agreed after all; none is not an error.
func (m *Manager) ReleaseBlock(ctx context.Context, leaseID string) {
	rs, ok := m.executors[executor.Slurm].(executor.Reserver)
	if !ok {
		return
	}
	if err := rs.Release(ctx, leaseID); err != nil {
		m.log.Warn("releasing a reserved block's hold failed", "lease", leaseID, "err", err)
	}
}
