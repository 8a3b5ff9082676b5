package gpu

import (
	"errors"
	"strings"
	"testing"
)

// The TestHardware* tests run against the real NVML and skip where there is
// no GPU. On a GPU machine: go test -c ./gpu && ./gpu.test -test.run Hardware -test.v

func openHardware(t *testing.T) Backend {
	t.Helper()
	b, err := Open()
	if errors.Is(err, ErrNoGPU) {
		t.Skipf("no GPU: %v", err)
	}
	if err != nil {
		t.Fatalf("Open() error = %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
	})
	return b
}

func TestHardwareInventory(t *testing.T) {
	b := openHardware(t)
	if b.Name() != "nvml" {
		t.Errorf("Name() = %q, want \"nvml\"", b.Name())
	}
	inv, err := b.Inventory()
	if err != nil {
		t.Fatalf("Inventory() error = %v", err)
	}
	t.Logf("driver %s, CUDA %s, NVML %s, confidential computing %v, level %s",
		inv.DriverVersion, inv.CUDADriverVersion, inv.NVMLVersion, inv.ConfidentialComputing, inv.Level())
	if len(inv.Devices) == 0 {
		t.Fatal("Inventory() has no devices")
	}
	if inv.DriverVersion == "" {
		t.Error("DriverVersion is empty")
	}
	for _, d := range inv.Devices {
		t.Logf("GPU %d: %s %q market %s, %d MiB, bus %s, CC %s, arch %q, serial %q, power limit %d mW, ECC %q, MIG %v, evidence %v",
			d.Index, d.UUID, d.Name, d.Market, d.MemoryBytes>>20, d.PCIBusID, d.ComputeCapability, d.Architecture,
			d.Serial, d.PowerLimitMilliwatts, d.ECC, d.MIGEnabled, d.Evidence != nil)
		if !strings.HasPrefix(d.UUID, "GPU-") || d.Name == "" {
			t.Errorf("GPU %d UUID, name = %q, %q; want GPU-… and a name", d.Index, d.UUID, d.Name)
		}
		if !strings.HasPrefix(d.Market, "nvidia-") || !marketKeyRE.MatchString(d.Market) {
			t.Errorf("GPU %d Market = %q, want a nvidia-… key", d.Index, d.Market)
		}
		if d.MemoryBytes == 0 {
			t.Errorf("GPU %d MemoryBytes = 0, want > 0", d.Index)
		}
		if d.ComputeCapability == "" || d.PCIBusID == "" {
			t.Errorf("GPU %d ComputeCapability, PCIBusID = %q, %q; want both", d.Index, d.ComputeCapability, d.PCIBusID)
		}
		if inv.ConfidentialComputing && (d.Evidence == nil || len(d.Evidence.Report) == 0 || len(d.Evidence.CertChain) == 0) {
			t.Errorf("GPU %d has CC on but no evidence", d.Index)
		}
	}
}

func TestHardwareTelemetry(t *testing.T) {
	b := openHardware(t)
	inv, err := b.Inventory()
	if err != nil {
		t.Fatalf("Inventory() error = %v", err)
	}
	tel, err := b.Telemetry()
	if err != nil {
		t.Fatalf("Telemetry() error = %v", err)
	}
	if len(tel) != len(inv.Devices) {
		t.Fatalf("len(Telemetry()) = %d, want %d", len(tel), len(inv.Devices))
	}
	for i, s := range tel {
		t.Logf("GPU %d: %+v", i, s)
		d := inv.Devices[i]
		if s.UUID != d.UUID {
			t.Errorf("sample %d UUID = %q, want %q", i, s.UUID, d.UUID)
		}
		if s.UtilizationPercent > 100 {
			t.Errorf("sample %d UtilizationPercent = %d, want ≤ 100", i, s.UtilizationPercent)
		}
		if s.TemperatureC > 120 {
			t.Errorf("sample %d TemperatureC = %d, want ≤ 120", i, s.TemperatureC)
		}
		if s.MemoryTotalBytes != 0 && s.MemoryUsedBytes > s.MemoryTotalBytes {
			t.Errorf("sample %d memory used %d > total %d", i, s.MemoryUsedBytes, s.MemoryTotalBytes)
		}
		if d.PowerLimitMilliwatts != 0 && s.PowerMilliwatts > d.PowerLimitMilliwatts*3/2 {
			t.Errorf("sample %d PowerMilliwatts = %d, want ≤ 1.5 × limit %d", i, s.PowerMilliwatts, d.PowerLimitMilliwatts)
		}
	}
	// Energy never runs backwards.
	again, err := b.Telemetry()
	if err != nil {
		t.Fatalf("Telemetry() error = %v", err)
	}
	for i := range again {
		if again[i].EnergyMillijoules < tel[i].EnergyMillijoules {
			t.Errorf("sample %d energy = %d mJ, then %d mJ", i, tel[i].EnergyMillijoules, again[i].EnergyMillijoules)
		}
	}
}

func TestHardwareAttest(t *testing.T) {
	b := openHardware(t)
	inv, err := b.Inventory()
	if err != nil {
		t.Fatalf("Inventory() error = %v", err)
	}
	nonce := make([]byte, NonceSize)
	evs, err := b.Attest(nonce)
	if !inv.ConfidentialComputing {
		if err == nil {
			t.Errorf("Attest() with CC off = %d evidence, nil; want an error", len(evs))
		}
		t.Skip("confidential computing is off")
	}
	if err != nil || len(evs) != len(inv.Devices) {
		t.Fatalf("Attest() = %d evidence, %v; want %d, nil", len(evs), err, len(inv.Devices))
	}
	for _, ev := range evs {
		t.Logf("%s: report %d bytes, chain %d bytes", ev.UUID, len(ev.Report), len(ev.CertChain))
	}
}
