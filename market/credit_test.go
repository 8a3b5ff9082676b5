package market

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/suanli/suanli/proto"
)

// creditOf is the credit of testTerms' buyer with one lease, at now.
func creditOf(t *testing.T, l *Lease, limit, paid int64, now time.Time) Credit {
	t.Helper()
	c := Credit{Currency: "USD", Limit: limit, Paid: paid}
	if err := c.AddLease(l, now); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCreditRunningLease runs testTerms (two GPUs at 2.00 USD per GPU-hour,
// ten-minute windows of 0.666667 USD) against a 2.00 USD limit: it fits
// three windows exactly, and the fourth is over until the buyer pays.
func TestCreditRunningLease(t *testing.T) {
	terms := testTerms()
	const limit = 2_000_000
	first, err := FirstWindow(terms)
	if err != nil || first != 666_667 {
		t.Fatalf("FirstWindow = %d, %v, want 666667", first, err)
	}
	if err := (Credit{Currency: "USD", Limit: limit}).Check(first); err != nil {
		t.Fatalf("Check(first window) with nothing owed = %v, want nil", err)
	}
	l := leaseIn(t, terms, LeaseRunning)
	at := func(m int) time.Time { return testLeaseStart.Add(time.Duration(m) * time.Minute) }
	steps := []struct {
		receipts                 int
		billed, reserved, unpaid int64
		over                     bool
	}{
		{0, 0, 666_667, 666_667, false},
		{1, 666_667, 666_667, 1_333_334, false},
		{2, 1_333_334, 666_666, 2_000_000, false}, // cumulative charging: the third window rounds down
		{3, 2_000_000, 666_667, 2_666_667, true},
	}
	for _, s := range steps {
		for l.Chain.Seq < uint64(s.receipts) {
			_, end, _ := nextWindowMs(terms, prevEndMs(terms, &l.Chain))
			r := nextReceipt(terms, &l.Chain, end)
			if err := l.AddReceipt(r, hashOf(r), time.UnixMilli(end)); err != nil {
				t.Fatal(err)
			}
		}
		now := at(10*s.receipts + 5)
		c := creditOf(t, l, limit, 0, now)
		if c.Billed != s.billed || c.Reserved != s.reserved || c.Unpaid() != s.unpaid || c.Over() != s.over {
			t.Errorf("after %d receipts: credit %+v unpaid %d over %v, want billed %d reserved %d unpaid %d over %v",
				s.receipts, c, c.Unpaid(), c.Over(), s.billed, s.reserved, s.unpaid, s.over)
		}
		if got := c.Available(); got != limit-s.unpaid {
			t.Errorf("after %d receipts: Available = %d, want %d", s.receipts, got, limit-s.unpaid)
		}
	}
	c := creditOf(t, l, limit, 0, at(35))
	if err := c.OverError(); !errors.Is(err, ErrCreditLimit) || !strings.Contains(err.Error(), "2.666667 USD unpaid") {
		t.Errorf("OverError = %v, want ErrCreditLimit naming 2.666667 USD unpaid", err)
	}
	// A payment (or a prepayment before the lease) frees as much credit.
	if c := creditOf(t, l, limit, 1_000_000, at(35)); c.Over() || c.Available() != 333_333 {
		t.Errorf("after paying 1.00: over %v, available %d, want not over, 333333", c.Over(), c.Available())
	}
	// A new lease's first window must fit in what is left.
	err = creditOf(t, l, limit, 1_000_000, at(35)).Check(first)
	if !errors.Is(err, ErrCreditLimit) || !strings.Contains(err.Error(), "limit of 2.00 USD") {
		t.Errorf("Check(first) with 0.333333 left = %v, want ErrCreditLimit naming the limit", err)
	}
	if err := creditOf(t, l, limit, 1_500_000, at(35)).Check(first); err != nil {
		t.Errorf("Check(first) with 0.833333 left = %v, want nil", err)
	}
	// Closed: nothing in progress is reserved; what was billed stays owed.
	if err := l.End(CloseUnpaid, at(36)); err != nil {
		t.Fatal(err)
	}
	if c := creditOf(t, l, limit, 0, at(36)); c.Reserved != 0 || c.Billed != 2_000_000 {
		t.Errorf("ending lease: credit %+v, want nothing reserved, 2.00 billed", c)
	}
	if err := (Credit{}).Check(-1); err == nil {
		t.Error("Check(-1) = nil, want an error")
	}
	other := leaseIn(t, withTerms(testTerms(), func(l *proto.Lease) { l.Currency = "CNY" }), LeaseRunning)
	if err := (&Credit{Currency: "USD"}).AddLease(other, at(1)); err == nil {
		t.Error("AddLease(CNY lease) to a USD credit = nil, want an error")
	}
}

// TestCreditFromLedger: with every receipt countersigned and the lease
// over, the credit built from the leases is the ledger's.
func TestCreditFromLedger(t *testing.T) {
	terms := withTerms(testTerms(), func(l *proto.Lease) { l.Provider = []byte(ledgerSelf); l.Buyer = []byte(peerB) })
	chain, _ := testChain(terms, 4)
	led := NewLedger([]byte(ledgerSelf))
	mustAddReceipts(t, led, terms, chain)
	if _, err := led.AddPayment(ack(ledgerSelf, peerB, 1, 500_000, "USD")); err != nil {
		t.Fatal(err)
	}
	l := leaseIn(t, terms, LeaseRunning)
	for _, e := range chain {
		if err := l.AddReceipt(e.Receipt, e.Hash, time.UnixMilli(e.Receipt.WindowEndUnixMs)); err != nil {
			t.Fatal(err)
		}
		if err := l.AddCountersign(e.Countersign, time.UnixMilli(e.Countersign.CreatedUnixMs)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.End(CloseBuyer, time.UnixMilli(chain[3].Receipt.WindowEndUnixMs)); err != nil {
		t.Fatal(err)
	}
	want := led.LedgerCredit(peerB, "USD", 10_000_000)
	got := Credit{Currency: "USD", Limit: 10_000_000, Paid: want.Paid}
	if err := got.AddLease(l, testLeaseStart.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("credit from the lease = %+v, from the ledger %+v", got, want)
	}
	if owed := led.Owed(peerB); len(owed) != 1 || owed[0].Micros != want.Unpaid() {
		t.Errorf("ledger owes %v, credit unpaid %d", owed, want.Unpaid())
	}
}

func TestSatAdd(t *testing.T) {
	for _, c := range []struct{ a, b, want int64 }{
		{1, 2, 3}, {1<<63 - 1, 1, 1<<63 - 1}, {-1 << 63, -1, -1 << 63}, {-5, 3, -2},
	} {
		if got := satAdd(c.a, c.b); got != c.want {
			t.Errorf("satAdd(%d, %d) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

func TestGrantedCredit(t *testing.T) {
	cases := []struct {
		name              string
		first, most, paid int64
		want              int64
	}{
		{"a new key gets the first credit", 1_000_000, 10_000_000, 0, 1_000_000},
		{"payments raise it", 1_000_000, 10_000_000, 2_500_000, 3_500_000},
		{"up to the limit", 1_000_000, 10_000_000, 50_000_000, 10_000_000},
		{"first capped at the limit", 20_000_000, 10_000_000, 0, 10_000_000},
		{"no first credit: prepaid only", 0, 10_000_000, 0, 0},
		{"huge payments saturate", 1, 1 << 62, 1<<63 - 1, 1 << 62},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := GrantedCredit(c.first, c.most, c.paid); got != c.want {
				t.Errorf("GrantedCredit(%d, %d, %d) = %d, want %d", c.first, c.most, c.paid, got, c.want)
			}
		})
	}
}
