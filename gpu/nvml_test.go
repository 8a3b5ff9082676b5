package gpu

import (
	"errors"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// On a machine without the NVIDIA driver, Open fails cleanly with ErrNoGPU and
// NVML's reason; where a GPU exists, the hardware tests cover Open instead.
func TestOpenWithoutGPU(t *testing.T) {
	b, err := Open()
	if err == nil {
		b.Close()
		t.Skip("this machine has a GPU")
	}
	if !errors.Is(err, ErrNoGPU) {
		t.Fatalf("Open() error = %v, want one wrapping ErrNoGPU", err)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, ErrNoGPU.Error()+": nvml init: ") {
		t.Errorf("Open() error = %q, want it to start %q", msg, ErrNoGPU.Error()+": nvml init: ")
	}
	if errors.Is(err, nvml.ERROR_LIBRARY_NOT_FOUND) {
		// The reason goes beyond NVML's code: dlopen's own words.
		if !strings.Contains(msg, "ERROR_LIBRARY_NOT_FOUND (") || !strings.Contains(msg, nvmlLibraryName) {
			t.Errorf("Open() error = %q, want ERROR_LIBRARY_NOT_FOUND with dlopen's reason naming %s", msg, nvmlLibraryName)
		}
	}
	t.Logf("Open() error: %v", err)
}

func TestNVMLBackendNoDevices(t *testing.T) {
	srv, err := server.New() // a machine with no GPUs
	if err != nil {
		t.Fatal(err)
	}
	_, err = newNVMLBackend(srv, "empty", nil)
	if !errors.Is(err, ErrNoGPU) || !strings.Contains(err.Error(), "0 devices") {
		t.Errorf("newNVMLBackend(no GPUs) error = %v, want ErrNoGPU: ... 0 devices", err)
	}
}

func TestNVMLBackendInitFails(t *testing.T) {
	srv, err := server.New()
	if err != nil {
		t.Fatal(err)
	}
	srv.InitFunc = func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED }
	_, err = newNVMLBackend(srv, "broken", func() string { return "unused" })
	if !errors.Is(err, ErrNoGPU) || !errors.Is(err, nvml.ERROR_DRIVER_NOT_LOADED) {
		t.Fatalf("newNVMLBackend(driver not loaded) error = %v, want ErrNoGPU and ERROR_DRIVER_NOT_LOADED", err)
	}
	if want := "gpu: no GPU available: nvml init: ERROR_DRIVER_NOT_LOADED"; err.Error() != want {
		t.Errorf("newNVMLBackend(driver not loaded) error = %q, want %q", err, want)
	}
}

func TestCUDAVersion(t *testing.T) {
	for in, want := range map[int]string{12040: "12.4", 12060: "12.6", 11080: "11.8", 13000: "13.0", 0: ""} {
		if got := cudaVersion(in); got != want {
			t.Errorf("cudaVersion(%d) = %q, want %q", in, got, want)
		}
	}
}
