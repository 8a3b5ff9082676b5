package api

import "time"

// AttestReport is the verdict of one challenge of a provider.
type AttestReport struct {
	Provider string    `json:"provider"`
	Nonce    string    `json:"nonce"` // hex, this node's fresh nonce
	Time     time.Time `json:"time"`
	// Verified is true only when every offered GPU's evidence verified.
	Verified bool   `json:"verified"`
	Summary  string `json:"summary"`
	// Failure says why the provider failed the challenge itself (no
	// evidence to verify); GPUs is then empty.
	Failure string       `json:"failure,omitempty"`
	GPUs    []GPUVerdict `json:"gpus"`
}

// Counts reports whether the verdict is verified and was made within
// window before now (a verdict dated more than a minute ahead of now does
// not count).
func (r AttestReport) Counts(now time.Time, window time.Duration) bool {
	age := now.Sub(r.Time)
	return r.Verified && age <= window && age > -time.Minute
}

// Covers reports whether the verdict verified every listed GPU.
func (r AttestReport) Covers(uuids ...string) bool {
	ok := make(map[string]bool, len(r.GPUs))
	for _, g := range r.GPUs {
		ok[g.UUID] = g.Verified
	}
	for _, u := range uuids {
		if !ok[u] {
			return false
		}
	}
	return true
}

// CheckView is one verification step; Outcome is pass, fail or not-checked.
type CheckView struct {
	Name    string `json:"name"`
	Outcome string `json:"outcome"`
	Reason  string `json:"reason"`
}

// GPUVerdict is one GPU's verification.
type GPUVerdict struct {
	UUID     string      `json:"uuid"`
	Verified bool        `json:"verified"`
	Summary  string      `json:"summary"`
	Checks   []CheckView `json:"checks"`
}
