package market

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/suanli/suanli/proto"
)

// ErrBadTransition is returned when an event is not legal in a lease's
// current state (see Lease).
var ErrBadTransition = errors.New("market: lease transition not allowed")

// DefaultUnpaidGrace is how many billing intervals a buyer's countersignature
// may be missing before the lease ends as unpaid, unless the node sets
// another grace.
const DefaultUnpaidGrace = 3

// LeaseState is where a lease is in its life.
type LeaseState uint8

// Lease states. The zero LeaseState is invalid.
const (
	// LeaseStarting: agreed; the provider is bringing up the GPUs.
	LeaseStarting LeaseState = 1 + iota
	// LeaseRunning: the buyer has the GPUs; receipts flow.
	LeaseRunning
	// LeaseEnding: ended for a reason; the GPUs are being handed back (for
	// a preempted spot lease, the buyer keeps them for PreemptionNotice).
	LeaseEnding
	// LeaseClosed: over. Only the final receipt may still follow.
	LeaseClosed
)

// String returns "starting", "running", "ending" or "closed".
func (s LeaseState) String() string {
	switch s {
	case LeaseStarting:
		return "starting"
	case LeaseRunning:
		return "running"
	case LeaseEnding:
		return "ending"
	case LeaseClosed:
		return "closed"
	}
	return fmt.Sprintf("lease-state(%d)", uint8(s))
}

// MarshalText implements encoding.TextMarshaler.
func (s LeaseState) MarshalText() ([]byte, error) {
	if s < LeaseStarting || s > LeaseClosed {
		return nil, fmt.Errorf("market: lease state %d", uint8(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *LeaseState) UnmarshalText(b []byte) error {
	for v := LeaseStarting; v <= LeaseClosed; v++ {
		if v.String() == string(b) {
			*s = v
			return nil
		}
	}
	return fmt.Errorf("market: unknown lease state %q", b)
}

// CloseReason is why a lease ended.
type CloseReason uint8

// Close reasons. The zero CloseReason means the lease has not ended.
const (
	// CloseCompleted: the lease ran to its end time.
	CloseCompleted CloseReason = 1 + iota
	// CloseBuyer: the buyer ended it early.
	CloseBuyer
	// CloseProvider: the provider ended it early.
	CloseProvider
	// ClosePreempted: the provider interrupted a spot lease for a better
	// take (see ChoosePreempted).
	ClosePreempted
	// CloseUnpaid: the buyer stopped countersigning receipts (see Unpaid).
	CloseUnpaid
	// CloseFailed: the GPUs or the executor failed.
	CloseFailed
	// CloseExited: the lease's workload ended by itself (its exit code is
	// kept beside the lease); billing stops with it.
	CloseExited
	// CloseResold: the buyer resold the rest of a reserved block; a new
	// lease of the same GPUs goes on from the handover (see resale.go).
	CloseResold
)

var closeReasonNames = [...]string{"", "completed", "buyer-closed", "provider-closed", "preempted", "unpaid", "failed", "exited", "resold"}

// String returns "completed", "buyer-closed", "provider-closed", "preempted",
// "unpaid", "failed", "exited", "resold", or "" for the zero CloseReason.
func (r CloseReason) String() string {
	if int(r) < len(closeReasonNames) {
		return closeReasonNames[r]
	}
	return fmt.Sprintf("close-reason(%d)", uint8(r))
}

// ParseCloseReason parses what String returns, except "".
func ParseCloseReason(s string) (CloseReason, error) {
	for i := CloseCompleted; int(i) < len(closeReasonNames); i++ {
		if closeReasonNames[i] == s {
			return i, nil
		}
	}
	return 0, fmt.Errorf("market: unknown close reason %q", s)
}

// MarshalText implements encoding.TextMarshaler; the zero CloseReason is "".
func (r CloseReason) MarshalText() ([]byte, error) {
	if int(r) >= len(closeReasonNames) {
		return nil, fmt.Errorf("market: close reason %d", uint8(r))
	}
	return []byte(r.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (r *CloseReason) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*r = 0
		return nil
	}
	v, err := ParseCloseReason(string(b))
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// Lease is one side's view of a lease: its agreed terms, where it is in its
// life, and how far its receipt chain has come. Both parties keep one.
//
// The life of a lease, with the methods that move it (anything else is
// ErrBadTransition):
//
//	starting ──Start──▶ running ──End(reason)──▶ ending ──Close──▶ closed
//	starting ──End(reason)──▶ ending
//	starting, running ──Fail──▶ closed (failed)
//
// End takes buyer-closed or provider-closed from starting or running;
// preempted likewise, for spot leases only; completed only from running, at
// or after the lease's end time; unpaid only from running; exited (the
// workload ended by itself) from starting or running. failed is Fail's
// alone. Transition times never go backwards: a now before the last one
// recorded is taken as that one.
//
// A lease is billed from its agreed start (not from Start) until it closes
// or its duration runs out, whichever is first; one that never ran is not
// billed. Receipts (AddReceipt) and countersignatures (AddCountersign) are
// taken in every state; once closed, only for time before the close. The fields are
// for reading: change them through the methods. A node that restarts
// rebuilds a Lease by replaying its stored events in order.
//
// A Lease is not safe for concurrent use.
type Lease struct {
	Terms  *proto.Lease
	State  LeaseState
	Reason CloseReason // zero until End or Fail

	StartedAt time.Time // when it began running; zero if it never did
	EndingAt  time.Time // when End was called
	ClosedAt  time.Time

	// Chain is the last receipt accepted (Seq: how many).
	Chain ReceiptState
	// Countersigned is the last receipt the buyer countersigned; its
	// Cumulative is what the buyer owes for the lease.
	Countersigned   ReceiptState
	CountersignedAt time.Time // when that countersignature was taken

	// pending are the receipts after Countersigned, oldest first.
	pending []ReceiptState
}

// NewLease returns a starting lease on the given terms (see ValidateTerms).
// It keeps terms; the caller must not change them.
func NewLease(terms *proto.Lease) (*Lease, error) {
	if err := ValidateTerms(terms); err != nil {
		return nil, err
	}
	return &Lease{Terms: terms, State: LeaseStarting}, nil
}

// LeaseEnd is when a lease on these terms ends: start + duration.
func LeaseEnd(terms *proto.Lease) time.Time {
	return time.UnixMilli(terms.GetStartUnixMs()).Add(time.Duration(terms.GetDurationS()) * time.Second).UTC()
}

// BillingInterval is the length of a lease's billing windows.
func BillingInterval(terms *proto.Lease) time.Duration {
	return time.Duration(terms.GetBillingIntervalS()) * time.Second
}

// EndTime is when the lease's agreed duration runs out.
func (l *Lease) EndTime() time.Time { return LeaseEnd(l.Terms) }

// Expired reports whether the lease's agreed duration has run out at now;
// a running lease then ends as completed.
func (l *Lease) Expired(now time.Time) bool { return !now.Before(l.EndTime()) }

// stamp is now, unless it is before the last transition's time.
func (l *Lease) stamp(now time.Time) time.Time {
	for _, t := range []time.Time{l.StartedAt, l.EndingAt, l.ClosedAt} {
		if now.Before(t) {
			now = t
		}
	}
	return now
}

func (l *Lease) refuse(event string) error {
	return fmt.Errorf("%w: %s a %s lease", ErrBadTransition, event, l.State)
}

// Start moves a starting lease to running: the buyer has the GPUs.
func (l *Lease) Start(now time.Time) error {
	if l.State != LeaseStarting {
		return l.refuse("start")
	}
	l.StartedAt, l.State = l.stamp(now), LeaseRunning
	return nil
}

// End moves a starting or running lease to ending, for reason (see Lease for
// which reason is legal when).
func (l *Lease) End(reason CloseReason, now time.Time) error {
	ok := false
	switch reason {
	case CloseBuyer, CloseProvider:
		ok = l.State == LeaseStarting || l.State == LeaseRunning
	case ClosePreempted:
		if !LeaseType(l.Terms.LeaseType).Interruptible() {
			return fmt.Errorf("%w: %s leases are never preempted", ErrBadTransition, LeaseType(l.Terms.LeaseType))
		}
		ok = l.State == LeaseStarting || l.State == LeaseRunning
	case CloseCompleted:
		if l.State == LeaseRunning && !l.Expired(now) {
			return fmt.Errorf("%w: complete before the lease's end at %s", ErrBadTransition, l.EndTime().Format(time.RFC3339))
		}
		ok = l.State == LeaseRunning
	case CloseUnpaid:
		ok = l.State == LeaseRunning
	case CloseExited:
		ok = l.State == LeaseStarting || l.State == LeaseRunning
	case CloseResold:
		if LeaseType(l.Terms.LeaseType) != Reserved {
			return fmt.Errorf("%w: only reserved leases are resold", ErrBadTransition)
		}
		ok = l.State == LeaseRunning
	}
	if !ok {
		return l.refuse("end (" + reason.String() + ")")
	}
	l.EndingAt, l.Reason, l.State = l.stamp(now), reason, LeaseEnding
	return nil
}

// Close moves an ending lease to closed: its GPUs are handed back.
func (l *Lease) Close(now time.Time) error {
	if l.State != LeaseEnding {
		return l.refuse("close")
	}
	l.ClosedAt, l.State = l.stamp(now), LeaseClosed
	return nil
}

// Fail closes a starting or running lease at once, as failed. An ending
// lease whose teardown fails is closed with Close: it already ended.
func (l *Lease) Fail(now time.Time) error {
	if l.State != LeaseStarting && l.State != LeaseRunning {
		return l.refuse("fail")
	}
	t := l.stamp(now)
	l.EndingAt, l.ClosedAt, l.Reason, l.State = t, t, CloseFailed, LeaseClosed
	return nil
}

// billedUntilMs is when billing stops, in Unix ms: the lease's end, or its
// close when earlier.
func (l *Lease) billedUntilMs() int64 {
	end := leaseEndMs(l.Terms)
	if l.State == LeaseClosed {
		end = min(end, l.ClosedAt.UnixMilli())
	}
	return end
}

// Due is the window the provider bills next, and whether its receipt is due
// at now: when a running or ending lease's window has ended, or at once for
// a closed lease's last window (which ends at the close). ok is false when
// nothing is left to bill, the lease never ran, or the window has not ended
// yet; w is then the window in progress, if any.
func (l *Lease) Due(now time.Time) (w Window, ok bool) {
	if l.StartedAt.IsZero() {
		return Window{}, false
	}
	start, end, more := nextWindowMs(l.Terms, prevEndMs(l.Terms, &l.Chain))
	if !more {
		return Window{}, false
	}
	end = min(end, l.billedUntilMs())
	if end <= start {
		return Window{}, false
	}
	w = Window{time.UnixMilli(start).UTC(), time.UnixMilli(end).UTC()}
	return w, l.State == LeaseClosed || now.UnixMilli() >= end
}

// AddReceipt checks r (see VerifyNext) and, if it is the next receipt,
// makes it the lease's last. A closed lease takes receipts only for windows
// that end by its close.
func (l *Lease) AddReceipt(r *proto.Receipt, receiptHash []byte, now time.Time) error {
	if err := VerifyNext(l.Terms, &l.Chain, r, receiptHash, now); err != nil {
		return err
	}
	if l.State == LeaseClosed && r.WindowEndUnixMs > l.ClosedAt.UnixMilli() {
		return fmt.Errorf("%w: ends at %d, after the lease closed at %d", ErrReceiptWindow, r.WindowEndUnixMs, l.ClosedAt.UnixMilli())
	}
	l.Chain = StateOf(r, receiptHash)
	l.pending = append(l.pending, l.Chain)
	return nil
}

// AddCountersign takes the buyer's countersignature c of one of the lease's
// receipts after the last countersigned one, received at now. A
// countersignature of a receipt already covered (an earlier or the same
// seq) changes nothing. ErrCountersign when c names a receipt the lease does
// not hold or its hash, lease or buyer is wrong.
func (l *Lease) AddCountersign(c *proto.Countersign, now time.Time) error {
	switch {
	case c == nil:
		return fmt.Errorf("%w: missing", ErrCountersign)
	case c.Seq == 0:
		return fmt.Errorf("%w: seq 0", ErrCountersign)
	case c.LeaseId != l.Terms.Id:
		return fmt.Errorf("%w: countersigns lease %q, want %q", ErrCountersign, c.LeaseId, l.Terms.Id)
	case !bytes.Equal(c.Buyer, l.Terms.Buyer):
		return fmt.Errorf("%w: signed by a peer other than the lease's buyer", ErrCountersign)
	case c.Seq == l.Countersigned.Seq && c.Seq > 0 && !bytes.Equal(c.ReceiptHash, l.Countersigned.Hash):
		return fmt.Errorf("%w: countersigns receipt %x as seq %d, which is %x", ErrCountersign, c.ReceiptHash, c.Seq, l.Countersigned.Hash)
	case c.Seq <= l.Countersigned.Seq:
		return nil
	}
	for i, st := range l.pending {
		if st.Seq != c.Seq {
			continue
		}
		if !bytes.Equal(c.ReceiptHash, st.Hash) {
			return fmt.Errorf("%w: countersigns receipt %x as seq %d, which is %x", ErrCountersign, c.ReceiptHash, c.Seq, st.Hash)
		}
		l.Countersigned, l.CountersignedAt = st, now
		l.pending = append(l.pending[:0], l.pending[i+1:]...)
		return nil
	}
	return fmt.Errorf("%w: countersigns seq %d, the lease holds receipts up to %d", ErrCountersign, c.Seq, l.Chain.Seq)
}

// Unpaid reports whether, at now, the buyer has left a receipt of this lease
// uncountersigned for longer than grace (DefaultUnpaidGrace intervals when
// grace ≤ 0) since its last countersignature or, before the first, since the
// lease started.
func (l *Lease) Unpaid(now time.Time, grace time.Duration) bool {
	if l.Chain.Seq <= l.Countersigned.Seq {
		return false
	}
	return Unpaid(l.Terms, l.CountersignedAt, now, grace)
}

// UnpaidDeadline is when a lease on terms becomes unpaid if the buyer does
// not countersign again: lastCountersign (the lease start when zero or
// earlier) plus grace, or plus DefaultUnpaidGrace billing intervals when
// grace ≤ 0.
func UnpaidDeadline(terms *proto.Lease, lastCountersign time.Time, grace time.Duration) time.Time {
	if grace <= 0 {
		grace = DefaultUnpaidGrace * BillingInterval(terms)
	}
	if start := time.UnixMilli(terms.GetStartUnixMs()); lastCountersign.Before(start) {
		lastCountersign = start
	}
	return lastCountersign.Add(grace)
}

// Unpaid reports whether a lease on terms is unpaid at now: the buyer's
// last countersignature, at lastCountersign (zero for none), is more than
// grace old (see UnpaidDeadline). The node asks while a receipt is waiting
// for a countersignature; Lease.Unpaid checks that too.
func Unpaid(terms *proto.Lease, lastCountersign, now time.Time, grace time.Duration) bool {
	return now.After(UnpaidDeadline(terms, lastCountersign, grace))
}
