// Package gpu reads the local GPU inventory and telemetry through NVML, from
// real hardware or from simulated DGX machines built on go-nvml's mock servers.
//
// Files:
//
//	gpu.go        the contract: Device, Inventory, Evidence, Telemetry, Backend
//	nvml.go       Open (real NVML) and the Backend over any nvml.Interface
//	inventory.go  inventory, telemetry and attestation over nvml.Interface,
//	              shared by real and simulated machines
//	market.go     MarketKey, the normalized GPU class
//	sim.go        OpenSim, SimModels, Simulator: go-nvml's mock DGX servers
//	              with telemetry, serials, CC state and sample evidence filled in
//	simdata/      NVIDIA's sample H100 evidence, embedded for the simulator
package gpu

import "errors"

// ErrNoGPU is returned (wrapped, with NVML's own reason) when the machine has
// no usable GPU: the NVML library is missing, the driver is not loaded, or it
// reports zero devices.
var ErrNoGPU = errors.New("gpu: no GPU available")

// AttestationLevel says how much of an offer's hardware claim is backed by
// evidence.
type AttestationLevel string

const (
	// SelfReported means the inventory comes from NVML with no signed evidence.
	SelfReported AttestationLevel = "self-reported"
	// CCEvidence means each GPU carries an SPDM attestation report and
	// certificate chain from confidential-computing mode.
	CCEvidence AttestationLevel = "cc-evidence"
)

// Device is one GPU as NVML describes it.
type Device struct {
	Index                int
	UUID                 string
	Name                 string // NVML product name, e.g. "NVIDIA H100 80GB HBM3"
	Market               string // normalized market key, e.g. "nvidia-h100-sxm5-80gb"
	MemoryBytes          uint64
	PCIBusID             string
	ComputeCapability    string // "major.minor", e.g. "9.0"
	Architecture         string // e.g. "hopper"; "" when unknown
	Serial               string // "" when the device does not report it
	PowerLimitMilliwatts uint32 // 0 when the device does not report it
	ECC                  string // "on", "off", or "" when not reported
	MIGEnabled           bool
	Evidence             *Evidence // nil unless confidential computing is on
}

// Inventory is the whole machine as NVML describes it.
type Inventory struct {
	Backend               string // "nvml" or "sim:dgxh100" etc.
	DriverVersion         string // e.g. "550.54.15"
	CUDADriverVersion     string // e.g. "12.4"
	NVMLVersion           string
	ConfidentialComputing bool
	Devices               []Device
}

// Level is the attestation level the inventory can claim.
func (inv *Inventory) Level() AttestationLevel {
	if len(inv.Devices) == 0 {
		return SelfReported
	}
	for _, d := range inv.Devices {
		if d.Evidence == nil {
			return SelfReported
		}
	}
	return CCEvidence
}

// Evidence is one GPU's confidential-computing attestation evidence, as NVML
// returns it for a caller-chosen nonce.
type Evidence struct {
	UUID      string
	Nonce     []byte // 32 bytes, the nonce the report was requested with
	Report    []byte // SPDM GET_MEASUREMENTS request ‖ MEASUREMENTS response
	CertChain []byte // the GPU's attestation certificate chain (PEM), leaf first
}

// Telemetry is one sample of one GPU's live counters.
type Telemetry struct {
	UUID               string
	UtilizationPercent uint32
	MemoryUsedBytes    uint64
	MemoryTotalBytes   uint64
	TemperatureC       uint32
	PowerMilliwatts    uint32
	EnergyMillijoules  uint64 // total since driver load; 0 when not reported
}

// Backend is a source of GPU facts: real NVML or a simulated machine.
// Implementations are safe for concurrent use.
type Backend interface {
	// Name is "nvml" for real hardware or "sim:<model>" for a simulation.
	Name() string
	// Inventory lists the GPUs. With confidential computing on, each
	// Device carries Evidence for a fresh random nonce.
	Inventory() (*Inventory, error)
	// Telemetry samples every GPU once.
	Telemetry() ([]Telemetry, error)
	// Attest asks each listed GPU (all when uuids is empty) for evidence over
	// the caller's 32-byte nonce. It fails when confidential computing is off.
	Attest(nonce []byte, uuids ...string) ([]Evidence, error)
	// Close releases NVML.
	Close() error
}
