package node

import (
	"github.com/suanli/suanli/gpu"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/internal/view"
)

// InventoryReport describes a backend's inventory with one telemetry
// sample, for `suanli gpus` and the API.
func InventoryReport(b gpu.Backend) (api.GPUReport, error) { return view.Inventory(b) }
