package node_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
)

// TestStatusIsolation: a provider's status says what its executors
// enforce; one allowing only reserve runs no buyer code (the control).
func TestStatusIsolation(t *testing.T) {
	provider, buyer := startLeaseNet(t, node.WithExecutors("reserve", "process"))
	ctx := marketCtx(t)
	st, err := provider.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	iso := st.Isolation
	if iso == nil || iso.Level != api.IsolationProcess || len(iso.Executors) != 1 || iso.Executors[0].Executor != "process" {
		t.Fatalf("isolation = %+v, want the process level", iso)
	}
	if !slices.ContainsFunc(iso.Executors[0].Enforced, func(s string) bool { return strings.Contains(s, "never the daemon's uid") }) {
		t.Errorf("enforced = %q, want the uid stated", iso.Executors[0].Enforced)
	}
	if st, err := buyer.Status(ctx); err != nil || st.Isolation != nil {
		t.Errorf("a buyer's status shows isolation %+v (%v)", st.Isolation, err)
	}
	// The offer states the level, and a buyer filters on it.
	waitFor(t, ctx, "the offer's isolation level", func() (bool, string) {
		os, err := buyer.Offers(ctx, api.OfferQuery{MinIsolation: api.IsolationProcess})
		return err == nil && len(os) == 1 && os[0].Isolation == api.IsolationProcess, sprint(os, err)
	})
	if os, err := buyer.Offers(ctx, api.OfferQuery{MinIsolation: api.IsolationContainer}); err != nil || len(os) != 0 {
		t.Errorf("offers of at least container = %+v, %v; want none", os, err)
	}
	if _, err := buyer.Offers(ctx, api.OfferQuery{MinIsolation: "sandbox"}); err == nil {
		t.Error("a nonsense min_isolation was accepted")
	}
	reserveOnly, _ := startLeaseNet(t)
	if st, err := reserveOnly.Status(ctx); err != nil || st.Isolation == nil || st.Isolation.Level != api.IsolationNone {
		t.Errorf("reserve-only isolation = %+v (%v), want none", st.Isolation, err)
	}
}
