package history

import (
	"sync"
	"time"

	"github.com/suanli/suanli/gpu"
	"github.com/suanli/suanli/node/api"
)

// Samples is how many telemetry samples per GPU are kept in memory (at
// the 5 s sampling interval, an hour).
const Samples = 720

// Telemetry is a ring of recent samples per GPU. The zero value is ready
// to use; its lock is a leaf.
type Telemetry struct {
	mu    sync.Mutex
	order []string // UUIDs in inventory order
	by    map[string][]api.GPUSample
	// devices is the inventory's index, UUID and name of each GPU, read
	// once: a dashboard polling every few seconds need not re-read the
	// inventory (which, with confidential computing, makes fresh evidence).
	devices []api.GPUSeries
}

// Add keeps the samples tel taken at at, dropping each GPU's oldest past
// Samples.
func (h *Telemetry) Add(at time.Time, tel []gpu.Telemetry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.by == nil {
		h.by = map[string][]api.GPUSample{}
	}
	for _, t := range tel {
		s, ok := h.by[t.UUID]
		if !ok {
			h.order = append(h.order, t.UUID)
		}
		s = append(s, api.GPUSample{Time: at.UTC(), UtilizationPercent: t.UtilizationPercent, MemoryUsedBytes: t.MemoryUsedBytes,
			MemoryTotalBytes: t.MemoryTotalBytes, TemperatureC: t.TemperatureC, PowerMilliwatts: t.PowerMilliwatts})
		if len(s) > Samples {
			s = append(s[:0], s[len(s)-Samples:]...)
		}
		h.by[t.UUID] = s
	}
}

// Series is a copy of the samples kept of one GPU, oldest first.
func (h *Telemetry) Series(uuid string) []api.GPUSample {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]api.GPUSample{}, h.by[uuid]...)
}

// View is the API's GPUHistory: every GPU of the inventory (read once
// through inv) with its samples and the provider lease holding it, of
// leases, sampled every interval.
func (h *Telemetry) View(inv func() (*gpu.Inventory, error), leases []api.LeaseView, interval time.Duration) (api.GPUHistoryView, error) {
	h.mu.Lock()
	devices := h.devices
	h.mu.Unlock()
	if devices == nil {
		in, err := inv()
		if err != nil {
			return api.GPUHistoryView{}, err
		}
		devices = []api.GPUSeries{}
		for _, d := range in.Devices {
			devices = append(devices, api.GPUSeries{Index: d.Index, UUID: d.UUID, Name: d.Name})
		}
		h.mu.Lock()
		h.devices = devices
		h.mu.Unlock()
	}
	holder := map[string]api.LeaseView{}
	for _, l := range leases {
		if l.Role != "provider" || l.ClosedAt != nil || l.State == "closed" || l.State == "unpaid" {
			continue
		}
		for _, g := range l.GPUs {
			holder[g] = l
		}
	}
	v := api.GPUHistoryView{IntervalS: int(interval / time.Second), GPUs: []api.GPUSeries{}}
	for _, d := range devices {
		s := api.GPUSeries{Index: d.Index, UUID: d.UUID, Name: d.Name, Samples: h.Series(d.UUID)}
		if l, ok := holder[d.UUID]; ok {
			s.Lease = l.ID
			v.Holders = append(v.Holders, api.GPUHolding{UUID: d.UUID, Lease: l.ID, Buyer: l.Buyer})
		}
		v.GPUs = append(v.GPUs, s)
	}
	return v, nil
}
