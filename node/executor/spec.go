package executor

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Spec is what a buyer's bid asks the provider to run on the leased
// GPUs, as it travels from buyer to provider and is kept with the lease:
// the executor to use and its inputs. The provider's executor runs it.
type Spec struct {
	// Executor is "process", "docker" or "slurm"; empty: docker when Image is set,
	// process otherwise.
	Executor string `json:"executor,omitempty"`
	// Command is the argv (process), or the container's command (docker;
	// empty: the image's own).
	Command []string `json:"command,omitempty"`
	// Image is the container image (docker).
	Image string `json:"image,omitempty"`
	// Ports are container TCP ports to publish (docker).
	Ports []uint16 `json:"ports,omitempty"`
	// SSHKey is an authorized_keys line for root in the container (docker).
	SSHKey string `json:"ssh_key,omitempty"`
	// WritableRoot asks for a writable root filesystem (docker).
	WritableRoot bool `json:"writable_root,omitempty"`
}

// Bounds of a Spec.
const (
	maxCommandArgs  = 256
	maxCommandBytes = 64 << 10
	maxImageRef     = 512
	maxSSHKey       = 16 << 10
)

// Empty reports whether the spec asks to run nothing (the GPUs are only
// reserved).
func (w Spec) Empty() bool {
	return w.Executor == "" && len(w.Command) == 0 && w.Image == "" && len(w.Ports) == 0 && w.SSHKey == ""
}

// ExecutorName is the executor the spec asks for.
func (w Spec) ExecutorName() string {
	switch {
	case w.Executor != "":
		return w.Executor
	case w.Image != "":
		return Docker
	}
	return Process
}

// Validate checks the spec's shape (what an executor checks against the
// provider's rules comes later).
func (w Spec) Validate() error {
	switch w.ExecutorName() {
	case Process:
		if len(w.Command) == 0 {
			return errors.New("workload: the process executor needs a command")
		}
		if w.Image != "" || len(w.Ports) > 0 || w.SSHKey != "" || w.WritableRoot {
			return errors.New("workload: an image, ports, an SSH key or a writable root need the docker executor")
		}
	case Docker:
		if w.Image == "" {
			return errors.New("workload: the docker executor needs an image")
		}
	case Slurm:
		if len(w.Command) == 0 {
			return errors.New("workload: the slurm executor needs a command (its batch script)")
		}
		if w.Image != "" || len(w.Ports) > 0 || w.SSHKey != "" || w.WritableRoot {
			return errors.New("workload: the slurm executor runs a command: no image, ports, SSH key or writable root")
		}
	default:
		return fmt.Errorf("workload: unknown executor %q (want process, docker or slurm)", w.Executor)
	}
	size := 0
	for _, a := range w.Command {
		size += len(a)
	}
	switch {
	case len(w.Command) > maxCommandArgs || size > maxCommandBytes:
		return fmt.Errorf("workload: command of %d args, %d bytes: at most %d and %d", len(w.Command), size, maxCommandArgs, maxCommandBytes)
	case len(w.Image) > maxImageRef:
		return fmt.Errorf("workload: image reference of %d bytes, at most %d", len(w.Image), maxImageRef)
	case len(w.Ports) > MaxPorts:
		return fmt.Errorf("workload: %d ports, at most %d", len(w.Ports), MaxPorts)
	case len(w.SSHKey) > maxSSHKey || strings.ContainsAny(strings.TrimSpace(w.SSHKey), "\n\r\x00"):
		return errors.New("workload: the SSH key must be one authorized_keys line")
	}
	if w.Image != "" {
		if _, err := ParseImage(w.Image); err != nil {
			return fmt.Errorf("workload: %w", err)
		}
	}
	for i, p := range w.Ports {
		if p == 0 || slices.Contains(w.Ports[:i], p) {
			return fmt.Errorf("workload: port %d: want distinct ports 1-65535", p)
		}
	}
	return nil
}
