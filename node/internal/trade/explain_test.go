package trade

import (
	"strings"
	"testing"
	"time"

	"github.com/suanli/suanli/market"
)

// A reserved bid passed over because the ask's blocks start later says
// both starts, not just "start".
func TestPassDetailStart(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	bid := market.Order{Side: market.Bid, Start: t0, Duration: time.Hour}
	ask := market.Order{Side: market.Ask, Start: t0.Add(30 * time.Minute)}
	got := passDetail(bid, market.PassedOver{Reason: market.PassStart, Example: ask})
	for _, want := range []string{"2026-12-04T10:30:00Z", "2026-12-04T10:00:00Z"} {
		if !strings.Contains(got, want) {
			t.Errorf("passDetail(start) = %q, want it to name %s", got, want)
		}
	}
}
