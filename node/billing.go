package node

import (
	"fmt"
	"time"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/proto"
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

// WithPriceSchedule prices each part of the provider's day, published in
// its offer and carried by every lease it signs (receipts then bill each
// window at its own price): windows covering the day without overlaps
// (market.ParseSchedule reads "00:00-08:00=-30%,08:00-24:00=0%"), in the
// day of UTC offset offsetMinutes. A schedule excludes a billing increment.
func WithPriceSchedule(ws []*proto.PriceWindow, offsetMinutes int32) Option {
	return func(o *options) error {
		if err := market.ValidateSchedule(ws, offsetMinutes); err != nil {
			return err
		}
		o.schedule, o.scheduleOffset = ws, offsetMinutes
		return nil
	}
}
