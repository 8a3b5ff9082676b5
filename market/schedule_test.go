package market

import (
	"errors"
	"testing"
	"time"

	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/proto"
)

func win(from, to, bp uint32) *proto.PriceWindow {
	return &proto.PriceWindow{FromMinute: from, ToMinute: to, BasisPoints: bp}
}

func TestValidateSchedule(t *testing.T) {
	good := []*proto.PriceWindow{win(0, 480, 7000), win(480, 1440, 10_000)}
	if err := ValidateSchedule(good, 480); err != nil {
		t.Fatalf("ValidateSchedule(good) = %v", err)
	}
	if err := ValidateSchedule(nil, 0); err != nil {
		t.Errorf("an empty schedule is one price: %v", err)
	}
	for name, c := range map[string]struct {
		ws  []*proto.PriceWindow
		off int32
	}{
		"a gap":           {[]*proto.PriceWindow{win(0, 480, 7000), win(500, 1440, 10_000)}, 0},
		"an overlap":      {[]*proto.PriceWindow{win(0, 480, 7000), win(400, 1440, 10_000)}, 0},
		"short of 24:00":  {[]*proto.PriceWindow{win(0, 480, 7000), win(480, 1400, 10_000)}, 0},
		"not from 00:00":  {[]*proto.PriceWindow{win(60, 1440, 7000)}, 0},
		"free":            {[]*proto.PriceWindow{win(0, 1440, 0)}, 0},
		"an empty window": {[]*proto.PriceWindow{win(0, 0, 7000), win(0, 1440, 7000)}, 0},
		"beyond the day":  {[]*proto.PriceWindow{win(0, 1500, 7000)}, 0},
		"offset":          {good, 15 * 60},
	} {
		if err := ValidateSchedule(c.ws, c.off); !errors.Is(err, ErrSchedule) {
			t.Errorf("%s: ValidateSchedule = %v, want ErrSchedule", name, err)
		}
	}
	ws, err := ParseSchedule("00:00-08:00=-30%,08:00-24:00=0%")
	if err != nil || len(ws) != 2 || ws[0].BasisPoints != 7000 || ws[1].BasisPoints != 10_000 || ws[1].ToMinute != 1440 {
		t.Fatalf("ParseSchedule = %v, %v", ws, err)
	}
	for _, bad := range []string{"00:00-08:00=-30%", "00:00-25:00=0%", "night=-30%", "00:00-24:00=-100%", "00:00-12:00=0%,11:00-24:00=0%"} {
		if _, err := ParseSchedule(bad); !errors.Is(err, ErrSchedule) {
			t.Errorf("ParseSchedule(%q) = %v, want ErrSchedule", bad, err)
		}
	}
}

func TestScheduledPrice(t *testing.T) {
	ws := []*proto.PriceWindow{win(0, 480, 7000), win(480, 1440, 10_000)}
	// UTC+08:00: local 07:59 is 23:59 UTC the day before.
	night := time.Date(2026, 12, 1, 23, 59, 0, 0, time.UTC)
	if p := ScheduledPrice(2_000_000, ws, 480, night); p != 1_400_000 {
		t.Errorf("price at local 07:59 = %d, want 1400000", p)
	}
	at, p, ok := NextPriceChange(2_000_000, ws, 480, night)
	if !ok || p != 2_000_000 || !at.Equal(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("NextPriceChange = %s, %d, %v; want 2.00 at local 08:00", at, p, ok)
	}
	if _, _, ok := NextPriceChange(2_000_000, nil, 0, night); ok {
		t.Error("NextPriceChange without a schedule says the price changes")
	}
}

// TestReceiptsAcrossPriceBoundary: a 2-minute lease billed every minute
// from local 07:59:30 with night prices until 08:00 has three windows, the
// first ending at the boundary at the night price; the honest chain
// verifies and a receipt charging the day price for the night is refused.
func TestReceiptsAcrossPriceBoundary(t *testing.T) {
	start := time.Date(2026, 12, 1, 23, 59, 30, 0, time.UTC) // 07:59:30 at UTC+08:00
	terms := withTerms(testTerms(), func(l *proto.Lease) {
		l.StartUnixMs, l.DurationS, l.BillingIntervalS = start.UnixMilli(), 120, 60
		l.Schedule, l.UtcOffsetMinutes = []*proto.PriceWindow{win(0, 480, 5000), win(480, 1440, 10_000)}, 480
	})
	if err := ValidateTerms(terms); err != nil {
		t.Fatal(err)
	}
	wantEnds := []time.Duration{30 * time.Second, 60 * time.Second, 120 * time.Second}
	wantAmounts := []int64{16_667, 33_334, 66_667} // 2 GPUs at 2.00: 30 s at half price, 30 s and 60 s at full
	var prev *ReceiptState
	for i, d := range wantEnds {
		w, ok := NextWindow(terms, prev)
		if !ok || !w.End.Equal(start.Add(d)) {
			t.Fatalf("window %d = %v, %v; want to end at +%s", i+1, w, ok, d)
		}
		r := rebill(terms, prev, nextReceipt(terms, prev, w.End.UnixMilli()))
		if r.AmountMicros != wantAmounts[i] {
			t.Errorf("receipt %d charges %d, want %d", i+1, r.AmountMicros, wantAmounts[i])
		}
		if i == 0 {
			dear := gproto.Clone(r).(*proto.Receipt)
			dear.AmountMicros, dear.CumulativeMicros = 33_334, 33_334
			if err := VerifyNext(terms, prev, dear, hashOf(dear), time.UnixMilli(r.CreatedUnixMs)); !errors.Is(err, ErrReceiptAmount) {
				t.Errorf("the day price for the night: VerifyNext = %v, want ErrReceiptAmount", err)
			}
		}
		h := hashOf(r)
		if err := VerifyNext(terms, prev, r, h, time.UnixMilli(r.CreatedUnixMs)); err != nil {
			t.Fatalf("receipt %d: %v", i+1, err)
		}
		st := StateOf(r, h)
		prev = &st
	}
	if _, ok := NextWindow(terms, prev); ok {
		t.Error("a window after the lease's end")
	}
	both := withTerms(testTerms(), func(l *proto.Lease) {
		l.Schedule, l.BillingIncrementS = []*proto.PriceWindow{win(0, 1440, 9000)}, 60
	})
	if err := ValidateTerms(both); err == nil {
		t.Error("ValidateTerms accepted a schedule with a billing increment")
	}
}

func FuzzParseSchedule(f *testing.F) {
	f.Add("00:00-08:00=-30%,08:00-24:00=0%")
	f.Add("00:00-24:00=+900%")
	f.Add("00:00-12:00=0%,11:00-24:00=0%")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		ws, err := ParseSchedule(s)
		if err != nil {
			if !errors.Is(err, ErrSchedule) {
				t.Fatalf("ParseSchedule(%q) = %v, not ErrSchedule", s, err)
			}
			return
		}
		if err := ValidateSchedule(ws, 0); err != nil {
			t.Fatalf("ParseSchedule(%q) gave an invalid schedule: %v", s, err)
		}
		for m := int64(0); m < 1440; m += 7 {
			if p := ScheduledPrice(1_000_000, ws, 0, time.UnixMilli(m*60_000)); p <= 0 {
				t.Fatalf("price %d at minute %d", p, m)
			}
		}
	})
}
