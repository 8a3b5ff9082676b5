package lease

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/internal/leases"
	"github.com/suanli/suanli/proto"
)

// TestOthersReads: what preemption, credit and resale read and mark of
// the leases (others.go), each filter held to its rows: only this
// provider's running leases in the market are preemptible, a lease is
// preempted once and stored so, the credit scan visits the buyer's
// provided leases in the currency but the one excepted, and a handover
// refuses a lease that is not running.
func TestOthersReads(t *testing.T) {
	clock := clockwork.NewFakeClockAt(t0)
	prov, buyer := newParty(t, clock, 0), newParty(t, clock, 0)
	const mkt = "nvidia-h100-sxm5-80gb"
	put := func(id string, role market.Role, s state, edit func(*proto.Lease)) {
		lt := terms(id, prov, buyer, proto.LeaseType_LEASE_TYPE_SPOT)
		if edit != nil {
			edit(lt)
		}
		prov.put(t, lt, role, s)
	}
	put("spot", market.RoleProvider, running, nil)
	put("od", market.RoleProvider, running, func(l *proto.Lease) { l.LeaseType = proto.LeaseType_LEASE_TYPE_ON_DEMAND })
	put("closed", market.RoleProvider, closed, nil)
	put("bought", market.RoleBuyer, running, nil)
	put("elsewhere", market.RoleProvider, running, func(l *proto.Lease) { l.Market = "nvidia-a100-sxm4-40gb" })
	put("cny", market.RoleProvider, running, func(l *proto.Lease) { l.Currency = "CNY" })

	ids := func(ps []market.Preemptible) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.ID)
		}
		slices.Sort(out)
		return out
	}
	if got, want := ids(prov.m.Preemptible(mkt)), []string{"cny", "od", "spot"}; !slices.Equal(got, want) {
		t.Errorf("Preemptible(%s) = %v, want %v", mkt, got, want)
	}

	at := t0.Add(time.Minute)
	p, ok := prov.m.MarkPreempted("spot", at, "outbid")
	if !ok || p.Peer != buyer.h.ID() || p.Stop == nil || p.Poke == nil {
		t.Fatalf("MarkPreempted(spot) = %+v, %v; want the buyer, a Stop and a Poke", p, ok)
	}
	if _, ok := prov.m.MarkPreempted("spot", at, "again"); ok {
		t.Error("a lease was preempted twice")
	}
	for _, id := range []string{"closed", "unknown"} {
		if _, ok := prov.m.MarkPreempted(id, at, ""); ok {
			t.Errorf("MarkPreempted(%s) = ok, want refused", id)
		}
	}
	if got, want := ids(prov.m.Preemptible(mkt)), []string{"cny", "od"}; !slices.Equal(got, want) {
		t.Errorf("after the preemption Preemptible = %v, want %v", got, want)
	}
	recs, err := leases.Records(prov.st)
	if err != nil || !recs["spot"].PreemptAt.Equal(at) || recs["spot"].Note != "outbid" {
		t.Errorf("stored record of spot = %+v, %v; want preempted at %s, noted", recs["spot"], err, at)
	}

	var seen []string
	if err := prov.m.EachProvided(buyer.h.ID(), "USD", "od", func(l *market.Lease) error {
		seen = append(seen, l.Terms.Id)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(seen)
	if want := []string{"closed", "elsewhere", "spot"}; !slices.Equal(seen, want) {
		t.Errorf("EachProvided(buyer, USD, but od) visited %v, want %v", seen, want)
	}
	stop := errors.New("stop")
	n := 0
	if err := prov.m.EachProvided(buyer.h.ID(), "USD", "", func(*market.Lease) error { n++; return stop }); err != stop || n != 1 {
		t.Errorf("EachProvided with a failing add = %v after %d visits, want its error after 1", err, n)
	}

	if s, err := prov.m.Snapshot("bought"); err != nil || s.Role != market.RoleBuyer || s.State != market.LeaseRunning || s.Peer != prov.h.ID() { // a buyer's counterparty is the provider
		t.Errorf("Snapshot(bought) = %+v, %v", s, err)
	}
	for id, label := range map[string]string{"closed": "ended", "unknown": "unknown-lease"} {
		_, err := prov.m.HandOver(id, func(time.Time) (time.Time, string, error) {
			t.Errorf("HandOver(%s) called its fn", id)
			return at, "", nil
		})
		var re *market.ResaleError
		if !errors.As(err, &re) || re.Label != label {
			t.Errorf("HandOver(%s) = %v, want a resale error %q", id, err, label)
		}
	}
}

// TestOthersLockOrder: the reads of others.go, the API's views and the
// marks, all at once, take the manager's lock before a run's and never
// deadlock (run with -race).
func TestOthersLockOrder(t *testing.T) {
	clock := clockwork.NewFakeClockAt(t0)
	prov, buyer := newParty(t, clock, 0), newParty(t, clock, 0)
	const mkt = "nvidia-h100-sxm5-80gb"
	for _, id := range []string{"a", "b", "c", "d"} {
		prov.put(t, terms(id, prov, buyer, proto.LeaseType_LEASE_TYPE_SPOT), market.RoleProvider, running)
	}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for range 200 {
				switch i {
				case 0:
					prov.m.Preemptible(mkt)
				case 1:
					prov.m.EachProvided(buyer.h.ID(), "USD", "", func(*market.Lease) error { return nil })
				case 2:
					prov.m.Leases()
					prov.m.Snapshot("a")
				case 3:
					prov.m.MarkPreempted("b", t0.Add(time.Minute), "")
					prov.m.Party("c")
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the leases' reads deadlocked")
	}
}
