package market

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/suanli/suanli/proto"
)

// Time-of-day prices: a provider's schedule prices each part of its day
// (say 00:00–08:00 at 30% off) as basis points of the base price. A lease
// carries the schedule in its terms; its billing windows also end at the
// schedule's boundaries, so each window has one price, and each receipt
// charges its window at that price.

// ErrSchedule is returned for a price schedule that does not hold.
var ErrSchedule = errors.New("market: bad price schedule")

const (
	minutesPerDay      = 24 * 60
	maxScheduleWindows = 48
	// MaxScheduleBP bounds a window's price: ten times the base.
	MaxScheduleBP = 100_000
)

// ValidateSchedule checks that windows cover the whole day, in order,
// without gaps or overlaps, each priced above zero; an empty schedule is
// one price all day. offset is the day's UTC offset in minutes.
func ValidateSchedule(ws []*proto.PriceWindow, offset int32) error {
	if offset < -14*60 || offset > 14*60 {
		return fmt.Errorf("%w: UTC offset %d minutes", ErrSchedule, offset)
	}
	if len(ws) == 0 {
		return nil
	}
	if len(ws) > maxScheduleWindows {
		return fmt.Errorf("%w: %d windows, at most %d", ErrSchedule, len(ws), maxScheduleWindows)
	}
	at := uint32(0)
	for i, w := range ws {
		switch {
		case w == nil:
			return fmt.Errorf("%w: window %d missing", ErrSchedule, i)
		case w.FromMinute < at:
			return fmt.Errorf("%w: window %d from %s overlaps the one before", ErrSchedule, i, clock(w.FromMinute))
		case w.FromMinute > at:
			return fmt.Errorf("%w: %s–%s is not covered", ErrSchedule, clock(at), clock(w.FromMinute))
		case w.ToMinute <= w.FromMinute || w.ToMinute > minutesPerDay:
			return fmt.Errorf("%w: window %s–%s", ErrSchedule, clock(w.FromMinute), clock(w.ToMinute))
		case w.BasisPoints == 0 || w.BasisPoints > MaxScheduleBP:
			return fmt.Errorf("%w: window %s–%s at %d bp", ErrSchedule, clock(w.FromMinute), clock(w.ToMinute), w.BasisPoints)
		}
		at = w.ToMinute
	}
	if at != minutesPerDay {
		return fmt.Errorf("%w: %s–24:00 is not covered", ErrSchedule, clock(at))
	}
	return nil
}

func clock(m uint32) string { return fmt.Sprintf("%02d:%02d", m/60, m%60) }

// ParseSchedule parses "HH:MM-HH:MM=±N%,…" (each window's price relative to
// the base: "-30%" is 30% off, "+20%" 20% more, "0%" the base), the windows
// covering the day in order.
func ParseSchedule(s string) ([]*proto.PriceWindow, error) {
	var out []*proto.PriceWindow
	for _, part := range strings.Split(s, ",") {
		span, pct, ok := strings.Cut(strings.TrimSpace(part), "=")
		from, to, ok2 := strings.Cut(span, "-")
		if !ok || !ok2 || !strings.HasSuffix(pct, "%") {
			return nil, fmt.Errorf("%w: %q: want HH:MM-HH:MM=±N%%", ErrSchedule, part)
		}
		f, err1 := parseClock(from)
		t, err2 := parseClock(to)
		p, err3 := strconv.Atoi(strings.TrimSuffix(pct, "%"))
		if err1 != nil || err2 != nil || err3 != nil || p <= -100 || p > 900 {
			return nil, fmt.Errorf("%w: %q", ErrSchedule, part)
		}
		out = append(out, &proto.PriceWindow{FromMinute: f, ToMinute: t, BasisPoints: uint32(10_000 + 100*p)})
	}
	return out, ValidateSchedule(out, 0)
}

func parseClock(s string) (uint32, error) {
	h, m, ok := strings.Cut(s, ":")
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if !ok || err1 != nil || err2 != nil || hh < 0 || mm < 0 || mm > 59 || hh*60+mm > minutesPerDay {
		return 0, fmt.Errorf("bad time %q", s)
	}
	return uint32(hh*60 + mm), nil
}

// minuteOfDay is t's minute in the provider's day.
func minuteOfDay(ms int64, offset int32) uint32 {
	local := ms + int64(offset)*60_000
	day := local % (minutesPerDay * 60_000)
	if day < 0 {
		day += minutesPerDay * 60_000
	}
	return uint32(day / 60_000)
}

// windowAt is the schedule's window holding ms.
func windowAt(ws []*proto.PriceWindow, offset int32, ms int64) *proto.PriceWindow {
	m := minuteOfDay(ms, offset)
	i, _ := slices.BinarySearchFunc(ws, m, func(w *proto.PriceWindow, m uint32) int {
		if w.ToMinute <= m {
			return -1
		}
		if w.FromMinute > m {
			return 1
		}
		return 0
	})
	if i < len(ws) {
		return ws[i]
	}
	return ws[len(ws)-1]
}

// ScheduledPrice is base priced by the schedule at t (base itself without
// a schedule), rounded up to the micro-unit.
func ScheduledPrice(base int64, ws []*proto.PriceWindow, offset int32, t time.Time) int64 {
	if len(ws) == 0 {
		return base
	}
	return mulBP(base, windowAt(ws, offset, t.UnixMilli()).BasisPoints)
}

func mulBP(v int64, bp uint32) int64 { return (v*int64(bp) + 9_999) / 10_000 }

// NextPriceChange is the first time after t the schedule's price changes,
// and the price then; ok is false without a schedule or change.
func NextPriceChange(base int64, ws []*proto.PriceWindow, offset int32, t time.Time) (at time.Time, price int64, ok bool) {
	if len(ws) == 0 {
		return time.Time{}, 0, false
	}
	now := ScheduledPrice(base, ws, offset, t)
	ms := t.UnixMilli()
	for range 2 * len(ws) {
		ms = nextBoundaryMs(ws, offset, ms)
		if p := ScheduledPrice(base, ws, offset, time.UnixMilli(ms)); p != now {
			return time.UnixMilli(ms).UTC(), p, true
		}
	}
	return time.Time{}, 0, false
}

// nextBoundaryMs is the first window boundary strictly after ms.
func nextBoundaryMs(ws []*proto.PriceWindow, offset int32, ms int64) int64 {
	w := windowAt(ws, offset, ms)
	local := ms + int64(offset)*60_000
	dayStart := local - ((local%(minutesPerDay*60_000))+minutesPerDay*60_000)%(minutesPerDay*60_000)
	end := dayStart + int64(w.ToMinute)*60_000 - int64(offset)*60_000
	if end <= ms { // rounding at the day's edge
		end += minutesPerDay * 60_000
	}
	return end
}

// isBoundary reports whether ms is a boundary of the lease's schedule.
func isBoundary(terms *proto.Lease, ms int64) bool {
	if len(terms.Schedule) == 0 || ms%60_000 != 0 {
		return false
	}
	m := minuteOfDay(ms, terms.UtcOffsetMinutes)
	for _, w := range terms.Schedule {
		if w.FromMinute == m {
			return true
		}
	}
	return false
}

// ReceiptTotal is a lease's cumulative charge after a receipt for a window
// starting at windowStart with gpuMillis, the chain having charged prevMicros
// for prevGPUMillis before it: with a schedule, the window's GPU time at the
// window's price on top of prevMicros; without, LeaseCharge of the
// cumulative time.
func ReceiptTotal(terms *proto.Lease, prevMicros int64, prevGPUMillis, gpuMillis uint64, windowStart int64) (int64, error) {
	if len(terms.GetSchedule()) == 0 {
		return LeaseCharge(terms, prevGPUMillis+gpuMillis)
	}
	c, err := Charge(ScheduledPrice(terms.PriceMicros, terms.Schedule, terms.UtcOffsetMinutes, time.UnixMilli(windowStart)), gpuMillis)
	if err != nil {
		return 0, err
	}
	return prevMicros + c, nil
}
