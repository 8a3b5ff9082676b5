package leases

import (
	"encoding/json"
	"testing"
)

// FuzzVerifyEvidence: any file is refused with an error or verified,
// never a panic.
func FuzzVerifyEvidence(f *testing.F) {
	f.Add([]byte(`{"kind":"equivocation","receipts":["AAAA","AAAA"]}`))
	f.Add([]byte(`{"kind":"refused-fill","fill":"CgA="}`))
	f.Add([]byte(`{"kind":"other"}`))
	f.Add([]byte(`not json`))
	b, _ := json.Marshal(evidenceExport{Kind: EvidenceRefusedFill, Fill: []byte{0x0a, 0x02, 0x01, 0x02, 0x12, 0x00}})
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		rep, err := VerifyEvidence(data)
		if err == nil && (rep.Kind == "" || len(rep.Peers) == 0) {
			t.Fatalf("VerifyEvidence accepted %q as %+v", data, rep)
		}
	})
}
