//go:build unix

package market

import "syscall"

// cpuNanos is the CPU time (user and system) this process has used, in
// nanoseconds: on a shared machine, unlike wall time, it leaves out the
// time the benchmark spent waiting for a core.
func cpuNanos() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
