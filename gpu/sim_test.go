package gpu

import (
	"bytes"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is a settable clock for the simulator.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func mustOpenSim(t *testing.T, model string, seed int64, clock *fakeClock) *simBackend {
	t.Helper()
	now := time.Now
	if clock != nil {
		now = clock.Now
	}
	b, err := openSim(model, seed, now)
	if err != nil {
		t.Fatalf("openSim(%q, %d) error = %v", model, seed, err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func mustInventory(t *testing.T, b Backend) *Inventory {
	t.Helper()
	inv, err := b.Inventory()
	if err != nil {
		t.Fatalf("%s: Inventory() error = %v", b.Name(), err)
	}
	return inv
}

func TestSimModels(t *testing.T) {
	want := []string{"dgxa100", "dgxb200", "dgxh100", "dgxh200"}
	if got := SimModels(); !slices.Equal(got, want) {
		t.Errorf("SimModels() = %v, want %v", got, want)
	}
}

func TestOpenSimUnknownModel(t *testing.T) {
	if b, err := OpenSim("dgx-nope", 1); err == nil || !strings.Contains(err.Error(), "dgxh100") {
		t.Errorf("OpenSim(%q, 1) = %v, %v; want an error listing the models", "dgx-nope", b, err)
	}
	// A caller that keeps the Backend (a node deciding whether it is a
	// provider by b != nil) must get a nil interface, not a typed nil.
	if b, err := OpenMachine("dgx-nope", 1); err == nil || b != nil {
		t.Errorf("OpenMachine(%q, 1) = %#v, %v; want a nil Backend and an error", "dgx-nope", b, err)
	}
	if b, err := OpenMachine("dgxa100", 1); err != nil || b == nil {
		t.Fatalf("OpenMachine(dgxa100) = %v, %v", b, err)
	} else {
		b.Close()
	}
}

func TestOpenSimIsSimulator(t *testing.T) {
	b, err := OpenSim("dgxh100", 7)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, ok := b.(Simulator); !ok {
		t.Errorf("OpenSim(dgxh100, 7) is a %T, want a Simulator", b)
	}
	if got, want := b.Name(), "sim:dgxh100"; got != want {
		t.Errorf("Name() = %q, want %q", got, want)
	}
}

var (
	uuidRE   = regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	serialRE = regexp.MustCompile(`^1[0-9]{12}$`)
	busRE    = regexp.MustCompile(`^00000000:[0-9a-f]{2}:00\.0$`)
)

func TestSimInventory(t *testing.T) {
	tests := []struct {
		model, name, market, arch, cc, driver, cuda string
		memMiB                                      uint64
		powerW                                      uint32
		confidential                                bool
	}{
		{"dgxa100", "Mock NVIDIA A100-SXM4-40GB", "nvidia-a100-sxm4-40gb", "ampere", "8.0", "550.54.15", "12.4", 40960, 400, false},
		{"dgxb200", "NVIDIA B200 180GB HBM3e", "nvidia-b200-sxm6-180gb", "blackwell", "10.0", "560.28.03", "12.6", 184320, 1000, false},
		{"dgxh100", "NVIDIA H100 80GB HBM3", "nvidia-h100-sxm5-80gb", "hopper", "9.0", "550.90.07", "12.4", 81920, 700, true},
		{"dgxh200", "NVIDIA H200 141GB HBM3e", "nvidia-h200-sxm5-141gb", "hopper", "9.0", "550.90.07", "12.4", 144384, 700, true},
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			inv := mustInventory(t, mustOpenSim(t, tt.model, 42, nil))
			if got, want := inv.Backend, "sim:"+tt.model; got != want {
				t.Errorf("Backend = %q, want %q", got, want)
			}
			if inv.DriverVersion != tt.driver || inv.CUDADriverVersion != tt.cuda || inv.NVMLVersion != "12."+tt.driver {
				t.Errorf("driver, CUDA, NVML = %q, %q, %q; want %q, %q, %q",
					inv.DriverVersion, inv.CUDADriverVersion, inv.NVMLVersion, tt.driver, tt.cuda, "12."+tt.driver)
			}
			if inv.ConfidentialComputing != tt.confidential {
				t.Errorf("ConfidentialComputing = %v, want %v", inv.ConfidentialComputing, tt.confidential)
			}
			wantLevel := SelfReported
			if tt.confidential {
				wantLevel = CCEvidence
			}
			if got := inv.Level(); got != wantLevel {
				t.Errorf("Level() = %q, want %q", got, wantLevel)
			}
			if len(inv.Devices) != 8 {
				t.Fatalf("len(Devices) = %d, want 8", len(inv.Devices))
			}
			uuids, serials, buses := map[string]bool{}, map[string]bool{}, map[string]bool{}
			var nonce []byte
			for i, d := range inv.Devices {
				if d.Index != i || d.Name != tt.name || d.Market != tt.market || d.MemoryBytes != tt.memMiB*mib ||
					d.Architecture != tt.arch || d.ComputeCapability != tt.cc {
					t.Errorf("device %d = %d, %q, %q, %d MiB, %q, %q; want %d, %q, %q, %d MiB, %q, %q", i,
						d.Index, d.Name, d.Market, d.MemoryBytes/mib, d.Architecture, d.ComputeCapability,
						i, tt.name, tt.market, tt.memMiB, tt.arch, tt.cc)
				}
				if d.PowerLimitMilliwatts != tt.powerW*1000 || d.ECC != "on" || d.MIGEnabled {
					t.Errorf("device %d power limit, ECC, MIG = %d mW, %q, %v; want %d mW, \"on\", false",
						i, d.PowerLimitMilliwatts, d.ECC, d.MIGEnabled, tt.powerW*1000)
				}
				if !uuidRE.MatchString(d.UUID) || !serialRE.MatchString(d.Serial) || !busRE.MatchString(d.PCIBusID) {
					t.Errorf("device %d UUID, serial, bus = %q, %q, %q; want NVML-shaped values", i, d.UUID, d.Serial, d.PCIBusID)
				}
				uuids[d.UUID], serials[d.Serial], buses[d.PCIBusID] = true, true, true

				if !tt.confidential {
					if d.Evidence != nil {
						t.Errorf("device %d Evidence = %+v, want nil with CC off", i, d.Evidence)
					}
					continue
				}
				ev := d.Evidence
				if ev == nil {
					t.Errorf("device %d Evidence = nil, want evidence with CC on", i)
					continue
				}
				if ev.UUID != d.UUID || len(ev.Nonce) != NonceSize {
					t.Errorf("device %d Evidence UUID, nonce length = %q, %d; want %q, %d", i, ev.UUID, len(ev.Nonce), d.UUID, NonceSize)
				}
				if nonce == nil {
					nonce = ev.Nonce
				} else if !bytes.Equal(ev.Nonce, nonce) {
					t.Errorf("device %d Evidence nonce = %x, want the inventory's one nonce %x", i, ev.Nonce, nonce)
				}
				checkSampleEvidence(t, ev)
			}
			if len(uuids) != 8 || len(serials) != 8 || len(buses) != 8 {
				t.Errorf("distinct UUIDs, serials, bus IDs = %d, %d, %d; want 8 each", len(uuids), len(serials), len(buses))
			}
		})
	}
}

// checkSampleEvidence checks ev carries NVIDIA's sample H100 evidence.
func checkSampleEvidence(t *testing.T, ev *Evidence) {
	t.Helper()
	hexText, err := os.ReadFile("simdata/hopperAttestationReport.txt")
	if err != nil {
		t.Fatal(err)
	}
	want, err := hex.DecodeString(strings.TrimSpace(string(hexText)))
	if err != nil {
		t.Fatal(err)
	}
	if len(ev.Report) != 4117 || !bytes.Equal(ev.Report, want) {
		t.Errorf("%s: len(Report) = %d, want the 4117-byte sample", ev.UUID, len(ev.Report))
	}
	// The report names the driver the simulated Hopper machines report.
	if !bytes.Contains(ev.Report, []byte(simCCDriver)) {
		t.Errorf("%s: Report does not name driver %s", ev.UUID, simCCDriver)
	}
	var certs []*x509.Certificate
	rest := ev.CertChain
	for {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatalf("%s: CertChain certificate %d: %v", ev.UUID, len(certs), err)
		}
		certs = append(certs, c)
	}
	if len(certs) != 5 {
		t.Fatalf("%s: CertChain holds %d certificates, want 5", ev.UUID, len(certs))
	}
	for i := 0; i+1 < len(certs); i++ { // leaf first: each is signed by the next
		if err := certs[i].CheckSignatureFrom(certs[i+1]); err != nil {
			t.Errorf("%s: certificate %d (%s) not signed by %d (%s): %v", ev.UUID,
				i, certs[i].Subject.CommonName, i+1, certs[i+1].Subject.CommonName, err)
		}
	}
}

// clearNonces drops the one random part of an inventory.
func clearNonces(inv *Inventory) {
	for i := range inv.Devices {
		if inv.Devices[i].Evidence != nil {
			inv.Devices[i].Evidence.Nonce = nil
		}
	}
}

func TestSimDeterministic(t *testing.T) {
	for _, model := range SimModels() {
		t.Run(model, func(t *testing.T) {
			a := mustInventory(t, mustOpenSim(t, model, 1, nil))
			b := mustInventory(t, mustOpenSim(t, model, 1, nil))
			c := mustInventory(t, mustOpenSim(t, model, 2, nil))
			clearNonces(a)
			clearNonces(b)
			if !reflect.DeepEqual(a, b) {
				t.Errorf("Inventory(seed 1) = %+v, then %+v; want equal", a, b)
			}
			for i := range a.Devices {
				da, dc := a.Devices[i], c.Devices[i]
				if da.UUID == dc.UUID || da.Serial == dc.Serial {
					t.Errorf("device %d UUID, serial (seed 1) = %q, %q and (seed 2) = %q, %q; want different",
						i, da.UUID, da.Serial, dc.UUID, dc.Serial)
				}
			}
		})
	}
	// Same seed, different machines: different GPUs too.
	h100 := mustInventory(t, mustOpenSim(t, "dgxh100", 1, nil))
	h200 := mustInventory(t, mustOpenSim(t, "dgxh200", 1, nil))
	if h100.Devices[0].UUID == h200.Devices[0].UUID {
		t.Errorf("dgxh100 and dgxh200 with seed 1 share UUID %q", h100.Devices[0].UUID)
	}
}

func mustTelemetry(t *testing.T, b Backend) []Telemetry {
	t.Helper()
	tel, err := b.Telemetry()
	if err != nil {
		t.Fatalf("%s: Telemetry() error = %v", b.Name(), err)
	}
	return tel
}

func TestSimTelemetry(t *testing.T) {
	tests := []struct {
		model            string
		idleW            [2]uint32
		limitW, totalMiB uint64
	}{
		{"dgxa100", [2]uint32{50, 85}, 400, 40960},
		{"dgxb200", [2]uint32{130, 190}, 1000, 184320},
		{"dgxh100", [2]uint32{70, 120}, 700, 81920},
		{"dgxh200", [2]uint32{75, 125}, 700, 144384},
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			clock := newFakeClock()
			b := mustOpenSim(t, tt.model, 3, clock)
			twin := mustOpenSim(t, tt.model, 3, clock)
			inv := mustInventory(t, b)

			idle := mustTelemetry(t, b)
			if got := mustTelemetry(t, twin); !reflect.DeepEqual(got, idle) {
				t.Errorf("Telemetry() of a same-seed twin = %+v, want %+v", got, idle)
			}
			if len(idle) != 8 {
				t.Fatalf("len(Telemetry()) = %d, want 8", len(idle))
			}
			for i, s := range idle {
				if s.UUID != inv.Devices[i].UUID {
					t.Errorf("sample %d UUID = %q, want %q", i, s.UUID, inv.Devices[i].UUID)
				}
				if s.UtilizationPercent > 3 || s.TemperatureC < 30 || s.TemperatureC > 45 ||
					s.PowerMilliwatts < tt.idleW[0]*1000 || s.PowerMilliwatts > tt.idleW[1]*1000 ||
					s.MemoryTotalBytes != tt.totalMiB*mib || s.MemoryUsedBytes > 1024*mib || s.EnergyMillijoules == 0 {
					t.Errorf("idle sample %d = %+v, want util ≤ 3%%, 30–45 C, %d–%d W, ≤ 1 GiB used of %d MiB, energy > 0",
						i, s, tt.idleW[0], tt.idleW[1], tt.totalMiB)
				}
			}

			busyUUID := inv.Devices[2].UUID
			b.SetBusy(busyUUID, true)
			b.SetBusy("GPU-no-such-gpu", true) // ignored
			clock.Advance(10 * time.Second)
			busy := mustTelemetry(t, b)
			for i, s := range busy {
				if i != 2 {
					if s.UtilizationPercent > 3 {
						t.Errorf("sample %d UtilizationPercent = %d with only GPU 2 busy, want ≤ 3", i, s.UtilizationPercent)
					}
					continue
				}
				limit := uint32(tt.limitW * 1000)
				if s.UtilizationPercent < 85 || s.UtilizationPercent > 100 || s.PowerMilliwatts < limit*85/100 ||
					s.PowerMilliwatts > limit || s.MemoryUsedBytes < s.MemoryTotalBytes*7/10 || s.TemperatureC < 60 {
					t.Errorf("busy sample = %+v, want util 85–100%%, power ≥ 85%% of %d W, ≥ 70%% memory used, ≥ 60 C", s, tt.limitW)
				}
			}
			// Energy: monotonic, and 10 s busy costs about 0.9 × limit × 10 s.
			for i := range busy {
				if busy[i].EnergyMillijoules <= idle[i].EnergyMillijoules {
					t.Errorf("sample %d energy = %d mJ, then %d mJ 10 s later; want it to grow", i, idle[i].EnergyMillijoules, busy[i].EnergyMillijoules)
				}
			}
			spent := busy[2].EnergyMillijoules - idle[2].EnergyMillijoules
			if lo, hi := tt.limitW*1000*10*85/100, tt.limitW*1000*10; spent < lo || spent > hi {
				t.Errorf("busy GPU spent %d mJ in 10 s, want %d–%d", spent, lo, hi)
			}

			b.SetBusy(busyUUID, false)
			clock.Advance(time.Second)
			after := mustTelemetry(t, b)
			if after[2].UtilizationPercent > 3 || after[2].EnergyMillijoules <= busy[2].EnergyMillijoules {
				t.Errorf("sample after SetBusy(false) = %+v, want idle and energy still growing", after[2])
			}
		})
	}
}

// With the real clock, readings change by the second but stay in range.
func TestSimTelemetryRealClock(t *testing.T) {
	b, err := OpenSim("dgxh100", 9)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var last uint64
	for range 3 {
		tel, err := b.Telemetry()
		if err != nil {
			t.Fatal(err)
		}
		if e := tel[0].EnergyMillijoules; e < last {
			t.Errorf("energy = %d mJ after %d mJ, want monotonic", e, last)
		} else {
			last = e
		}
	}
}

func TestSimAttest(t *testing.T) {
	h100 := mustOpenSim(t, "dgxh100", 5, nil)
	inv := mustInventory(t, h100)
	nonce := bytes.Repeat([]byte{0xab}, NonceSize)

	all, err := h100.Attest(nonce)
	if err != nil || len(all) != 8 {
		t.Fatalf("Attest(nonce) = %d evidence, %v; want 8, nil", len(all), err)
	}
	for i, ev := range all {
		if ev.UUID != inv.Devices[i].UUID || !bytes.Equal(ev.Nonce, nonce) {
			t.Errorf("Attest(nonce)[%d] UUID, nonce = %q, %x; want %q, %x", i, ev.UUID, ev.Nonce, inv.Devices[i].UUID, nonce)
		}
		checkSampleEvidence(t, &ev)
	}

	pick := []string{inv.Devices[5].UUID, inv.Devices[1].UUID}
	some, err := h100.Attest(nonce, pick...)
	if err != nil || len(some) != 2 || some[0].UUID != pick[0] || some[1].UUID != pick[1] {
		t.Errorf("Attest(nonce, %v) = %d evidence, %v; want those two in order", pick, len(some), err)
	}

	if _, err := h100.Attest(nonce[:31]); err == nil {
		t.Error("Attest(31-byte nonce) error = nil, want one")
	}
	if _, err := h100.Attest(nonce, "GPU-00000000-0000-4000-8000-000000000000"); err == nil {
		t.Error("Attest(nonce, unknown UUID) error = nil, want one")
	}
	for _, model := range []string{"dgxa100", "dgxb200"} {
		b := mustOpenSim(t, model, 5, nil)
		if _, err := b.Attest(nonce); err == nil || !strings.Contains(err.Error(), "confidential computing is off") {
			t.Errorf("%s: Attest(nonce) error = %v, want confidential computing off", model, err)
		}
	}
}

func TestSimClose(t *testing.T) {
	b, err := OpenSim("dgxa100", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("Close() = %v, want nil", err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close() = %v, want nil", err)
	}
	if _, err := b.Inventory(); !errors.Is(err, errClosed) {
		t.Errorf("Inventory() after Close = %v, want %v", err, errClosed)
	}
	if _, err := b.Telemetry(); !errors.Is(err, errClosed) {
		t.Errorf("Telemetry() after Close = %v, want %v", err, errClosed)
	}
}

// Run with -race: every method at once.
func TestSimConcurrent(t *testing.T) {
	b := mustOpenSim(t, "dgxh200", 11, nil)
	uuids := []string{}
	for _, d := range mustInventory(t, b).Devices {
		uuids = append(uuids, d.UUID)
	}
	nonce := make([]byte, NonceSize)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				var err error
				switch (g + i) % 4 {
				case 0:
					_, err = b.Inventory()
				case 1:
					_, err = b.Telemetry()
				case 2:
					_, err = b.Attest(nonce, uuids[i%len(uuids)])
				case 3:
					b.SetBusy(uuids[(g+i)%len(uuids)], i%2 == 0)
				}
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
}

// The sample evidence must fit NVML's buffers, or the simulator would cut it.
func TestSimEvidenceFits(t *testing.T) {
	if len(simReport) != 4117 || len(simReport) > 8192 {
		t.Errorf("len(simReport) = %d, want 4117 (≤ 8192)", len(simReport))
	}
	if len(simCertChain) > 5120 {
		t.Errorf("len(simCertChain) = %d, want ≤ 5120", len(simCertChain))
	}
}
