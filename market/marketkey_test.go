package market

import "testing"

func TestIsFullMarketKey(t *testing.T) {
	for s, want := range map[string]bool{
		"nvidia-h100-sxm5-80gb":  true,
		"nvidia-b200-sxm6-180gb": true,
		"amd-mi300x-192gb":       true,
		"h100":                   false,
		"nvidia-zz999":           false,
		"nvidia-h100-xgb":        false,
		"nvidia-gb":              false,
		"80gb":                   false,
		"intel-max-128gb":        true,
		"NVIDIA-H100-80GB":       false,
		"":                       false,
	} {
		if got := IsFullMarketKey(s); got != want {
			t.Errorf("IsFullMarketKey(%q) = %v, want %v", s, got, want)
		}
	}
}
