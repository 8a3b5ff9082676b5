package market

import (
	"errors"
	"fmt"
	"math/bits"
	"time"
)

// LeaseType is how GPU time is sold: the three ways to pay.
type LeaseType uint8

// Lease types. The zero LeaseType is invalid.
const (
	// Spot leases trade at the book price and may be preempted (after
	// PreemptionNotice) for an on-demand or reserved take or a higher spot
	// bid.
	Spot LeaseType = 1 + iota
	// OnDemand leases pay the provider's posted price and are never
	// preempted.
	OnDemand
	// Reserved leases commit to a duration in exchange for a discount off
	// the on-demand price (ReservedPrice) and are never preempted.
	Reserved
)

// PreemptionNotice is how long a spot lease keeps its GPUs after the
// provider tells the buyer it is preempted, unless its terms say otherwise
// (LeaseNotice).
const PreemptionNotice = 30 * time.Second

// ErrBadDiscount is returned when a reserved discount schedule is malformed.
var ErrBadDiscount = errors.New("market: bad reserved discount")

func (t LeaseType) valid() bool { return t >= Spot && t <= Reserved }

// String returns "spot", "on-demand" or "reserved".
func (t LeaseType) String() string {
	switch t {
	case Spot:
		return "spot"
	case OnDemand:
		return "on-demand"
	case Reserved:
		return "reserved"
	}
	return fmt.Sprintf("lease-type(%d)", uint8(t))
}

// Interruptible reports whether leases of this type may be preempted.
func (t LeaseType) Interruptible() bool { return t == Spot }

// ParseLeaseType parses "spot", "on-demand" or "reserved".
func ParseLeaseType(s string) (LeaseType, error) {
	switch s {
	case "spot":
		return Spot, nil
	case "on-demand":
		return OnDemand, nil
	case "reserved":
		return Reserved, nil
	}
	return 0, fmt.Errorf("%w: %q (want spot, on-demand or reserved)", ErrOrderLeaseType, s)
}

// MarshalText implements encoding.TextMarshaler.
func (t LeaseType) MarshalText() ([]byte, error) {
	if !t.valid() {
		return nil, fmt.Errorf("%w: %d", ErrOrderLeaseType, uint8(t))
	}
	return []byte(t.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (t *LeaseType) UnmarshalText(b []byte) error {
	v, err := ParseLeaseType(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// Discount is one step of a reserved-price schedule: leases committed for at
// least MinDuration pay BasisPoints less than on-demand (100 bp = 1%). Basis
// points, as offers carry them on the wire, so 2.5% is expressible.
type Discount struct {
	MinDuration time.Duration
	BasisPoints uint32
}

// ReservedPrice is the per-GPU-hour price of a lease committed for d, given
// the provider's on-demand price and discount schedule (in any order). The
// largest discount whose MinDuration d reaches applies; none applies below
// every step. The result is rounded half up to the micro-unit.
func ReservedPrice(onDemand int64, d time.Duration, schedule []Discount) (int64, error) {
	if onDemand <= 0 || onDemand > MaxPriceMicros {
		return 0, fmt.Errorf("%w: on-demand %d micros", ErrOrderPrice, onDemand)
	}
	var bp uint32
	for _, s := range schedule {
		if s.MinDuration <= 0 || s.BasisPoints == 0 || s.BasisPoints >= 10_000 {
			return 0, fmt.Errorf("%w: %d bp from %s", ErrBadDiscount, s.BasisPoints, s.MinDuration)
		}
		if d >= s.MinDuration {
			bp = max(bp, s.BasisPoints)
		}
	}
	hi, lo := bits.Mul64(uint64(onDemand), uint64(10_000-bp))
	lo, carry := bits.Add64(lo, 5_000, 0)
	q, _ := bits.Div64(hi+carry, lo, 10_000)
	return int64(q), nil
}
