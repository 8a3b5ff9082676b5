package market

import "strings"

// IsFullMarketKey tells an exact market key ("nvidia-h100-sxm5-80gb") from
// a search word ("h100", "nvidia-zz999"): a full key is well formed
// (ValidMarketKey) and ends in the GPU memory size, as gpu.MarketKey makes
// them.
func IsFullMarketKey(s string) bool {
	if !ValidMarketKey(s) || !strings.Contains(s, "-") {
		return false
	}
	mem, ok := strings.CutSuffix(s[strings.LastIndexByte(s, '-')+1:], "gb")
	if !ok || mem == "" {
		return false
	}
	for _, c := range mem {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
