package lease

import (
	"time"

	"github.com/jonboulle/clockwork"
)

// Clock is the time the lease runtime decides and waits by: its billing
// ticks, graces, close-notice and redial backoffs. A clockwork.Clock is
// one (a fake one in tests, advanced by hand); RealClock wraps the node's.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
	NewTicker(d time.Duration) clockwork.Ticker
}

// RealClock is a Clock whose Now is now (the node's WithClock) and whose
// timers are the system's.
func RealClock(now func() time.Time) Clock {
	return realClock{now: now, Clock: clockwork.NewRealClock()}
}

type realClock struct {
	now func() time.Time
	clockwork.Clock
}

func (c realClock) Now() time.Time { return c.now() }
