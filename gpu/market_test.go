package gpu

import (
	"regexp"
	"testing"
)

const (
	mib = 1 << 20
	gib = 1 << 30
)

func TestMarketKey(t *testing.T) {
	tests := []struct {
		name string
		mem  uint64
		want string
	}{
		// go-nvml's mock models (mock/gpus), with their memory.
		{"Mock NVIDIA A100-SXM4-40GB", 40960 * mib, "nvidia-a100-sxm4-40gb"},
		{"NVIDIA A100-SXM4-80GB", 81920 * mib, "nvidia-a100-sxm4-80gb"},
		{"NVIDIA A100-PCIE-40GB", 40960 * mib, "nvidia-a100-pcie-40gb"},
		{"NVIDIA A100-PCIE-80GB", 81920 * mib, "nvidia-a100-pcie-80gb"},
		{"NVIDIA A30-PCIE-24GB", 24576 * mib, "nvidia-a30-pcie-24gb"},
		{"NVIDIA H100 80GB HBM3", 81920 * mib, "nvidia-h100-sxm5-80gb"},
		{"NVIDIA H200 141GB HBM3e", 144384 * mib, "nvidia-h200-sxm5-141gb"},
		{"NVIDIA B200 180GB HBM3e", 184320 * mib, "nvidia-b200-sxm6-180gb"},

		// Real NVML product names with the memory NVML reports.
		{"NVIDIA H100 80GB HBM3", 81559 * mib, "nvidia-h100-sxm5-80gb"},
		{"NVIDIA H100 PCIe", 81559 * mib, "nvidia-h100-pcie-80gb"},
		{"NVIDIA H100 NVL", 95830 * mib, "nvidia-h100-nvl-94gb"},
		{"NVIDIA H800", 81559 * mib, "nvidia-h800-sxm5-80gb"},
		{"NVIDIA H200", 143771 * mib, "nvidia-h200-sxm5-141gb"},
		{"NVIDIA H200 NVL", 143771 * mib, "nvidia-h200-nvl-141gb"},
		{"NVIDIA B200", 183359 * mib, "nvidia-b200-sxm6-180gb"},
		{"NVIDIA GH200 480GB", 97871 * mib, "nvidia-gh200-96gb"},
		{"NVIDIA A100-SXM4-40GB", 40536 * mib, "nvidia-a100-sxm4-40gb"},
		{"NVIDIA A100-SXM4-80GB", 81251 * mib, "nvidia-a100-sxm4-80gb"},
		{"NVIDIA A100-SXM-80GB", 81251 * mib, "nvidia-a100-sxm4-80gb"},
		{"NVIDIA A100-PCIE-40GB", 40536 * mib, "nvidia-a100-pcie-40gb"},
		{"NVIDIA A100 80GB PCIe", 81251 * mib, "nvidia-a100-pcie-80gb"},
		{"NVIDIA L40S", 46068 * mib, "nvidia-l40s-48gb"},
		{"NVIDIA L4", 23034 * mib, "nvidia-l4-24gb"},
		{"NVIDIA A10", 23028 * mib, "nvidia-a10-24gb"},
		{"NVIDIA GeForce RTX 4090", 24564 * mib, "nvidia-rtx-4090-24gb"},
		{"NVIDIA GeForce RTX 3090 Ti", 24564 * mib, "nvidia-rtx-3090-ti-24gb"},
		{"NVIDIA RTX A6000", 49140 * mib, "nvidia-rtx-a6000-48gb"},
		{"NVIDIA RTX 6000 Ada Generation", 49140 * mib, "nvidia-rtx-6000-ada-48gb"},
		{"Quadro RTX 8000", 48601 * mib, "nvidia-rtx-8000-48gb"},
		{"Tesla V100-SXM2-32GB", 32510 * mib, "nvidia-v100-sxm2-32gb"},
		{"Tesla V100S-PCIE-32GB", 32510 * mib, "nvidia-v100s-pcie-32gb"},
		{"Tesla T4", 15360 * mib, "nvidia-t4-16gb"},

		// Memory not known: the size written in the name, if any.
		{"NVIDIA A100-SXM4-80GB", 0, "nvidia-a100-sxm4-80gb"},
		{"NVIDIA H100 PCIe", 0, "nvidia-h100-pcie"},

		// Anything else: lowercased, dashed, plus the memory.
		{"AMD Instinct MI300X", 196592 * mib, "amd-instinct-mi300x-192gb"},
		{"  Some  GPU (rev. 2)!! ", 50 * gib, "some-gpu-rev-2-50gb"},
		{"Tiny", 300 * mib, "tiny-1gb"},
		{"Mock", 8 * gib, "mock-8gb"},
		{"", 80 * gib, ""},
		{"--- ***", 80 * gib, ""},
		{"80GB", 0, "80gb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := MarketKey(tt.name, tt.mem); got != tt.want {
				t.Errorf("MarketKey(%q, %d MiB) = %q, want %q", tt.name, tt.mem/mib, got, tt.want)
			}
		})
	}
}

func TestNominalGB(t *testing.T) {
	tests := []struct {
		mem  uint64
		want uint64
	}{
		{81559 * mib, 80},   // H100
		{81920 * mib, 80},   // exactly 80 GiB
		{95830 * mib, 94},   // H100 NVL
		{97871 * mib, 96},   // GH200
		{143771 * mib, 141}, // H200
		{144384 * mib, 141}, // H200 mock
		{183359 * mib, 180}, // B200
		{184320 * mib, 180}, // B200 mock
		{46068 * mib, 48},   // L40S, ECC on
		{15360 * mib, 16},   // T4
		{50 * gib, 50},      // between nominal sizes: rounded
		{1, 1},              // at least 1
	}
	for _, tt := range tests {
		if got := nominalGB(tt.mem); got != tt.want {
			t.Errorf("nominalGB(%d MiB) = %d, want %d", tt.mem/mib, got, tt.want)
		}
	}
}

var marketKeyRE = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

func FuzzMarketKey(f *testing.F) {
	seeds := []struct {
		name string
		mem  uint64
	}{
		{"NVIDIA H100 80GB HBM3", 81559 * mib},
		{"Mock NVIDIA A100-SXM4-40GB", 40960 * mib},
		{"NVIDIA GeForce RTX 4090", 24564 * mib},
		{"Tesla V100-SXM2-32GB", 0},
		{"", 0},
		{"mock", 0},
		{"----", 1},
		{"NVIDIA", 1 << 63},
		{"ÄÖÜ ɐ \u212a GPU", ^uint64(0)},
		{"sxm pcie hbm3 80gb nvidia", 80 * gib},
	}
	for _, s := range seeds {
		f.Add(s.name, s.mem)
	}
	f.Fuzz(func(t *testing.T, name string, mem uint64) {
		got := MarketKey(name, mem)
		if len(keyTokens(name)) == 0 {
			if got != "" {
				t.Fatalf("MarketKey(%q, %d) = %q, want \"\"", name, mem, got)
			}
			return
		}
		if got != "" && !marketKeyRE.MatchString(got) {
			t.Fatalf("MarketKey(%q, %d) = %q, want a match for %s", name, mem, got, marketKeyRE)
		}
		if again := MarketKey(name, mem); again != got {
			t.Fatalf("MarketKey(%q, %d) = %q, then %q", name, mem, got, again)
		}
		if mem > 0 && got == "" {
			t.Fatalf("MarketKey(%q, %d) = \"\", want a key", name, mem)
		}
	})
}
