package node

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/internal/history"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestHistoryPersists records fills, restarts the node on its repo and
// reads the same history back, oldest first, bounded by since and limit.
func TestHistoryPersists(t *testing.T) {
	repo := filepath.Join(t.TempDir(), "n")
	open := func() *Node {
		n, err := New(WithRepo(repo), WithAutoInit(), WithListen("/ip4/127.0.0.1/tcp/0"), WithAPI(""), WithLogger(quietLogger()), WithoutGPU())
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	n := open()
	const mkt = "nvidia-h100-sxm5-80gb"
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for i := range 10 {
		f := market.Fill{ID: "fill" + string(rune('a'+i)), Market: mkt, Currency: "USD", Price: int64(2_000_000 + i*10_000), Quantity: uint32(i + 1), Time: t0.Add(time.Duration(i) * time.Minute),
			LeaseType: market.LeaseType(1 + i%3)}
		if i == 0 { // a point stored before lease types were kept
			p := history.Point{Price: f.Price, Count: f.Quantity, Index: 2_000_000}
			if err := n.store.PutHistory(f.Market, f.Currency, f.Time, f.ID, p.Encode()[:history.PointLen]); err != nil {
				t.Fatal(err)
			}
			continue
		}
		n.recordHistory(f, int64(2_000_000+i*5_000))
	}
	// Another market and currency are kept apart.
	n.recordHistory(market.Fill{ID: "other", Market: "nvidia-a100-sxm4-40gb", Currency: "USD", Price: 1, Quantity: 1, Time: t0}, 0)
	n.recordHistory(market.Fill{ID: "cny", Market: mkt, Currency: "CNY", Price: 1, Quantity: 1, Time: t0}, 0)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n = open()
	defer n.Close()
	ctx := context.Background()
	h, err := n.History(ctx, mkt, "", api.HistoryQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Points) != 10 || h.Currency != "USD" {
		t.Fatalf("History after restart = %d points in %s, want 10 in USD", len(h.Points), h.Currency)
	}
	for i, p := range h.Points {
		want := t0.Add(time.Duration(i) * time.Minute)
		if !p.Time.Equal(want) || p.PriceMicros != int64(2_000_000+i*10_000) || p.Count != uint32(i+1) || p.IndexMicros != int64(2_000_000+i*5_000) {
			t.Errorf("point %d = %+v, want time %v price %d count %d", i, p, want, 2_000_000+i*10_000, i+1)
		}
	}
	if h.Points[0].Price != "2.00" {
		t.Errorf("point 0 price = %q, want 2.00", h.Points[0].Price)
	}
	// Each point keeps its fill's lease type; the old point has none.
	for i, p := range h.Points {
		want := market.LeaseType(1 + i%3).String()
		if i == 0 {
			want = ""
		}
		if p.LeaseType != want {
			t.Errorf("point %d lease type = %q, want %q", i, p.LeaseType, want)
		}
	}
	h, err = n.History(ctx, mkt, "USD", api.HistoryQuery{Limit: 3})
	if err != nil || len(h.Points) != 3 || h.Points[0].Fill != "fillh" || h.Points[2].Fill != "fillj" {
		t.Errorf("History(limit 3) = %+v, %v; want the newest 3, oldest first", h.Points, err)
	}
	h, err = n.History(ctx, mkt, "USD", api.HistoryQuery{Since: t0.Add(8 * time.Minute)})
	if err != nil || len(h.Points) != 2 {
		t.Errorf("History(since 8m) = %d points, %v; want 2", len(h.Points), err)
	}
	h, err = n.History(ctx, mkt, "CNY", api.HistoryQuery{})
	if err != nil || len(h.Points) != 1 || h.Points[0].Index != "" {
		t.Errorf("History(CNY) = %+v, %v; want one point without index", h.Points, err)
	}
	for _, bad := range []struct {
		mkt, cur string
		q        api.HistoryQuery
	}{{"", "", api.HistoryQuery{}}, {mkt, "XXX", api.HistoryQuery{}}, {mkt, "", api.HistoryQuery{Limit: -1}}} {
		if _, err := n.History(ctx, bad.mkt, bad.cur, bad.q); !errors.Is(err, api.ErrBadRequest) {
			t.Errorf("History(%q, %q, %+v) error = %v, want bad request", bad.mkt, bad.cur, bad.q, err)
		}
	}
}

// FuzzConfigSet: any key and value either leave the config unchanged with
// a bad-request error or give a config that validates and reads back.
func FuzzConfigSet(f *testing.F) {
	for _, seed := range [][2]string{
		{"region", "CN-NM"}, {"region", "guangzhou"}, {"price", "1.39"}, {"price", "-1"}, {"currency", "CNY"},
		{"api", "127.0.0.1:5001"}, {"api", "0.0.0.0:1"}, {"api", "unix:/tmp/s"}, {"listen", "/ip4/127.0.0.1/tcp/0"},
		{"bootstrap", "/ip4/127.0.0.1/tcp/1"}, {"gpu_sim", "dgxh100"}, {"colour", "red"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, key, value string) {
		c := DefaultConfig()
		before := c
		err := c.Set(key, []string{value})
		if err != nil {
			if !errors.Is(err, api.ErrBadRequest) {
				t.Errorf("Set(%q, %q) = %v, want a bad request", key, value, err)
			}
			if c.Region != before.Region || c.Price != before.Price || c.API != before.API || c.Currency != before.Currency || c.GPUSim != before.GPUSim {
				t.Errorf("Set(%q, %q) failed but changed the config", key, value)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Errorf("Set(%q, %q) accepted a config that does not validate: %v", key, value, err)
		}
		if got, _ := c.Get(key); len(got) != 1 || got[0] != value {
			t.Errorf("Get(%q) after Set = %q, want [%q]", key, got, value)
		}
	})
}
