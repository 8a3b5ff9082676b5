package market

import (
	"testing"
	"time"

	"github.com/suanli/suanli/proto"
)

func TestBillableGPUMillis(t *testing.T) {
	terms := &proto.Lease{Gpus: []string{"a", "b"}, PriceMicros: 3_600_000}
	for _, tc := range []struct {
		incS     int64
		cum, out uint64
	}{
		{0, 1234, 1234},          // to the millisecond
		{1, 1, 2000},             // a started second on each of 2 GPUs
		{1, 2000, 2000},          // exactly one second each
		{60, 2000, 120_000},      // per minute: the first receipt charges a minute
		{60, 120_000, 120_000},   // still the first minute
		{60, 120_001, 240_000},   // into the second
		{3600, 1, 2 * 3_600_000}, // per hour
		{60, 0, 0},               // nothing metered, nothing charged
	} {
		terms.BillingIncrementS = tc.incS
		if got := BillableGPUMillis(terms, tc.cum); got != tc.out {
			t.Errorf("increment %ds: BillableGPUMillis(%d) = %d, want %d", tc.incS, tc.cum, got, tc.out)
		}
	}
	terms.BillingIncrementS = 60
	if c, _ := LeaseCharge(terms, 1000); c != 120_000 { // 2 GPU-minutes at 3.60/GPU-hour
		t.Errorf("LeaseCharge = %d, want 120000", c)
	}
	for _, d := range []time.Duration{0, time.Second, time.Minute, time.Hour} {
		if !ValidBillingIncrement(d) {
			t.Errorf("ValidBillingIncrement(%s) = false", d)
		}
	}
	for _, d := range []time.Duration{time.Millisecond, 30 * time.Second, 2 * time.Hour} {
		if ValidBillingIncrement(d) {
			t.Errorf("ValidBillingIncrement(%s) = true", d)
		}
	}
}

// TestVerifyNextPerHour: with per-hour increments, the first receipt of a
// one-hour lease charges the whole hour and the next ones nothing; a
// provider charging to the millisecond instead is refused.
func TestVerifyNextPerHour(t *testing.T) {
	terms := withTerms(testTerms(), func(l *proto.Lease) { l.BillingIncrementS = 3600 })
	var prev *ReceiptState
	for i := int64(1); i <= 6; i++ {
		r := rebill(terms, prev, nextReceipt(terms, prev, terms.StartUnixMs+i*600_000))
		if i == 1 && r.AmountMicros != 4_000_000 || i > 1 && r.AmountMicros != 0 {
			t.Fatalf("receipt %d charges %d, want the whole hour (4.00) first, then nothing", i, r.AmountMicros)
		}
		h := hashOf(r)
		if err := VerifyNext(terms, prev, r, h, time.UnixMilli(r.CreatedUnixMs)); err != nil {
			t.Fatalf("receipt %d: %v", i, err)
		}
		st := StateOf(r, h)
		prev = &st
	}
	exact := testTerms() // the same receipt charged to the millisecond
	r := rebill(exact, nil, nextReceipt(exact, nil, exact.StartUnixMs+600_000))
	if err := VerifyNext(terms, nil, r, hashOf(r), time.UnixMilli(r.CreatedUnixMs)); err == nil {
		t.Error("VerifyNext accepted a per-millisecond charge on a per-hour lease")
	}
	bad := withTerms(testTerms(), func(l *proto.Lease) { l.BillingIncrementS = 30 })
	if err := ValidateTerms(bad); err == nil {
		t.Error("ValidateTerms accepted a 30 s billing increment")
	}
}
