package node

import (
	"fmt"
	"time"

	"github.com/suanli/suanli/market"
)

// The options of spot preemption (node/internal/trade/preempt.go).

// WithPreemptionNotice sets the notice this provider's spot leases get
// before an interruption, stated in their terms. Default
// market.PreemptionNotice (30 s).
func WithPreemptionNotice(d time.Duration) Option {
	return func(o *options) error {
		if d < time.Second || d > market.MaxPreemptionNotice {
			return fmt.Errorf("node: preemption notice %s: want 1s..%s", d, market.MaxPreemptionNotice)
		}
		o.preemptNotice = d
		return nil
	}
}

// WithPreemptMargin sets how much more (basis points) a spot trade must pay
// per GPU-hour to preempt a running spot lease. Default
// market.DefaultPreemptMarginBP.
func WithPreemptMargin(bp int64) Option {
	return func(o *options) error {
		if bp < 0 || bp > 1_000_000 {
			return fmt.Errorf("node: preemption margin %d bp", bp)
		}
		o.preemptMargin = &bp
		return nil
	}
}
