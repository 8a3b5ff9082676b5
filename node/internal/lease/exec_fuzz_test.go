package lease

import (
	"testing"

	"github.com/suanli/suanli/node/executor"
)

// FuzzDecodeExecRequest: any exec request is refused with an error or
// decoded into a spec that passes its own validation.
func FuzzDecodeExecRequest(f *testing.F) {
	f.Add([]byte(`{"lease":"L","image":"suanli-test/echo","ports":[8080],"ssh_key":"ssh-ed25519 AAAA k"}`))
	f.Add([]byte(`{"lease":"L","command":["sh","-c","true"]}`))
	f.Add([]byte(`{"lease":"L","attach":true,"since_ms":5}`))
	f.Add([]byte(`{"lease":"L","executor":"slurm"}`))
	f.Add([]byte(`{"lease":"L","image":"x","ports":[80,80]}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeExecRequest(body)
		if err != nil {
			return
		}
		if req.Lease == "" {
			t.Fatal("decoded a request without a lease")
		}
		if !req.Attach {
			if verr := req.Spec.Validate(); verr != nil {
				t.Fatalf("decoded a spec its own validation refuses: %v", verr)
			}
		}
		if !req.Attach && req.ExecutorName() != executor.Process && req.ExecutorName() != executor.Docker {
			t.Fatalf("executor %q let through", req.ExecutorName())
		}
	})
}
