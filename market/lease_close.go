package market

import (
	"errors"
	"fmt"
	"time"

	"github.com/suanli/suanli/proto"
)

// Rules for the close of a lease that both parties must apply alike: a
// lease's two ends may each close it while they cannot reach each other
// (the provider as unpaid, the buyer for a silent provider), and when they
// meet again both must settle on one close.

// ErrCloseRefused is returned when a close notice is one the receiving
// side must not take: the buyer ending reserved time early while the
// provider was billing, say.
var ErrCloseRefused = errors.New("market: close refused")

// AgreeClose is the one close both parties keep when each closed a lease
// on its own: the earlier one, since the lease ran no longer than that;
// at the same instant the lower reason. It is symmetric:
// AgreeClose(a, b) == AgreeClose(b, a).
func AgreeClose(aReason CloseReason, aAt time.Time, bReason CloseReason, bAt time.Time) (CloseReason, time.Time) {
	switch {
	case aAt.Before(bAt):
		return aReason, aAt
	case bAt.Before(aAt):
		return bReason, bAt
	case bReason < aReason:
		return bReason, bAt
	}
	return aReason, aAt
}

// CheckBuyerClose is the provider's check of a buyer's close notice,
// reason at at, for a lease on terms whose last countersigned window
// ended at billedTo (zero: none yet). A buyer may end on-demand or spot
// time whenever it likes. Reserved time is a commitment: the buyer may end
// it before its end only when the provider failed it, sending no receipt
// the buyer countersigned for one billing interval plus grace (the
// buyer's own rule for a silent provider); otherwise ErrCloseRefused.
func CheckBuyerClose(terms *proto.Lease, reason CloseReason, at, billedTo time.Time, grace time.Duration) error {
	if reason != CloseBuyer {
		return fmt.Errorf("%w: %s is not the buyer's to give", ErrCloseRefused, reason)
	}
	if LeaseType(terms.GetLeaseType()) != Reserved || !at.Before(LeaseEnd(terms)) {
		return nil
	}
	if grace <= 0 {
		grace = DefaultUnpaidGrace * BillingInterval(terms)
	}
	last := time.UnixMilli(terms.GetStartUnixMs())
	if billedTo.After(last) {
		last = billedTo
	}
	if at.After(last.Add(BillingInterval(terms) + grace)) {
		return nil // the provider went silent: the buyer may leave
	}
	return fmt.Errorf("%w: reserved until %s, a commitment the buyer cannot end early while the provider bills",
		ErrCloseRefused, LeaseEnd(terms).Format(time.RFC3339))
}
