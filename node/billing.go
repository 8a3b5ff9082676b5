package node

import (
	"fmt"
	"time"

	"github.com/suanli/suanli/market"
)

// WithBillingIncrement sets the unit this provider's leases charge GPU
// time in, stated in its offer and in every lease's terms: time.Second,
// time.Minute or time.Hour, every started unit in full. Default 0: to the
// millisecond. Receipts still come every billing interval.
func WithBillingIncrement(d time.Duration) Option {
	return func(o *options) error {
		if !market.ValidBillingIncrement(d) {
			return fmt.Errorf("node: billing increment %s: want 1s, 1m or 1h", d)
		}
		o.chargeIncrement = d
		return nil
	}
}
