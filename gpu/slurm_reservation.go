package gpu

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// SlurmTimeLayout is how scontrol writes and reads times: local time
// without a zone, which Run makes UTC (TZ=UTC).
const SlurmTimeLayout = "2006-01-02T15:04:05"

// SlurmTime formats t for scontrol (UTC, to the second).
func SlurmTime(t time.Time) string { return t.UTC().Format(SlurmTimeLayout) }

// SlurmReservation is one reservation as `scontrol -o show reservation`
// reports it.
type SlurmReservation struct {
	Name       string
	Start, End time.Time
	// Nodes is Slurm's hostlist expression ("vm", "gpu[01-04]"),
	// NodeCount how many nodes it names.
	Nodes     string
	NodeCount int
	Users     string
	// State is ACTIVE between Start and End, INACTIVE before.
	State string
}

// Reservations lists the cluster's reservations. Slurm 22.05's scontrol
// has no --json; its one-line form (-o) is KEY=VALUE fields.
func (s Slurm) Reservations(ctx context.Context) ([]SlurmReservation, error) {
	out, err := s.Run(ctx, nil, "scontrol", "-o", "show", "reservation")
	if err != nil {
		return nil, err
	}
	return ParseReservations(out)
}

// Reservation is the reservation called name, nil when there is none.
func (s Slurm) Reservation(ctx context.Context, name string) (*SlurmReservation, error) {
	out, err := s.Run(ctx, nil, "scontrol", "-o", "show", "reservation", name)
	if err != nil {
		// "Reservation NAME not found", on stdout, exit status 1.
		if strings.Contains(string(out)+err.Error(), "not found") {
			return nil, nil
		}
		return nil, err
	}
	rs, err := ParseReservations(out)
	if err != nil {
		return nil, err
	}
	for _, r := range rs {
		if r.Name == name {
			return &r, nil
		}
	}
	return nil, nil
}

// ParseReservations reads `scontrol -o show reservation`: a reservation
// a line, KEY=VALUE fields, times in SlurmTimeLayout (UTC under Run).
// "No reservations in the system" is none.
func ParseReservations(b []byte) ([]SlurmReservation, error) {
	var out []SlurmReservation
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "ReservationName=") {
			continue
		}
		var r SlurmReservation
		for _, f := range strings.Fields(line) {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				continue
			}
			var err error
			switch k {
			case "ReservationName":
				r.Name = v
			case "StartTime":
				r.Start, err = time.Parse(SlurmTimeLayout, v)
			case "EndTime":
				r.End, err = time.Parse(SlurmTimeLayout, v)
			case "Nodes":
				r.Nodes = v
			case "NodeCnt":
				r.NodeCount, err = strconv.Atoi(v)
			case "Users":
				r.Users = v
			case "State":
				r.State = v
			}
			if err != nil {
				return nil, fmt.Errorf("%w: scontrol show reservation: %s: %v", ErrSlurm, k, err)
			}
		}
		if r.Name == "" {
			return nil, fmt.Errorf("%w: scontrol show reservation: a reservation without a name", ErrSlurm)
		}
		out = append(out, r)
	}
	return out, nil
}
