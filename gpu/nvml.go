package gpu

import (
	"errors"
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/dl"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nvmlLibraryName is the library nvml.New loads by default.
const nvmlLibraryName = "libnvidia-ml.so.1"

// errClosed is returned by a Backend used after Close.
var errClosed = errors.New("gpu: backend closed")

// nvmlGlobal guards go-nvml's package-level state: loading or unloading the
// real library (Init, Shutdown) swaps the function nvml.Return.Error uses,
// without a lock of its own. Init and Shutdown take it for writing; turning a
// Return into text takes it for reading.
var nvmlGlobal sync.RWMutex

// retText is ret's NVML error string, safe against a concurrent Init or
// Shutdown of the real library.
func retText(ret nvml.Return) string {
	nvmlGlobal.RLock()
	defer nvmlGlobal.RUnlock()
	return ret.Error()
}

// nvmlError is a failed NVML call. It unwraps to the nvml.Return, so callers
// can test errors.Is(err, nvml.ERROR_GPU_IS_LOST).
type nvmlError struct {
	op   string
	ret  nvml.Return
	text string
}

func (e *nvmlError) Error() string { return e.op + ": " + e.text }
func (e *nvmlError) Unwrap() error { return e.ret }

func callErr(op string, ret nvml.Return) error {
	return fmt.Errorf("gpu: %w", &nvmlError{op: op, ret: ret, text: retText(ret)})
}

// Open loads the NVIDIA driver's NVML library and returns a Backend over the
// real GPUs. On a machine without the library or driver, or with no GPUs, the
// error wraps ErrNoGPU and carries NVML's reason, e.g.
// "gpu: no GPU available: nvml init: ERROR_LIBRARY_NOT_FOUND (libnvidia-ml.so.1:
// cannot open shared object file: No such file or directory)".
func Open() (Backend, error) {
	b, err := newNVMLBackend(nvml.New(), "nvml", dlopenReason)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// dlopenReason says why the NVML library cannot be loaded. go-nvml turns any
// dlopen failure into ERROR_LIBRARY_NOT_FOUND and drops dlerror's text, so
// this probes once more to recover it.
func dlopenReason() string {
	lib := dl.New(nvmlLibraryName, dl.RTLD_LAZY|dl.RTLD_GLOBAL)
	if err := lib.Open(); err != nil {
		return err.Error()
	}
	_ = lib.Close()
	return "NVIDIA driver library not found"
}

// newNVMLBackend initializes lib and returns a backend over it. lib is the
// real library or a simulator's mock server: the same inventory, telemetry and
// attestation code runs over both. An initialization failure or zero devices
// gives an error wrapping ErrNoGPU; libMissing, when not nil, explains an
// ERROR_LIBRARY_NOT_FOUND. Close shuts lib down.
func newNVMLBackend(lib nvml.Interface, name string, libMissing func() string) (*nvmlBackend, error) {
	nvmlGlobal.Lock()
	ret := lib.Init()
	nvmlGlobal.Unlock()
	if ret != nvml.SUCCESS {
		e := &nvmlError{op: "nvml init", ret: ret, text: retText(ret)}
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND && libMissing != nil {
			e.text += " (" + libMissing() + ")"
		}
		return nil, fmt.Errorf("%w: %w", ErrNoGPU, e)
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS || n == 0 {
		shutdown(lib)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("%w: %w", ErrNoGPU, &nvmlError{op: "nvml device count", ret: ret, text: retText(ret)})
		}
		return nil, fmt.Errorf("%w: nvml reports 0 devices", ErrNoGPU)
	}
	return &nvmlBackend{lib: lib, name: name}, nil
}

func shutdown(lib nvml.Interface) nvml.Return {
	nvmlGlobal.Lock()
	defer nvmlGlobal.Unlock()
	return lib.Shutdown()
}

// nvmlBackend is a Backend over any nvml.Interface. One mutex serializes every
// NVML call, which makes it safe for concurrent use.
type nvmlBackend struct {
	name string

	mu     sync.Mutex
	lib    nvml.Interface
	closed bool
}

func (b *nvmlBackend) Name() string { return b.name }

func (b *nvmlBackend) Inventory() (*Inventory, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, errClosed
	}
	inv, err := readInventory(b.lib)
	if err != nil {
		return nil, err
	}
	inv.Backend = b.name
	return inv, nil
}

func (b *nvmlBackend) Telemetry() ([]Telemetry, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, errClosed
	}
	return readTelemetry(b.lib)
}

func (b *nvmlBackend) Attest(nonce []byte, uuids ...string) ([]Evidence, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, errClosed
	}
	return attest(b.lib, nonce, uuids)
}

// Close shuts NVML down. Later calls to Close do nothing; other methods fail.
func (b *nvmlBackend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	if ret := shutdown(b.lib); ret != nvml.SUCCESS {
		return callErr("nvml shutdown", ret)
	}
	return nil
}
