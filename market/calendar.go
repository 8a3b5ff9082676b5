package market

import (
	"fmt"
	"strings"
	"time"

	"github.com/suanli/suanli/proto"
)

// The GPU calendar's rules: when a forward lease starts, and which of a
// provider's GPUs are free for one. The node keeps the blocks themselves.

// ParseStart reads a forward start: RFC 3339, or "+D" after now.
func ParseStart(s string, now time.Time) (time.Time, error) {
	if d, ok := strings.CutPrefix(s, "+"); ok {
		dd, err := time.ParseDuration(d)
		if err != nil || dd < 0 {
			return time.Time{}, fmt.Errorf("%q: want RFC 3339 or +DURATION", s)
		}
		return now.Add(dd), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q: want RFC 3339 or +DURATION", s)
	}
	return t, nil
}

// LeaseStartFor is when a trade of the bid starts: its block's start
// when that is ahead, else now.
func LeaseStartFor(bid *Order, now time.Time) time.Time {
	if !bid.Start.IsZero() && bid.Start.After(now) {
		return bid.Start
	}
	return now
}

// WantStart is when the lease of a take by o must start, when that is
// fixed: a bid's forward block, or the resting bid's block a provider
// takes; zero when the lease starts now. It is to the millisecond, as
// lease terms carry it.
func WantStart(o *Order, blockStart, now time.Time) time.Time {
	if o.Side == Bid && !o.Start.IsZero() && o.Start.After(now) {
		return time.UnixMilli(o.Start.UnixMilli())
	}
	if blockStart.After(now) {
		return time.UnixMilli(blockStart.UnixMilli())
	}
	return time.Time{}
}

// FreeIn lists the offer's GPUs in mkt that busy does not hold, in the
// offer's order: what a provider can lease in a market, busy being the
// holds now (a spot or on-demand take) or over a forward block's span.
func FreeIn(o *proto.Offer, mkt string, busy map[string]bool) []string {
	var free []string
	for _, g := range o.GetGpus() {
		if g.Market == mkt && !busy[g.Uuid] {
			free = append(free, g.Uuid)
		}
	}
	return free
}
