package market

import (
	"errors"
	"fmt"
	"time"

	"github.com/suanli/suanli/proto"
)

// ErrCreditLimit is returned when a take, or the next billing window of a
// running lease, would put what a buyer owes its provider past the credit
// limit the provider gives it.
var ErrCreditLimit = errors.New("market: buyer's credit limit reached")

// Credit is a buyer's account with one provider in one currency, as the
// provider's credit check sees it. It is the provider's side of the
// bilateral ledger (Ledger: countersigned charges, acknowledged payments)
// plus what the ledger cannot know yet: receipts the buyer has not
// countersigned, and the billing windows in progress.
//
// A provider lets a buyer run up at most Limit unpaid: a take is accepted
// only if its first billing window fits (Check), and a running lease ends
// as unpaid when its next window no longer fits (Over). What the buyer
// paid beyond its charges — a prepayment — raises what it may run up by as
// much. Amounts are micro-units; the zero Credit has no limit left.
type Credit struct {
	Currency string
	// Limit is the most the provider lets the buyer owe, unpaid.
	Limit int64
	// Billed is the cumulative amount of the provider's last receipt of
	// each lease with the buyer, summed: countersigned or not.
	Billed int64
	// Countersigned is the part of Billed the buyer countersigned (the
	// ledger's Receivable).
	Countersigned int64
	// Reserved is, for every running lease, the whole amount of the
	// billing window in progress (WindowReserve).
	Reserved int64
	// Paid is what the provider acknowledged the buyer paid it (the
	// ledger's Received), prepayments included.
	Paid int64
}

// AddLease adds one of the buyer's leases with the provider, at now: its
// billed and countersigned cumulative amounts and, while it runs, the
// window in progress. The lease's terms must be in the Credit's currency.
func (c *Credit) AddLease(l *Lease, now time.Time) error {
	if l.Terms.GetCurrency() != c.Currency {
		return fmt.Errorf("market: lease %q is in %s, credit in %s", l.Terms.GetId(), l.Terms.GetCurrency(), c.Currency)
	}
	res, err := WindowReserve(l, now)
	if err != nil {
		return err
	}
	c.Billed = satAdd(c.Billed, l.Chain.Cumulative)
	c.Countersigned = satAdd(c.Countersigned, l.Countersigned.Cumulative)
	c.Reserved = satAdd(c.Reserved, res)
	return nil
}

// Unpaid is what the buyer owes the provider or has committed to in the
// windows in progress, less what it paid: Billed + Reserved − Paid.
// Negative when it prepaid more than it used.
func (c Credit) Unpaid() int64 { return satAdd(c.Billed, c.Reserved) - c.Paid }

// Available is how much more the buyer may run up: Limit − Unpaid.
// Negative when it is over the limit.
func (c Credit) Available() int64 { return satAdd(c.Limit, -c.Unpaid()) }

// Over reports whether the buyer is past its limit: a running lease of
// its then ends as unpaid.
func (c Credit) Over() bool { return c.Available() < 0 }

// Check returns nil if the buyer may commit add more (the first billing
// window of a new lease) without passing its limit, and ErrCreditLimit,
// with what it owes, otherwise.
func (c Credit) Check(add int64) error {
	if add < 0 {
		return fmt.Errorf("market: negative amount %d", add)
	}
	if c.Available() >= add {
		return nil
	}
	f := c.money
	return fmt.Errorf("%w: %s unpaid (%s billed, %s in progress, %s paid) + %s for the new lease's first window passes the limit of %s",
		ErrCreditLimit, f(c.Unpaid()), f(c.Billed), f(c.Reserved), f(c.Paid), f(add), f(c.Limit))
}

// OverError is why a running lease ends when Over: ErrCreditLimit with the
// amounts.
func (c Credit) OverError() error {
	f := c.money
	return fmt.Errorf("%w: %s unpaid (%s billed, %s in progress, %s paid), limit %s",
		ErrCreditLimit, f(c.Unpaid()), f(c.Billed), f(c.Reserved), f(c.Paid), f(c.Limit))
}

// money formats micros in the Credit's currency, with its code.
func (c Credit) money(micros int64) string {
	return FormatMicros(micros, c.Currency) + " " + c.Currency
}

// WindowReserve is what the billing window in progress of a running lease
// costs when billed in full at now: every leased GPU for the whole window.
// It is 0 for a lease that is not running or has nothing left to bill.
func WindowReserve(l *Lease, now time.Time) (int64, error) {
	if l.State != LeaseRunning {
		return 0, nil
	}
	w, _ := l.Due(now)
	if !w.End.After(w.Start) {
		return 0, nil
	}
	ms := uint64(w.End.Sub(w.Start) / time.Millisecond)
	total, err := Charge(l.Terms.PriceMicros, l.Chain.GPUMillis+ms*uint64(len(l.Terms.Gpus)))
	if err != nil {
		return 0, err
	}
	return total - l.Chain.Cumulative, nil
}

// FirstWindow is what the first billing window of a lease on terms costs:
// every GPU for one interval, or for the whole lease when it is shorter.
func FirstWindow(terms *proto.Lease) (int64, error) {
	if err := termsUsable(terms); err != nil {
		return 0, err
	}
	d := min(BillingInterval(terms), time.Duration(terms.DurationS)*time.Second)
	return Charge(terms.PriceMicros, uint64(d/time.Millisecond)*uint64(len(terms.Gpus)))
}

// LedgerCredit is the credit of buyer, as the ledger knows it: the
// countersigned charges of the leases the ledger's node provided to buyer
// (as Billed and Countersigned) and what buyer paid, in currency. Add the
// receipts not yet countersigned and the windows in progress with AddLease
// on a Credit built from the leases instead, when they are at hand.
func (l *Ledger) LedgerCredit(buyer, currency string, limit int64) Credit {
	c := Credit{Currency: currency, Limit: limit}
	if a := l.accounts[buyer]; a != nil {
		if t := a.totals[currency]; t != nil {
			c.Billed, c.Countersigned, c.Paid = t.Receivable, t.Receivable, t.Received
		}
	}
	return c
}

// satAdd is a + b, saturated at the int64 bounds.
func satAdd(a, b int64) int64 {
	s := a + b
	switch {
	case a > 0 && b > 0 && s < 0:
		return 1<<63 - 1
	case a < 0 && b < 0 && s >= 0:
		return -1 << 63
	}
	return s
}

// GrantedCredit is the credit limit a provider gives a buyer that has
// paid it paid so far (acknowledged payments, micro-units): first, a
// buyer with no paid history, at most first; then as much more as it has
// paid, up to most. A buyer cannot farm credit by making new keys: each
// new key starts at first. first is capped at most.
func GrantedCredit(first, most, paid int64) int64 {
	first = min(first, most)
	if paid <= 0 {
		return first
	}
	return min(most, satAdd(first, paid))
}
