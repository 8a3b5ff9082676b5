package executor

import (
	"context"
	"errors"
	"fmt"
	"os/user"
	"slices"
	"strings"
	"time"

	"github.com/suanli/suanli/gpu"
)

// Reserver is an Executor whose scheduler can hold a reserved lease's
// GPUs from the trade to the block's end (a Slurm reservation), so that
// nobody else — the cluster's own users included — takes them in
// between. The lease logic calls Reserve when a reserved trade is agreed
// and Release when it is cancelled before its start; Start, at the
// block's start, places the workload in the hold by itself, and Stop
// releases it.
type Reserver interface {
	Executor
	// Reserve holds gpus for lease leaseID from start to end and returns
	// the hold's name. ErrNoReservation (wrapped) means the scheduler
	// cannot hold exactly these GPUs: the block is then held by the
	// provider's book alone, as with any other executor. Any other error
	// means the GPUs cannot be held over the block (another job runs
	// there), which should refuse the trade.
	Reserve(ctx context.Context, leaseID string, gpus []string, start, end time.Time) (string, error)
	// Release removes the lease's hold; none is not an error.
	Release(ctx context.Context, leaseID string) error
}

// ErrNoReservation is returned (wrapped, with the reason) by Reserve when
// the scheduler has no way to hold exactly the block's GPUs.
var ErrNoReservation = errors.New("executor: the scheduler cannot reserve these GPUs")

var _ Reserver = (*SlurmExecutor)(nil)

// reservationName is the Slurm reservation of a lease of this owner:
// "suanli-<lease>.<owner>" (Slurm 22.05 reservations have no comment).
func (s *SlurmExecutor) reservationName(lease string) string {
	return SlurmJobPrefix + lease + "." + s.Owner
}

// leaseOfReservation is the lease a reservation name names, if it is
// this owner's.
func (s *SlurmExecutor) leaseOfReservation(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, SlurmJobPrefix)
	if !ok {
		return "", false
	}
	lease, owner, ok := strings.Cut(rest, ".")
	return lease, ok && owner == s.Owner && lease != ""
}

// Reserve implements Reserver with a Slurm reservation
// (scontrol create reservation) of the block's nodes, for the daemon's
// user, from start (now, if it has passed) to end.
//
// Slurm 22.05 reserves whole nodes, cores and licenses, not gres: it
// refuses TRES=gres/gpu in a reservation ("TRES type 'gres/gpu' not
// supported with reservations"), with or without slurmdbd. So a block of
// every GPU of its nodes becomes a reservation of those nodes; a block
// of part of a node is ErrNoReservation, as is every block when the
// daemon's user is not a Slurm operator. A node with jobs running into
// the block is refused by Slurm ("Requested nodes are busy").
func (s *SlurmExecutor) Reserve(ctx context.Context, leaseID string, gpus []string, start, end time.Time) (string, error) {
	if s.Owner == "" || leaseID == "" || strings.ContainsAny(s.Owner+leaseID, " \t\n\"'=.,") {
		return "", fmt.Errorf("%w: slurm executor: bad owner or lease ID", ErrRefused)
	}
	if !end.After(start) || !end.After(time.Now()) {
		return "", fmt.Errorf("%w: slurm executor: block %v–%v is empty or over", ErrRefused, start, end)
	}
	plan, err := PlanSlurm(gpus)
	if err != nil {
		return "", err
	}
	name := s.reservationName(leaseID)
	if r, err := s.Slurm.Reservation(ctx, name); err != nil {
		return "", err
	} else if r != nil {
		return name, nil // made before a restart, or a retried trade
	}
	nodes, err := s.Slurm.Nodes(ctx)
	if err != nil {
		return "", err
	}
	for i, n := range plan.Nodes {
		j := slices.IndexFunc(nodes, func(x gpu.SlurmNode) bool { return x.Name == n })
		if j < 0 {
			return "", fmt.Errorf("%w: slurm executor: no node %q in the cluster", ErrRefused, n)
		}
		total := 0
		for _, g := range nodes[j].GPUs {
			total += g.Count
		}
		if plan.PerNode[i] != total {
			return "", fmt.Errorf("%w: %d of node %s's %d GPUs (Slurm 22.05 reserves whole nodes, not gres)", ErrNoReservation, plan.PerNode[i], n, total)
		}
	}
	u, err := user.Current()
	if err != nil {
		return "", fmt.Errorf("executor: slurm reservation: %w", err)
	}
	startArg := "now"
	if start.After(time.Now()) {
		startArg = gpu.SlurmTime(start)
	}
	// Slurm keeps reservations to the second; the job's time limit is in
	// whole minutes and may run past EndTime, which Slurm allows.
	_, err = s.Slurm.Run(ctx, nil, "scontrol", "create", "reservation", "ReservationName="+name,
		"StartTime="+startArg, "EndTime="+gpu.SlurmTime(end.Add(time.Second-1)), "Users="+u.Username,
		"Nodes="+strings.Join(plan.Nodes, ","))
	if err != nil {
		return "", reserveErr(err)
	}
	return name, nil
}

// reserveErr is how a failed scontrol create reservation refuses: only
// Slurm's operators (root, SlurmUser, or AdminLevel=Operator through
// slurmdbd) may make reservations, and a daemon that may not holds every
// block in its book alone (ErrNoReservation) rather than refuse them all;
// anything else (nodes busy over the block) refuses the trade.
func reserveErr(err error) error {
	// slurmctld answers a non-operator "Invalid user id" (and logs a
	// security violation); "Access/permission denied" in other versions.
	if msg := err.Error(); strings.Contains(msg, "Invalid user id") || strings.Contains(msg, "Access/permission denied") {
		return fmt.Errorf("%w: the daemon's user may not create Slurm reservations (operators only): %v", ErrNoReservation, err)
	}
	return fmt.Errorf("%w: slurm executor: %v", ErrRefused, err)
}

// Release implements Reserver: scontrol delete reservation.
func (s *SlurmExecutor) Release(ctx context.Context, leaseID string) error {
	_, err := s.Slurm.Run(ctx, nil, "scontrol", "delete", "ReservationName="+s.reservationName(leaseID))
	if err != nil && !strings.Contains(err.Error(), "invalid") && !strings.Contains(err.Error(), "not found") {
		return err
	}
	return nil
}

// reservationOf is the lease's reservation name, "" when it has none.
func (s *SlurmExecutor) reservationOf(ctx context.Context, lease string) (string, error) {
	r, err := s.Slurm.Reservation(ctx, s.reservationName(lease))
	if err != nil || r == nil {
		return "", err
	}
	return r.Name, nil
}

// sweepReservations deletes this owner's reservations whose lease keep
// does not know.
func (s *SlurmExecutor) sweepReservations(ctx context.Context, keep func(string) bool) ([]string, error) {
	rs, err := s.Slurm.Reservations(ctx)
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, r := range rs {
		lease, ok := s.leaseOfReservation(r.Name)
		if !ok || keep(lease) {
			continue
		}
		if err := s.Release(ctx, lease); err != nil {
			return removed, err
		}
		removed = append(removed, lease)
	}
	return removed, nil
}
