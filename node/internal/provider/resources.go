package provider

import (
	"runtime"
	"syscall"

	"github.com/suanli/suanli/gpu"
)

// PerGPU is what a provider sells with each GPU: vCPUs (in thousandths),
// RAM and disk bytes, as configured; Share fills the fields left zero.
type PerGPU struct {
	MilliCPUs int64
	RAM, Disk uint64
}

// Share is p with its vCPUs and RAM, where zero, derived from the host:
// its cores and memory shared out among gpus GPUs (none: one).
func (p PerGPU) Share(gpus int) PerGPU {
	gpus = max(gpus, 1)
	if p.MilliCPUs == 0 {
		p.MilliCPUs = int64(runtime.NumCPU()) * 1000 / int64(gpus)
	}
	if p.RAM == 0 {
		p.RAM = HostMemory() / uint64(gpus)
	}
	return p
}

// HostMemory is the machine's RAM in bytes, 0 if unknown.
func HostMemory() uint64 {
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) != nil {
		return 0
	}
	return uint64(si.Totalram) * uint64(si.Unit)
}

// Count is how many GPUs b has: 0 for none (a buyer) or when its
// inventory cannot be read.
func Count(b gpu.Backend) int {
	if b == nil {
		return 0
	}
	inv, err := b.Inventory()
	if err != nil {
		return 0
	}
	return len(inv.Devices)
}
