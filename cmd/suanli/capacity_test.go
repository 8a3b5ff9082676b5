package main

import (
	"testing"
	"time"

	"github.com/suanli/suanli/node"
)

func TestFreeSummary(t *testing.T) {
	at := func(h int) time.Time { return time.Date(2026, 12, 3, h, 4, 0, 0, time.UTC) }
	for _, c := range []struct {
		o    node.OfferView
		want string
	}{
		{node.OfferView{FreeGPUs: 8}, "8"},
		{node.OfferView{FreeGPUs: 6, Capacity: []node.CapacityView{{Releases: []node.ReleaseView{{At: at(15), Count: 2}}}}}, "6 (2 at 12-03 15:04Z)"},
		{node.OfferView{Capacity: []node.CapacityView{
			{Releases: []node.ReleaseView{{At: at(17), Count: 4}}},
			{Releases: []node.ReleaseView{{At: at(16), Count: 1}, {At: at(18), Count: 3}}},
		}}, "0 (1 at 12-03 16:04Z)"},
	} {
		if got := freeSummary(c.o); got != c.want {
			t.Errorf("freeSummary(%+v) = %q, want %q", c.o, got, c.want)
		}
	}
}
