package market

import (
	"errors"
	"fmt"
	"time"

	"github.com/suanli/suanli/proto"
)

// ErrNotVouched is returned when a buyer cannot vouch for a receipt's
// window: its side never saw the lease's workload running then. The
// buyer keeps the receipt, uncountersigned, and countersigns it once it
// can (the workload's start reported late, say).
var ErrNotVouched = errors.New("market: window not vouched for")

// WorkSeen is what a buyer's node saw of its lease's workload on the exec
// stream.
type WorkSeen struct {
	// Workload: the buyer's order asked for one. Without one the lease
	// holds GPUs for the buyer (the reserve executor), which the buyer
	// cannot see and countersigns as the terms promise.
	Workload bool
	// Started: the provider reported it running (the started frame).
	Started bool
	// DownSince is when the exec stream broke and was not taken up again
	// since (zero: it is up). ExitedAt is when the workload's exit was
	// reported (zero: not yet).
	DownSince, ExitedAt time.Time
}

// VouchWindow is the buyer's check, before it countersigns receipt rc of
// a lease on terms, that its side saw the work it pays for: a window that
// charges nothing, or a lease without a workload, always; otherwise only
// once the workload was reported started, and not for a window that
// begins more than a billing interval after the exec stream broke or the
// workload exited. Otherwise ErrNotVouched.
func VouchWindow(terms *proto.Lease, rc *proto.Receipt, seen WorkSeen) error {
	if !seen.Workload || rc.GetGpuMs() == 0 && rc.GetAmountMicros() == 0 {
		return nil
	}
	if !seen.Started {
		return fmt.Errorf("%w: the workload was never reported started", ErrNotVouched)
	}
	ws := time.UnixMilli(rc.GetWindowStartUnixMs())
	slack := BillingInterval(terms)
	if !seen.ExitedAt.IsZero() && ws.After(seen.ExitedAt.Add(slack)) {
		return fmt.Errorf("%w: the workload exited at %s, before the window", ErrNotVouched, seen.ExitedAt.UTC().Format(time.RFC3339))
	}
	if !seen.DownSince.IsZero() && ws.After(seen.DownSince.Add(slack)) {
		return fmt.Errorf("%w: no word from the workload since %s", ErrNotVouched, seen.DownSince.UTC().Format(time.RFC3339))
	}
	return nil
}
