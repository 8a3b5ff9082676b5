package main

import (
	"testing"
	"time"

	"github.com/suanli/suanli/node/api"
)

func TestFreeSummary(t *testing.T) {
	at := func(h int) time.Time { return time.Date(2026, 12, 3, h, 4, 0, 0, time.UTC) }
	for _, c := range []struct {
		o    api.OfferView
		want string
	}{
		{api.OfferView{FreeGPUs: 8}, "8"},
		{api.OfferView{FreeGPUs: 6, Capacity: []api.CapacityView{{Releases: []api.ReleaseView{{At: at(15), Count: 2}}}}}, "6 (2 at 12-03 15:04Z)"},
		{api.OfferView{Capacity: []api.CapacityView{
			{Releases: []api.ReleaseView{{At: at(17), Count: 4}}},
			{Releases: []api.ReleaseView{{At: at(16), Count: 1}, {At: at(18), Count: 3}}},
		}}, "0 (1 at 12-03 16:04Z)"},
	} {
		if got := freeSummary(c.o); got != c.want {
			t.Errorf("freeSummary(%+v) = %q, want %q", c.o, got, c.want)
		}
	}
}
