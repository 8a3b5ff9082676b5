package market

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/suanli/suanli/proto"
)

// leaseIn is a lease on terms brought to state through its legal path, one
// minute a step from the lease start.
func leaseIn(t *testing.T, terms *proto.Lease, state LeaseState) *Lease {
	t.Helper()
	l, err := NewLease(terms)
	if err != nil {
		t.Fatal(err)
	}
	steps := []func(time.Time) error{
		l.Start,
		func(now time.Time) error { return l.End(CloseBuyer, now) },
		l.Close,
	}
	for i := range int(state - LeaseStarting) {
		if err := steps[i](testLeaseStart.Add(time.Duration(i) * time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	if l.State != state {
		t.Fatalf("leaseIn(%s) = %s", state, l.State)
	}
	return l
}

// TestLeaseTransitions tries every event in every state, for each lease
// type: the legal ones move the lease, the others are ErrBadTransition and
// change nothing.
func TestLeaseTransitions(t *testing.T) {
	const (
		X = LeaseState(0) // refused
		R = LeaseRunning
		E = LeaseEnding
		C = LeaseClosed
	)
	type event struct {
		name   string
		do     func(l *Lease, now time.Time) error
		reason CloseReason // the reason it leaves
	}
	end := func(r CloseReason) event {
		return event{"end " + r.String(), func(l *Lease, now time.Time) error { return l.End(r, now) }, r}
	}
	events := []event{
		{"start", (*Lease).Start, 0},
		end(CloseCompleted), end(CloseBuyer), end(CloseProvider), end(ClosePreempted), end(CloseUnpaid), end(CloseFailed), end(CloseExited), end(0),
		{"close", (*Lease).Close, CloseBuyer}, // leaseIn ends with buyer-closed
		{"fail", (*Lease).Fail, CloseFailed},
	}
	//                start  compl  buyer  prov   preempt unpaid failed exited none  close  fail
	interruptible := map[LeaseState][]LeaseState{
		LeaseStarting: {R, X, E, E, E, X, X, E, X, X, C},
		LeaseRunning:  {X, E, E, E, E, E, X, E, X, X, C},
		LeaseEnding:   {X, X, X, X, X, X, X, X, X, C, X},
		LeaseClosed:   {X, X, X, X, X, X, X, X, X, X, X},
	}
	uninterruptible := map[LeaseState][]LeaseState{
		LeaseStarting: {R, X, E, E, X, X, X, E, X, X, C},
		LeaseRunning:  {X, E, E, E, X, E, X, E, X, X, C},
		LeaseEnding:   {X, X, X, X, X, X, X, X, X, C, X},
		LeaseClosed:   {X, X, X, X, X, X, X, X, X, X, X},
	}
	types := []struct {
		lt   proto.LeaseType
		want map[LeaseState][]LeaseState
	}{
		{proto.LeaseType_LEASE_TYPE_SPOT, interruptible},
		{proto.LeaseType_LEASE_TYPE_ON_DEMAND, uninterruptible},
		{proto.LeaseType_LEASE_TYPE_RESERVED, uninterruptible},
	}
	now := testLeaseStart.Add(2 * time.Hour) // after the lease's end, so completed is legal
	for _, ty := range types {
		terms := withTerms(testTerms(), func(l *proto.Lease) { l.LeaseType = ty.lt })
		for from := LeaseStarting; from <= LeaseClosed; from++ {
			for i, ev := range events {
				want := ty.want[from][i]
				t.Run(LeaseType(ty.lt).String()+"/"+from.String()+"/"+ev.name, func(t *testing.T) {
					l := leaseIn(t, terms, from)
					before := *l
					err := ev.do(l, now)
					if want == X {
						if !errors.Is(err, ErrBadTransition) {
							t.Fatalf("%s in %s = %v, want ErrBadTransition", ev.name, from, err)
						}
						if !reflect.DeepEqual(*l, before) {
							t.Errorf("refused %s changed the lease: %+v, want %+v", ev.name, *l, before)
						}
						return
					}
					if err != nil || l.State != want {
						t.Fatalf("%s in %s = %v, state %s, want %s", ev.name, from, err, l.State, want)
					}
					switch want {
					case LeaseRunning:
						if !l.StartedAt.Equal(now) || l.Reason != 0 {
							t.Errorf("started at %v, reason %q, want %v, none", l.StartedAt, l.Reason, now)
						}
					case LeaseEnding:
						if !l.EndingAt.Equal(now) || l.Reason != ev.reason {
							t.Errorf("ending at %v for %q, want %v for %q", l.EndingAt, l.Reason, now, ev.reason)
						}
					case LeaseClosed:
						if !l.ClosedAt.Equal(now) || l.Reason != ev.reason {
							t.Errorf("closed at %v for %q, want %v for %q", l.ClosedAt, l.Reason, now, ev.reason)
						}
					}
				})
			}
		}
	}
}

func TestLeaseCompleted(t *testing.T) {
	l := leaseIn(t, testTerms(), LeaseRunning)
	end := testLeaseStart.Add(time.Hour)
	if !l.EndTime().Equal(end) || l.Expired(end.Add(-time.Millisecond)) || !l.Expired(end) {
		t.Fatalf("EndTime = %v, want %v", l.EndTime(), end)
	}
	if err := l.End(CloseCompleted, end.Add(-time.Millisecond)); !errors.Is(err, ErrBadTransition) {
		t.Errorf("End(completed) before the end = %v, want ErrBadTransition", err)
	}
	if err := l.End(CloseCompleted, end); err != nil || l.State != LeaseEnding {
		t.Errorf("End(completed) at the end = %v, %s", err, l.State)
	}
}

func TestLeaseTimeNeverGoesBack(t *testing.T) {
	l := leaseIn(t, testTerms(), LeaseStarting)
	t0 := testLeaseStart.Add(10 * time.Minute)
	if err := l.Start(t0); err != nil {
		t.Fatal(err)
	}
	if err := l.End(CloseProvider, t0.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(t0.Add(-2 * time.Hour)); err != nil {
		t.Fatal(err)
	}
	if !l.EndingAt.Equal(t0) || !l.ClosedAt.Equal(t0) {
		t.Errorf("ending at %v, closed at %v, want both %v", l.EndingAt, l.ClosedAt, t0)
	}
}

func TestLeaseText(t *testing.T) {
	for s := LeaseStarting; s <= LeaseClosed; s++ {
		b, err := s.MarshalText()
		var back LeaseState
		if err != nil || back.UnmarshalText(b) != nil || back != s {
			t.Errorf("LeaseState %d round trip = %q, %v, %d", s, b, err, back)
		}
	}
	for r := CloseReason(0); r <= CloseResold; r++ {
		b, err := r.MarshalText()
		var back CloseReason = 99
		if err != nil || back.UnmarshalText(b) != nil || back != r {
			t.Errorf("CloseReason %d round trip = %q, %v, %d", r, b, err, back)
		}
	}
	if _, err := ParseCloseReason("bored"); err == nil {
		t.Errorf("ParseCloseReason(bored) = %v", err)
	}
	if _, err := CloseReason(9).MarshalText(); err == nil {
		t.Error("CloseReason(9).MarshalText succeeded")
	}
	l := leaseIn(t, testTerms(), LeaseClosed)
	b, err := json.Marshal(struct {
		State  LeaseState
		Reason CloseReason
	}{l.State, l.Reason})
	if want := `{"State":"closed","Reason":"buyer-closed"}`; err != nil || string(b) != want {
		t.Errorf("json = %s, %v, want %s", b, err, want)
	}
	if _, err := NewLease(withTerms(testTerms(), func(l *proto.Lease) { l.Gpus = nil })); !errors.Is(err, ErrLeaseTerms) {
		t.Errorf("NewLease(no GPUs) = %v, want ErrLeaseTerms", err)
	}
}

// TestLeaseReceipts runs a lease's receipts and countersignatures as both
// sides see them, including a receipt that overtakes the countersignature
// of the one before and a final window cut short by an early close.
func TestLeaseReceipts(t *testing.T) {
	terms := testTerms()
	s := testLeaseStart
	at := func(m int) time.Time { return s.Add(time.Duration(m) * time.Minute) }
	l := leaseIn(t, terms, LeaseStarting)
	if err := l.Start(at(0)); err != nil {
		t.Fatal(err)
	}
	wantDue := func(now time.Time, start, end int, due bool) {
		t.Helper()
		w, ok := l.Due(now)
		if ok != due || !w.Start.Equal(at(start)) || !w.End.Equal(at(end)) {
			t.Errorf("Due(%v) = %v, %v, want [%v, %v), %v", now, w, ok, at(start), at(end), due)
		}
	}
	wantDue(at(5), 0, 10, false)
	wantDue(at(10), 0, 10, true)

	add := func(end int) (*proto.Receipt, []byte) {
		t.Helper()
		r := nextReceipt(terms, &l.Chain, at(end).UnixMilli())
		h := hashOf(r)
		if err := l.AddReceipt(r, h, at(end).Add(2*time.Second)); err != nil {
			t.Fatalf("AddReceipt(to %d min) = %v", end, err)
		}
		return r, h
	}
	cs := func(r *proto.Receipt, h []byte) *proto.Countersign {
		return &proto.Countersign{LeaseId: terms.Id, Seq: r.Seq, ReceiptHash: h, Buyer: terms.Buyer}
	}
	r1, h1 := add(10)
	wantDue(at(15), 10, 20, false)
	r2, h2 := add(20) // before the buyer countersigned r1
	if l.Chain.Seq != 2 || l.Countersigned.Seq != 0 {
		t.Fatalf("chain at %d, countersigned %d, want 2, 0", l.Chain.Seq, l.Countersigned.Seq)
	}
	if err := l.AddReceipt(r2, h2, at(21)); !errors.Is(err, ErrReceiptSeq) || l.Chain.Seq != 2 {
		t.Errorf("AddReceipt(replay) = %v, chain at %d", err, l.Chain.Seq)
	}

	if err := l.AddCountersign(cs(r1, h1), at(21)); err != nil || l.Countersigned.Seq != 1 || !l.CountersignedAt.Equal(at(21)) {
		t.Fatalf("AddCountersign(1) = %v, countersigned %d at %v", err, l.Countersigned.Seq, l.CountersignedAt)
	}
	if err := l.AddCountersign(cs(r1, h1), at(22)); err != nil || !l.CountersignedAt.Equal(at(21)) {
		t.Errorf("AddCountersign(1 again) = %v, countersigned at %v", err, l.CountersignedAt)
	}
	for name, c := range map[string]*proto.Countersign{
		"wrong hash":        cs(r2, h1),
		"same seq, other":   cs(r1, h2),
		"not held":          {LeaseId: terms.Id, Seq: 3, ReceiptHash: h2, Buyer: terms.Buyer},
		"other buyer":       {LeaseId: terms.Id, Seq: 2, ReceiptHash: h2, Buyer: terms.Provider},
		"other lease":       {LeaseId: "lease-2", Seq: 2, ReceiptHash: h2, Buyer: terms.Buyer},
		"seq 0":             {LeaseId: terms.Id, ReceiptHash: h2, Buyer: terms.Buyer},
		"no countersign at": nil,
	} {
		if err := l.AddCountersign(c, at(23)); !errors.Is(err, ErrCountersign) || l.Countersigned.Seq != 1 {
			t.Errorf("AddCountersign(%s) = %v, countersigned %d", name, err, l.Countersigned.Seq)
		}
	}
	if err := l.AddCountersign(cs(r2, h2), at(23)); err != nil || l.Countersigned.Seq != 2 || l.Countersigned.Cumulative != r2.CumulativeMicros || len(l.pending) != 0 {
		t.Fatalf("AddCountersign(2) = %v, countersigned %+v, pending %d", err, l.Countersigned, len(l.pending))
	}

	// The buyer closes at 25 minutes; the provider hands back at 26.
	if err := l.End(CloseBuyer, at(25)); err != nil {
		t.Fatal(err)
	}
	wantDue(at(25), 20, 30, false)
	if err := l.Close(at(26)); err != nil {
		t.Fatal(err)
	}
	wantDue(at(26), 20, 26, true)
	late := nextReceipt(terms, &l.Chain, at(30).UnixMilli())
	if err := l.AddReceipt(late, hashOf(late), at(31)); !errors.Is(err, ErrReceiptWindow) {
		t.Errorf("AddReceipt(past the close) = %v, want ErrReceiptWindow", err)
	}
	r3, _ := add(26)
	if w, ok := l.Due(at(60)); ok {
		t.Errorf("Due after the final receipt = %v, true", w)
	}
	if l.Chain.Seq != 3 || l.Chain.Cumulative != r3.CumulativeMicros || r3.CumulativeMicros != 2*2_000_000*26/60+1 {
		t.Errorf("chain = %+v, want 3 receipts, 26 minutes of 2 GPUs", l.Chain)
	}
}

func TestLeaseDueEdges(t *testing.T) {
	// Failed before it ran: nothing to bill, even past the agreed start.
	for _, failAt := range []time.Duration{-time.Minute, 30 * time.Minute} {
		l := leaseIn(t, testTerms(), LeaseStarting)
		if w, ok := l.Due(testLeaseStart.Add(20 * time.Minute)); ok || !w.Start.IsZero() {
			t.Errorf("Due(starting) = %v, %v", w, ok)
		}
		if err := l.Fail(testLeaseStart.Add(failAt)); err != nil {
			t.Fatal(err)
		}
		if w, ok := l.Due(testLeaseStart.Add(time.Hour)); ok || !w.Start.IsZero() {
			t.Errorf("Due(failed at %v without running) = %v, %v", failAt, w, ok)
		}
	}
	// Failed while running: the time until the failure is billed at once.
	l := leaseIn(t, testTerms(), LeaseRunning)
	if err := l.Fail(testLeaseStart.Add(15 * time.Minute)); err != nil {
		t.Fatal(err)
	}
	if w, ok := l.Due(testLeaseStart.Add(15 * time.Minute)); !ok || !w.End.Equal(testLeaseStart.Add(10*time.Minute)) {
		t.Errorf("Due(failed at 15 min) = %v, %v, want the first window", w, ok)
	}
	// Ran to the end: six windows, then nothing.
	terms := testTerms()
	l = leaseIn(t, terms, LeaseRunning)
	for i := range 6 {
		w, ok := l.Due(testLeaseStart.Add(2 * time.Hour))
		if !ok {
			t.Fatalf("window %d not due", i+1)
		}
		r := nextReceipt(terms, &l.Chain, w.End.UnixMilli())
		if err := l.AddReceipt(r, hashOf(r), testLeaseStart.Add(2*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if w, ok := l.Due(testLeaseStart.Add(2 * time.Hour)); ok {
		t.Errorf("Due after the last window = %v", w)
	}
	if l.Chain.Cumulative != 4_000_000 {
		t.Errorf("two GPU-hours cost %d, want 4000000", l.Chain.Cumulative)
	}
}

func TestUnpaid(t *testing.T) {
	terms := testTerms() // ten-minute windows: the default grace is 30 minutes
	s := testLeaseStart
	tests := []struct {
		last, now time.Time
		grace     time.Duration
		want      bool
	}{
		{time.Time{}, s.Add(30 * time.Minute), 0, false},
		{time.Time{}, s.Add(30*time.Minute + time.Millisecond), 0, true},
		{s.Add(-time.Hour), s.Add(29 * time.Minute), 0, false}, // before the start counts from the start
		{s.Add(20 * time.Minute), s.Add(50 * time.Minute), 0, false},
		{s.Add(20 * time.Minute), s.Add(51 * time.Minute), 0, true},
		{s.Add(20 * time.Minute), s.Add(26 * time.Minute), 5 * time.Minute, true},
		{s.Add(20 * time.Minute), s.Add(25 * time.Minute), 5 * time.Minute, false},
	}
	for _, tt := range tests {
		if got := Unpaid(terms, tt.last, tt.now, tt.grace); got != tt.want {
			t.Errorf("Unpaid(last %v, now %v, grace %v) = %v, want %v", tt.last, tt.now, tt.grace, got, tt.want)
		}
	}
	if got, want := UnpaidDeadline(terms, time.Time{}, 0), s.Add(30*time.Minute); !got.Equal(want) {
		t.Errorf("UnpaidDeadline = %v, want %v", got, want)
	}

	l := leaseIn(t, terms, LeaseRunning)
	if l.Unpaid(s.Add(24*time.Hour), 0) {
		t.Error("Lease.Unpaid with nothing billed = true")
	}
	r := nextReceipt(terms, nil, s.Add(10*time.Minute).UnixMilli())
	h := hashOf(r)
	if err := l.AddReceipt(r, h, s.Add(10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if l.Unpaid(s.Add(30*time.Minute), 0) || !l.Unpaid(s.Add(31*time.Minute), 0) {
		t.Error("Lease.Unpaid: want unpaid 30 minutes after the start, not before")
	}
	if err := l.AddCountersign(&proto.Countersign{LeaseId: terms.Id, Seq: 1, ReceiptHash: h, Buyer: terms.Buyer}, s.Add(12*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if l.Unpaid(s.Add(24*time.Hour), 0) {
		t.Error("Lease.Unpaid with everything countersigned = true")
	}
	if err := l.End(CloseUnpaid, s.Add(31*time.Minute)); err != nil || l.Reason != CloseUnpaid {
		t.Errorf("End(unpaid) = %v, reason %s", err, l.Reason)
	}
}
