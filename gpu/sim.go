package gpu

import (
	"crypto/sha256"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxb200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// Simulator is implemented by simulated backends (OpenSim): it lets a lease
// mark GPUs busy, so that their telemetry shows load.
type Simulator interface {
	// SetBusy marks the GPU busy (utilization 85-100%, power near the
	// limit, most memory used) or idle. An unknown uuid is ignored.
	SetBusy(uuid string, busy bool)
}

// NVIDIA's published sample evidence for an H100 (see simdata/README.md),
// served by the simulated Hopper machines.
var (
	//go:embed simdata/hopperAttestationReport.txt
	simReportHex string
	//go:embed simdata/hopperCertChain.txt
	simCertChain []byte

	simReport = mustHex(simReportHex)
)

// simCCDriver is the driver the sample report names; the simulated Hopper
// machines report it so a verifier's driver-version check can pass.
const simCCDriver = "550.90.07"

func mustHex(s string) []byte {
	b, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil {
		panic("gpu: embedded simulator report: " + err.Error())
	}
	return b
}

// simModel describes one simulated machine.
type simModel struct {
	newServer   func() *server.Server
	cc          bool     // confidential computing on, with sample evidence
	powerLimitW uint32   // per-GPU power management limit
	idleW       [2]int   // idle power range
	busIDs      [8]uint8 // PCI bus numbers as on the real machine
}

var simModels = map[string]simModel{
	"dgxa100": {
		newServer:   dgxa100.New,
		powerLimitW: 400,
		idleW:       [2]int{50, 85},
		busIDs:      [8]uint8{0x07, 0x0f, 0x47, 0x4e, 0x87, 0x90, 0xb7, 0xbd},
	},
	"dgxh100": {
		newServer:   dgxh100.New,
		cc:          true,
		powerLimitW: 700,
		idleW:       [2]int{70, 120},
		busIDs:      [8]uint8{0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb},
	},
	"dgxh200": {
		newServer:   dgxh200.New,
		cc:          true,
		powerLimitW: 700,
		idleW:       [2]int{75, 125},
		busIDs:      [8]uint8{0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb},
	},
	"dgxb200": {
		newServer:   dgxb200.New,
		powerLimitW: 1000,
		idleW:       [2]int{130, 190},
		busIDs:      [8]uint8{0x1b, 0x43, 0x52, 0x61, 0x9d, 0xc3, 0xd1, 0xdf},
	},
}

// SimModels lists the machines OpenSim can simulate, sorted.
func SimModels() []string {
	ms := make([]string, 0, len(simModels))
	for m := range simModels {
		ms = append(ms, m)
	}
	slices.Sort(ms)
	return ms
}

// OpenSim returns a simulated machine (one of SimModels) built on go-nvml's
// mock NVML server for it, read through the same code as real hardware. GPU
// UUIDs, serials and telemetry derive from seed, so two simulated providers
// with different seeds have different GPUs. dgxh100 and dgxh200 run in
// confidential-computing mode and serve NVIDIA's published sample evidence
// (whatever nonce is asked, the report is the sample's, made for its own
// nonce). The Backend also implements Simulator.
func OpenSim(model string, seed int64) (Backend, error) {
	b, err := openSim(model, seed, time.Now)
	if err != nil {
		return nil, err // not a typed nil in a non-nil Backend
	}
	return b, nil
}

// ErrNoGPUWanted is what Choose returns for a node started without GPUs.
var ErrNoGPUWanted = errors.New("started without GPUs (buyer only)")

// Choose is the GPUs a node serves: none when off (ErrNoGPUWanted), given
// when not nil, else OpenMachine(model, seed).
func Choose(off bool, given Backend, model string, seed int64) (Backend, error) {
	switch {
	case off:
		return nil, ErrNoGPUWanted
	case given != nil:
		return given, nil
	}
	return OpenMachine(model, seed)
}

// OpenMachine opens the GPUs a daemon serves: the simulated machine
// model (OpenSim) when model is not empty, else the real GPUs (Open).
func OpenMachine(model string, seed int64) (Backend, error) {
	if model != "" {
		return OpenSim(model, seed)
	}
	return Open()
}

func openSim(model string, seed int64, now func() time.Time) (*simBackend, error) {
	spec, ok := simModels[model]
	if !ok {
		return nil, fmt.Errorf("gpu: unknown simulated model %q (have %s)", model, strings.Join(SimModels(), ", "))
	}
	sim := newSimulator(model, seed, spec, now)
	b, err := newNVMLBackend(sim.srv, "sim:"+model, nil)
	if err != nil {
		return nil, err
	}
	return &simBackend{nvmlBackend: b, sim: sim}, nil
}

// simBackend is the NVML backend over a simulator's server, plus SetBusy.
type simBackend struct {
	*nvmlBackend
	sim *simulator
}

var _ Simulator = (*simBackend)(nil)

func (b *simBackend) SetBusy(uuid string, busy bool) { b.sim.setBusy(uuid, busy) }

// simulator holds the simulated machine's state. Its readings are a pure
// function of (model, seed, GPU, metric, second, busy), so a clock that
// repeats gives readings that repeat.
type simulator struct {
	model string
	seed  int64
	spec  simModel
	now   func() time.Time
	salt  uint64
	srv   *simServer

	mu   sync.Mutex
	gpus []simGPUState
}

type simGPUState struct {
	busy     bool
	since    time.Time
	energyMJ float64 // total energy at since
}

func newSimulator(model string, seed int64, spec simModel, now func() time.Time) *simulator {
	s := &simulator{model: model, seed: seed, spec: spec, now: now}
	h := sha256.Sum256([]byte(model))
	s.salt = binary.BigEndian.Uint64(h[:8])

	inner := spec.newServer()
	if spec.cc {
		inner.DriverVersion = simCCDriver
		inner.NvmlVersion = "12." + simCCDriver
	}
	srv := &simServer{Server: inner, sim: s}
	start := now()
	for i, d := range inner.Devices {
		md := d.(*server.Device)
		bus := uint8(i)
		if i < len(spec.busIDs) {
			bus = spec.busIDs[i]
		}
		// The mock gives random UUIDs and bus IDs by index; replace both so
		// the server's own lookups agree with what the devices report.
		md.UUID = s.uuid(i)
		md.PciBusID = fmt.Sprintf("%08x:%02x:00.0", 0, bus)
		sd := &simDevice{Device: md, sim: s, index: i, serial: s.serial(i)}
		sd.pci = pciInfo(md.Config.PciDeviceId, bus)
		srv.devs = append(srv.devs, sd)

		// Energy since a driver load 1 to 30 days before the simulation.
		uptime := time.Duration(1+s.rnd(i, metricUptime, 0)%30) * 24 * time.Hour
		s.gpus = append(s.gpus, simGPUState{
			since:    start,
			energyMJ: s.meanPowerMW(false) * uptime.Seconds(),
		})
	}
	s.srv = srv
	return s
}

// pciInfo is the PCI identity of a GPU on bus bus, domain 0.
func pciInfo(deviceID uint32, bus uint8) nvml.PciInfo {
	p := nvml.PciInfo{Bus: uint32(bus), PciDeviceId: deviceID}
	putCString(p.BusId[:], fmt.Sprintf("%08x:%02x:00.0", 0, bus))
	putCString(p.BusIdLegacy[:], fmt.Sprintf("%04x:%02x:00.0", 0, bus))
	return p
}

func putCString(dst []int8, s string) {
	for i := 0; i < len(s) && i < len(dst)-1; i++ {
		dst[i] = int8(s[i])
	}
}

// Metrics, each drawing its own pseudo-random stream.
const (
	metricUptime uint64 = iota + 1
	metricUtil
	metricMemUtil
	metricMem
	metricTemp
	metricTempBase
	metricPower
)

// rnd is a pseudo-random number for GPU i, a metric and a time bucket,
// fixed by the simulator's model and seed (splitmix64 finalizer).
func (s *simulator) rnd(i int, metric uint64, bucket int64) uint64 {
	x := s.salt ^ uint64(s.seed)*0x9e3779b97f4a7c15 ^ uint64(i+1)*0xbf58476d1ce4e5b9 ^
		metric*0x94d049bb133111eb ^ uint64(bucket)*0xd6e8feb86659fd93
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// between is a number in [lo, hi] drawn from r.
func between(r uint64, lo, hi int) int { return lo + int(r%uint64(hi-lo+1)) }

// uuid is GPU i's UUID, in NVML's "GPU-8-4-4-4-12" form (a version 4 layout).
func (s *simulator) uuid(i int) string {
	h := sha256.Sum256(fmt.Appendf(nil, "suanli-sim-uuid/%s/%d/%d", s.model, s.seed, i))
	h[6] = h[6]&0x0f | 0x40
	h[8] = h[8]&0x3f | 0x80
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

// serial is GPU i's 13-digit board serial number.
func (s *simulator) serial(i int) string {
	h := sha256.Sum256(fmt.Appendf(nil, "suanli-sim-serial/%s/%d/%d", s.model, s.seed, i))
	return fmt.Sprintf("1%012d", binary.BigEndian.Uint64(h[:8])%1_000_000_000_000)
}

// meanPowerMW is the average draw idle or busy, which energy accrues at.
func (s *simulator) meanPowerMW(busy bool) float64 {
	if busy {
		return 0.915 * float64(s.spec.powerLimitW) * 1000
	}
	return float64(s.spec.idleW[0]+s.spec.idleW[1]) / 2 * 1000
}

// state is GPU i's state now: whether it is busy, the second it is in, and
// its total energy.
func (s *simulator) state(i int) (busy bool, sec int64, energyMJ uint64) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.gpus[i]
	return g.busy, now.Unix(), uint64(g.energyMJ + s.meanPowerMW(g.busy)*max(0, now.Sub(g.since).Seconds()))
}

func (s *simulator) setBusy(uuid string, busy bool) {
	i := slices.IndexFunc(s.srv.devs, func(d *simDevice) bool { return d.UUID == uuid })
	if i < 0 {
		return
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	g := &s.gpus[i]
	if g.busy == busy {
		return
	}
	g.energyMJ += s.meanPowerMW(g.busy) * max(0, now.Sub(g.since).Seconds())
	g.since = now
	g.busy = busy
}

// simServer is go-nvml's mock server with its devices wrapped. It answers
// device lookups itself, so that every handle is a *simDevice, and the
// confidential-computing state the mock leaves nil. Methods taking arguments
// are answered here rather than through the mock's XxxFunc fields because the
// generated mock records every call's arguments forever.
type simServer struct {
	*server.Server
	sim  *simulator
	devs []*simDevice
}

var _ nvml.Interface = (*simServer)(nil)

func (s *simServer) Extensions() nvml.ExtendedInterface { return s }
func (s *simServer) LookupSymbol(string) error          { return nil }

func (s *simServer) DeviceGetCount() (int, nvml.Return) { return len(s.devs), nvml.SUCCESS }

func (s *simServer) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	if i < 0 || i >= len(s.devs) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return s.devs[i], nvml.SUCCESS
}

func (s *simServer) DeviceGetHandleByUUID(uuid string) (nvml.Device, nvml.Return) {
	for _, d := range s.devs {
		if d.UUID == uuid {
			return d, nvml.SUCCESS
		}
	}
	return nil, nvml.ERROR_NOT_FOUND
}

func (s *simServer) DeviceGetHandleByPciBusId(busID string) (nvml.Device, nvml.Return) {
	for _, d := range s.devs {
		if d.PciBusID == busID || cString(d.pci.BusIdLegacy[:]) == busID {
			return d, nvml.SUCCESS
		}
	}
	return nil, nvml.ERROR_NOT_FOUND
}

func (s *simServer) SystemGetConfComputeState() (nvml.ConfComputeSystemState, nvml.Return) {
	if !s.sim.spec.cc {
		return nvml.ConfComputeSystemState{
			Environment: nvml.CC_SYSTEM_ENVIRONMENT_UNAVAILABLE,
			CcFeature:   nvml.CC_SYSTEM_FEATURE_DISABLED,
		}, nvml.SUCCESS
	}
	return nvml.ConfComputeSystemState{
		Environment:  nvml.CC_SYSTEM_ENVIRONMENT_PROD,
		CcFeature:    nvml.CC_SYSTEM_FEATURE_ENABLED,
		DevToolsMode: nvml.CC_SYSTEM_DEVTOOLS_MODE_OFF,
	}, nvml.SUCCESS
}

// simDevice is one mock GPU with the calls the mock leaves nil: serial,
// power limit, ECC, PCI bus ID, telemetry and attestation.
type simDevice struct {
	*server.Device
	sim    *simulator
	index  int
	serial string
	pci    nvml.PciInfo
}

var _ nvml.Device = (*simDevice)(nil)

func (d *simDevice) GetPciInfo() (nvml.PciInfo, nvml.Return) { return d.pci, nvml.SUCCESS }
func (d *simDevice) GetSerial() (string, nvml.Return)        { return d.serial, nvml.SUCCESS }

func (d *simDevice) GetPowerManagementLimit() (uint32, nvml.Return) {
	return d.sim.spec.powerLimitW * 1000, nvml.SUCCESS
}

func (d *simDevice) GetEnforcedPowerLimit() (uint32, nvml.Return) {
	return d.GetPowerManagementLimit()
}

func (d *simDevice) GetEccMode() (nvml.EnableState, nvml.EnableState, nvml.Return) {
	return nvml.FEATURE_ENABLED, nvml.FEATURE_ENABLED, nvml.SUCCESS
}

func (d *simDevice) GetUtilizationRates() (nvml.Utilization, nvml.Return) {
	busy, sec, _ := d.sim.state(d.index)
	rg, rm := d.sim.rnd(d.index, metricUtil, sec), d.sim.rnd(d.index, metricMemUtil, sec)
	if busy {
		return nvml.Utilization{Gpu: uint32(between(rg, 85, 100)), Memory: uint32(between(rm, 40, 80))}, nvml.SUCCESS
	}
	return nvml.Utilization{Gpu: uint32(between(rg, 0, 3)), Memory: uint32(between(rm, 0, 2))}, nvml.SUCCESS
}

func (d *simDevice) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	busy, sec, _ := d.sim.state(d.index)
	total := d.MemoryInfo.Total
	r := d.sim.rnd(d.index, metricMem, sec)
	var used uint64
	if busy {
		used = total / 100 * uint64(between(r, 70, 95))
	} else {
		used = uint64(between(r, 256, 1024)) << 20
	}
	used = min(used, total)
	return nvml.Memory{Total: total, Used: used, Free: total - used}, nvml.SUCCESS
}

func (d *simDevice) GetTemperature(sensor nvml.TemperatureSensors) (uint32, nvml.Return) {
	if sensor != nvml.TEMPERATURE_GPU {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	busy, sec, _ := d.sim.state(d.index)
	r := d.sim.rnd(d.index, metricTemp, sec)
	if busy {
		return uint32(between(r, 60, 80)), nvml.SUCCESS
	}
	base := between(d.sim.rnd(d.index, metricTempBase, 0), 30, 40) // this GPU's spot in the airflow
	return uint32(base + between(r, 0, 5)), nvml.SUCCESS
}

func (d *simDevice) GetPowerUsage() (uint32, nvml.Return) {
	busy, sec, _ := d.sim.state(d.index)
	r := d.sim.rnd(d.index, metricPower, sec)
	if busy {
		limit := int(d.sim.spec.powerLimitW) * 1000
		return uint32(between(r, limit*85/100, limit*98/100)), nvml.SUCCESS
	}
	return uint32(between(r, d.sim.spec.idleW[0]*1000, d.sim.spec.idleW[1]*1000)), nvml.SUCCESS
}

func (d *simDevice) GetTotalEnergyConsumption() (uint64, nvml.Return) {
	_, _, e := d.sim.state(d.index)
	return e, nvml.SUCCESS
}

func (d *simDevice) GetConfComputeGpuAttestationReport(rep *nvml.ConfComputeGpuAttestationReport) nvml.Return {
	if !d.sim.spec.cc {
		return nvml.ERROR_NOT_SUPPORTED
	}
	if rep == nil {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	// The sample report, whatever rep.Nonce asks for.
	rep.AttestationReportSize = uint32(copy(rep.AttestationReport[:], simReport))
	rep.IsCecAttestationReportPresent = 0
	rep.CecAttestationReportSize = 0
	return nvml.SUCCESS
}

func (d *simDevice) GetConfComputeGpuCertificate() (nvml.ConfComputeGpuCertificate, nvml.Return) {
	var c nvml.ConfComputeGpuCertificate
	if !d.sim.spec.cc {
		return c, nvml.ERROR_NOT_SUPPORTED
	}
	c.AttestationCertChainSize = uint32(copy(c.AttestationCertChain[:], simCertChain))
	return c, nvml.SUCCESS
}
