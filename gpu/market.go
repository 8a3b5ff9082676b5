package gpu

import (
	"math"
	"strconv"
	"strings"
)

// MarketKey is the normalized GPU class for an NVML product name and memory
// size: vendor, model, form factor, nominal memory, e.g.
//
//	"NVIDIA H100 80GB HBM3", 80 GiB   -> "nvidia-h100-sxm5-80gb"
//	"NVIDIA A100-PCIE-40GB", 40 GiB   -> "nvidia-a100-pcie-40gb"
//	"NVIDIA GeForce RTX 4090", 24 GiB -> "nvidia-rtx-4090-24gb"
//
// NVIDIA's brand words (Tesla, GeForce, Quadro) and memory-type words (HBM3e)
// are dropped; a datacenter part named without a form factor gets its SXM
// generation (H100/H200 -> sxm5, B200 -> sxm6); a bare "sxm" gets its
// generation too (A100 -> sxm4). The memory figure is the nominal size the
// reported memory falls just under (81559 MiB -> 80gb, 46068 MiB -> 48gb), so
// a card whose usable memory is a little less than its label still maps to
// its labelled class; with memoryBytes 0 it is the "<N>GB" written in the
// name, if any. Any other name is lowercased with runs of non-alphanumerics
// turned into single dashes, and the memory figure appended. The result
// matches ^[a-z0-9]+(-[a-z0-9]+)*$, or is "" when the name has no letters or
// digits.
func MarketKey(name string, memoryBytes uint64) string {
	toks := keyTokens(name)
	if len(toks) > 1 && toks[0] == "mock" { // go-nvml's "Mock NVIDIA A100-SXM4-40GB"
		toks = toks[1:]
	}
	if len(toks) == 0 {
		return ""
	}
	var (
		nvidia bool
		nameGB string
		model  []string
		forms  []string
	)
	for _, t := range toks {
		switch {
		case t == "nvidia" || t == "tesla" || t == "geforce" || t == "quadro":
			nvidia = true
		case isGBToken(t):
			if nameGB == "" {
				nameGB = strings.TrimSuffix(t, "gb")
			}
		default:
			model = append(model, t)
		}
	}
	gb := nameGB
	if memoryBytes > 0 {
		gb = strconv.FormatUint(nominalGB(memoryBytes), 10)
	}
	var out []string
	if nvidia {
		out = append(out, "nvidia")
		var rest []string
		for _, t := range model {
			switch {
			case strings.HasPrefix(t, "hbm"), t == "generation":
				// memory type; "RTX 6000 Ada Generation"
			case isFormToken(t):
				forms = append(forms, t)
			default:
				rest = append(rest, t)
			}
		}
		model = rest
		family := ""
		if len(model) > 0 {
			family = model[0]
		}
		sxm := sxmGeneration[family]
		for i, f := range forms {
			if f == "sxm" && sxm != "" {
				forms[i] = sxm
			}
		}
		if len(forms) == 0 && sxmByDefault[family] {
			forms = append(forms, sxm)
		}
	}
	out = append(out, model...)
	out = append(out, forms...)
	if gb != "" {
		out = append(out, gb+"gb")
	}
	if len(out) == 0 { // a name that was nothing but a memory size with memoryBytes 0
		return ""
	}
	return strings.Join(out, "-")
}

// sxmGeneration is the SXM socket each datacenter family uses.
var sxmGeneration = map[string]string{
	"p100": "sxm2", "v100": "sxm2", "v100s": "sxm2",
	"a100": "sxm4", "a800": "sxm4",
	"h100": "sxm5", "h800": "sxm5", "h200": "sxm5", "h20": "sxm5",
	"b100": "sxm6", "b200": "sxm6", "b300": "sxm6",
}

// sxmByDefault lists families whose SXM part NVML names with no form factor
// ("NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA B200"), while the other
// forms say "PCIe" or "NVL".
var sxmByDefault = map[string]bool{
	"h100": true, "h800": true, "h200": true, "h20": true,
	"b100": true, "b200": true, "b300": true,
}

func isFormToken(t string) bool {
	switch t {
	case "pcie", "nvl", "sxm", "sxm2", "sxm3", "sxm4", "sxm5", "sxm6":
		return true
	}
	return false
}

// isGBToken reports whether t is a memory size such as "80gb".
func isGBToken(t string) bool {
	digits := strings.TrimSuffix(t, "gb")
	if digits == t || digits == "" {
		return false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return false
		}
	}
	return true
}

// keyTokens splits s, lowercased, into runs of ASCII letters and digits.
func keyTokens(s string) []string {
	s = strings.ToLower(s)
	var toks []string
	start := -1
	for i := 0; i <= len(s); i++ {
		alnum := i < len(s) && (s[i] >= 'a' && s[i] <= 'z' || s[i] >= '0' && s[i] <= '9')
		switch {
		case alnum && start < 0:
			start = i
		case !alnum && start >= 0:
			toks = append(toks, s[start:i])
			start = -1
		}
	}
	return toks
}

// nominalSizes are GPU memory sizes as products are labelled, in GB.
var nominalSizes = []float64{
	1, 2, 3, 4, 5, 6, 8, 10, 11, 12, 16, 20, 24, 32, 40, 48, 64, 80, 94, 96,
	128, 141, 144, 180, 186, 192, 256, 288,
}

// nominalGB is the labelled size of a GPU reporting b bytes: the first
// nominal size that b is at least 90% of and at most half a GiB over (ECC
// and firmware reservations take up to about 6%), else b in GiB rounded,
// at least 1.
func nominalGB(b uint64) uint64 {
	gib := float64(b) / (1 << 30)
	for _, n := range nominalSizes {
		if gib <= n+0.5 && gib >= 0.9*n {
			return uint64(n)
		}
	}
	return uint64(max(1, math.Round(gib)))
}
