package gpu

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NonceSize is the length of the nonce an attestation report is requested
// with (NVML's CC_GPU_CEC_NONCE_SIZE).
const NonceSize = nvml.CC_GPU_CEC_NONCE_SIZE

// Symbols newer than some drivers still in use. go-nvml links with
// unresolved symbols ignored, so calling one the loaded driver lacks would
// jump to address zero: look them up first.
const (
	symConfComputeState = "nvmlSystemGetConfComputeState"
	symAttestReport     = "nvmlDeviceGetConfComputeGpuAttestationReport"
	symGpuCertificate   = "nvmlDeviceGetConfComputeGpuCertificate"
	symArchitecture     = "nvmlDeviceGetArchitecture"
)

func hasSymbol(lib nvml.Interface, name string) bool {
	return lib.Extensions().LookupSymbol(name) == nil
}

// readInventory lists the machine behind lib. With confidential computing on,
// every device carries evidence for one fresh random nonce.
func readInventory(lib nvml.Interface) (*Inventory, error) {
	inv := &Inventory{}
	if v, ret := lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		inv.DriverVersion = v
	}
	if v, ret := lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		inv.CUDADriverVersion = cudaVersion(v)
	}
	if v, ret := lib.SystemGetNVMLVersion(); ret == nvml.SUCCESS {
		inv.NVMLVersion = v
	}
	inv.ConfidentialComputing = ccOn(lib)

	var nonce []byte
	if inv.ConfidentialComputing {
		nonce = make([]byte, NonceSize)
		if _, err := rand.Read(nonce); err != nil {
			return nil, fmt.Errorf("gpu: nonce: %w", err)
		}
	}
	handles, err := deviceHandles(lib)
	if err != nil {
		return nil, err
	}
	for i, h := range handles {
		d, err := readDevice(lib, i, h)
		if err != nil {
			return nil, err
		}
		if inv.ConfidentialComputing {
			if d.Evidence, err = readEvidence(lib, h, d.UUID, nonce); err != nil {
				return nil, err
			}
		}
		inv.Devices = append(inv.Devices, d)
	}
	return inv, nil
}

// cudaVersion turns NVML's CUDA driver version (1000*major + 10*minor) into
// "major.minor": 12040 is "12.4".
func cudaVersion(v int) string {
	if v <= 0 {
		return ""
	}
	return fmt.Sprintf("%d.%d", v/1000, v%1000/10)
}

// ccOn says whether the system runs in confidential-computing mode. Any
// failure to ask counts as off.
func ccOn(lib nvml.Interface) bool {
	if !hasSymbol(lib, symConfComputeState) {
		return false
	}
	st, ret := lib.SystemGetConfComputeState()
	return ret == nvml.SUCCESS && st.CcFeature == nvml.CC_SYSTEM_FEATURE_ENABLED
}

func deviceHandles(lib nvml.Interface) ([]nvml.Device, error) {
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, callErr("device count", ret)
	}
	hs := make([]nvml.Device, n)
	for i := range hs {
		h, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, callErr(fmt.Sprintf("device %d", i), ret)
		}
		hs[i] = h
	}
	return hs, nil
}

// readDevice describes one device. UUID, name and memory are required;
// everything else is left empty where the device does not answer.
func readDevice(lib nvml.Interface, index int, h nvml.Device) (Device, error) {
	d := Device{Index: index}
	var ret nvml.Return
	if d.UUID, ret = h.GetUUID(); ret != nvml.SUCCESS {
		return d, callErr(fmt.Sprintf("device %d uuid", index), ret)
	}
	if d.Name, ret = h.GetName(); ret != nvml.SUCCESS {
		return d, callErr(fmt.Sprintf("device %d name", index), ret)
	}
	mem, ret := h.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return d, callErr(fmt.Sprintf("device %d memory", index), ret)
	}
	d.MemoryBytes = mem.Total
	d.Market = MarketKey(d.Name, d.MemoryBytes)

	if pci, ret := h.GetPciInfo(); ret == nvml.SUCCESS {
		d.PCIBusID = cString(pci.BusId[:])
	}
	if major, minor, ret := h.GetCudaComputeCapability(); ret == nvml.SUCCESS {
		d.ComputeCapability = fmt.Sprintf("%d.%d", major, minor)
	}
	if hasSymbol(lib, symArchitecture) {
		if arch, ret := h.GetArchitecture(); ret == nvml.SUCCESS {
			d.Architecture = archName(arch)
		}
	}
	if s, ret := h.GetSerial(); ret == nvml.SUCCESS {
		d.Serial = s
	}
	if p, ret := h.GetPowerManagementLimit(); ret == nvml.SUCCESS {
		d.PowerLimitMilliwatts = p
	}
	if cur, _, ret := h.GetEccMode(); ret == nvml.SUCCESS {
		d.ECC = "off"
		if cur == nvml.FEATURE_ENABLED {
			d.ECC = "on"
		}
	}
	if cur, _, ret := h.GetMigMode(); ret == nvml.SUCCESS {
		d.MIGEnabled = cur == nvml.DEVICE_MIG_ENABLE
	}
	return d, nil
}

// cString is the NUL-terminated string at the start of b.
func cString(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

func archName(a nvml.DeviceArchitecture) string {
	switch a {
	case nvml.DEVICE_ARCH_KEPLER:
		return "kepler"
	case nvml.DEVICE_ARCH_MAXWELL:
		return "maxwell"
	case nvml.DEVICE_ARCH_PASCAL:
		return "pascal"
	case nvml.DEVICE_ARCH_VOLTA:
		return "volta"
	case nvml.DEVICE_ARCH_TURING:
		return "turing"
	case nvml.DEVICE_ARCH_AMPERE:
		return "ampere"
	case nvml.DEVICE_ARCH_ADA:
		return "ada"
	case nvml.DEVICE_ARCH_HOPPER:
		return "hopper"
	case nvml.DEVICE_ARCH_BLACKWELL:
		return "blackwell"
	case nvml.DEVICE_ARCH_RUBIN:
		return "rubin"
	}
	return ""
}

// readEvidence asks one device for its attestation report over nonce and for
// its attestation certificate chain.
func readEvidence(lib nvml.Interface, h nvml.Device, uuid string, nonce []byte) (*Evidence, error) {
	if !hasSymbol(lib, symAttestReport) || !hasSymbol(lib, symGpuCertificate) {
		return nil, fmt.Errorf("gpu: %s: this NVML has no confidential-computing attestation calls", uuid)
	}
	// Large (about 12 KiB): on the heap, not on every caller's stack.
	rep := new(nvml.ConfComputeGpuAttestationReport)
	copy(rep.Nonce[:], nonce)
	if ret := h.GetConfComputeGpuAttestationReport(rep); ret != nvml.SUCCESS {
		return nil, callErr(uuid+" attestation report", ret)
	}
	cert, ret := h.GetConfComputeGpuCertificate()
	if ret != nvml.SUCCESS {
		return nil, callErr(uuid+" attestation certificate", ret)
	}
	report := sized(rep.AttestationReport[:], rep.AttestationReportSize)
	chain := sized(cert.AttestationCertChain[:], cert.AttestationCertChainSize)
	if len(report) == 0 || len(chain) == 0 {
		return nil, fmt.Errorf("gpu: %s: empty attestation report or certificate chain", uuid)
	}
	return &Evidence{
		UUID:      uuid,
		Nonce:     bytes.Clone(nonce),
		Report:    report,
		CertChain: chain,
	}, nil
}

// sized copies the first n bytes of buf, never reading past its end.
func sized(buf []byte, n uint32) []byte {
	return bytes.Clone(buf[:min(int(n), len(buf))])
}

// attest gathers evidence over nonce from the listed devices, all of them
// when uuids is empty.
func attest(lib nvml.Interface, nonce []byte, uuids []string) ([]Evidence, error) {
	if len(nonce) != NonceSize {
		return nil, fmt.Errorf("gpu: attest: nonce is %d bytes, want %d", len(nonce), NonceSize)
	}
	if !ccOn(lib) {
		return nil, errors.New("gpu: attest: confidential computing is off")
	}
	handles, err := deviceHandles(lib)
	if err != nil {
		return nil, err
	}
	byUUID := make(map[string]nvml.Device, len(handles))
	var all []string
	for i, h := range handles {
		u, ret := h.GetUUID()
		if ret != nvml.SUCCESS {
			return nil, callErr(fmt.Sprintf("device %d uuid", i), ret)
		}
		byUUID[u] = h
		all = append(all, u)
	}
	if len(uuids) == 0 {
		uuids = all
	}
	out := make([]Evidence, 0, len(uuids))
	for _, u := range uuids {
		h, ok := byUUID[u]
		if !ok {
			return nil, fmt.Errorf("gpu: attest: no GPU %q", u)
		}
		ev, err := readEvidence(lib, h, u, nonce)
		if err != nil {
			return nil, err
		}
		out = append(out, *ev)
	}
	return out, nil
}

// readTelemetry samples every device once. A counter the device does not
// report reads 0; a lost GPU is an error.
func readTelemetry(lib nvml.Interface) ([]Telemetry, error) {
	handles, err := deviceHandles(lib)
	if err != nil {
		return nil, err
	}
	out := make([]Telemetry, 0, len(handles))
	for i, h := range handles {
		var t Telemetry
		var ret nvml.Return
		if t.UUID, ret = h.GetUUID(); ret != nvml.SUCCESS {
			return nil, callErr(fmt.Sprintf("device %d uuid", i), ret)
		}
		lost := false
		ok := func(ret nvml.Return) bool {
			lost = lost || ret == nvml.ERROR_GPU_IS_LOST
			return ret == nvml.SUCCESS
		}
		if u, ret := h.GetUtilizationRates(); ok(ret) {
			t.UtilizationPercent = u.Gpu
		}
		if m, ret := h.GetMemoryInfo(); ok(ret) {
			t.MemoryUsedBytes, t.MemoryTotalBytes = m.Used, m.Total
		}
		if c, ret := h.GetTemperature(nvml.TEMPERATURE_GPU); ok(ret) {
			t.TemperatureC = c
		}
		if p, ret := h.GetPowerUsage(); ok(ret) {
			t.PowerMilliwatts = p
		}
		if e, ret := h.GetTotalEnergyConsumption(); ok(ret) {
			t.EnergyMillijoules = e
		}
		if lost {
			return nil, callErr(t.UUID+" telemetry", nvml.ERROR_GPU_IS_LOST)
		}
		out = append(out, t)
	}
	return out, nil
}
