package lease

import (
	"testing"
	"time"

	"github.com/suanli/suanli/node/executor"
)

// TestMeteredTimes: where a scheduler keeps a record of the job (Slurm),
// its start and end are what the lease's GPU time runs between, within
// what the lease allows: never before the lease's start or what was
// billed already, never after now.
func TestMeteredTimes(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 7, 0, 0, 0, time.UTC)
	now := t0.Add(10 * time.Minute)
	for _, c := range []struct {
		name       string
		u          executor.Usage
		start, end time.Time
	}{
		{"no record: now", executor.Usage{}, now, now},
		{"the job's own times", executor.Usage{Start: t0.Add(time.Minute), End: t0.Add(9 * time.Minute)}, t0.Add(time.Minute), t0.Add(9 * time.Minute)},
		{"started before the lease", executor.Usage{Start: t0.Add(-time.Minute)}, t0, now},
		{"ended before what was billed", executor.Usage{Start: t0, End: t0.Add(2 * time.Minute)}, t0, t0.Add(5 * time.Minute)},
		{"times from the future", executor.Usage{Start: now.Add(time.Second), End: now.Add(time.Second)}, now, now},
	} {
		if got := meteredStart(c.u, t0, now); !got.Equal(c.start) {
			t.Errorf("%s: start %s, want %s", c.name, got, c.start)
		}
		if got := meteredEnd(c.u, t0.Add(5*time.Minute), now); c.u.End.IsZero() && !got.Equal(now) || !c.u.End.IsZero() && !got.Equal(c.end) {
			t.Errorf("%s: end %s, want %s", c.name, got, c.end)
		}
	}
}
