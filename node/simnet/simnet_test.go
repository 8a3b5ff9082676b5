package simnet

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"
)

// TestRunSmall runs a 12-node, 3-region network and checks that every
// measure and every floor was taken. Nothing about timing is asserted.
func TestRunSmall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var log *slog.Logger
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	samples := 3
	rep, err := Run(ctx, Config{Nodes: 12, Regions: 3, ProviderShare: 0.25, Samples: samples, Dir: t.TempDir(), Logger: log, Faults: true})
	if err != nil {
		t.Fatal(err)
	}
	if testing.Verbose() {
		rep.Print(os.Stderr)
	}
	if rep.Model != "dgxh100" || rep.Market != Market {
		t.Errorf("report model %q market %q, want the default dgxh100 in %s", rep.Model, rep.Market, Market)
	}
	f := rep.Floors
	for name, st := range map[string]Stats{"find-providers": f.FindProviders, "gossip": f.Gossip, "rtt intra": f.RTTIntra, "rtt inter": f.RTTInter} {
		if st.Count != samples || st.P50 <= 0 {
			t.Errorf("floor %s = %+v, want %d samples above zero", name, st, samples)
		}
	}
	if f.FoundAll != samples {
		t.Errorf("raw kad-dht found every provider in %d of %d lookups", f.FoundAll, samples)
	}
	checkFaults(t, rep, samples)
	for _, name := range []string{MeasureDiscoveryCold, MeasureDiscoveryWarm, MeasureDiscoveryBook, MeasurePropagation, MeasureCrossing, MeasureLeaseRunning, MeasureFirstReceipt} {
		m, ok := rep.Measure(name)
		switch {
		case !ok:
			t.Errorf("measure %q missing", name)
		case m.Stats.Count != samples:
			t.Errorf("measure %q has %d samples, want %d", name, m.Stats.Count, samples)
		case m.Floor <= 0 || m.Ratio <= 0:
			t.Errorf("measure %q: floor %v ratio %v, want both above zero", name, m.Floor, m.Ratio)
		}
	}
}

func checkFaults(t *testing.T, rep *Report, samples int) {
	t.Helper()
	if rep.FaultsError != "" {
		t.Errorf("faults: %s", rep.FaultsError)
	}
	if rep.Converged == nil || !*rep.Converged {
		t.Errorf("books converged after heal and churn = %v, want true", rep.Converged)
	}
	if rep.PartitionCancels == 0 || rep.CancelledLeft != 0 {
		t.Errorf("%d bids cancelled during the partition, %d still held after the heal; want some, none", rep.PartitionCancels, rep.CancelledLeft)
	}
	for _, name := range []string{MeasurePartitionProp, MeasureHealProp, MeasureChurnProp} {
		if m, ok := rep.Measure(name); !ok || m.Stats.Count != samples {
			t.Errorf("fault measure %q = %+v, want %d samples", name, m.Stats, samples)
		}
	}
	for _, name := range []string{MeasureHealConverge, MeasureChurnRejoin} {
		if m, ok := rep.Measure(name); !ok || m.Stats.Count != 1 {
			t.Errorf("fault measure %q = %+v, want 1 sample", name, m.Stats)
		}
	}
}

func TestConfigRefused(t *testing.T) {
	for _, c := range []Config{
		{Nodes: 3},
		{Nodes: 10, Regions: 11},
		{Inter: 41 * time.Millisecond},
		{ProviderShare: 1},
		{Nodes: 8, Regions: 4, ProviderShare: 0.1},
		{ConnHigh: 11},
	} {
		if _, err := Run(context.Background(), c); err == nil {
			t.Errorf("Run(%+v) = nil error, want a refusal", c)
		}
	}
}

// TestRunAttack runs a 12-node network with hostile peers flooding (a
// quarter of the nodes, three identities each): honest propagation and
// crossing are measured again under the flood, beside the same run's
// figures without it. Nothing about timing is asserted.
func TestRunAttack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	samples := 3
	rep, err := Run(ctx, Config{Nodes: 12, Regions: 3, ProviderShare: 0.25, Samples: samples, Dir: t.TempDir(), Attack: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	if testing.Verbose() {
		rep.Print(os.Stderr)
	}
	if rep.AttackError != "" || rep.HostileIDs != 3*attackKeys {
		t.Fatalf("attack: %d hostile identities, error %q; want %d, none", rep.HostileIDs, rep.AttackError, 3*attackKeys)
	}
	for _, name := range []string{MeasureAttackProp, MeasureAttackCross} {
		if m, ok := rep.Measure(name); !ok || m.Stats.Count != samples || m.Floor <= 0 {
			t.Errorf("measure %q = %+v, want %d samples beside a floor", name, m, samples)
		}
	}
}

// TestConfigModel: the model picks the providers' machine and the market
// every measure trades in; an unknown one is refused before anything runs.
func TestConfigModel(t *testing.T) {
	c := Config{Model: "dgxa100"}
	if err := c.defaults(); err != nil {
		t.Fatal(err)
	}
	s := newSim(c)
	defer s.close()
	if s.market != "nvidia-a100-sxm4-40gb" {
		t.Errorf("dgxa100's market = %q, want nvidia-a100-sxm4-40gb", s.market)
	}
	c = Config{Model: "dgx-nope"}
	if err := c.defaults(); err == nil {
		t.Error("an unknown model was accepted")
	}
}
