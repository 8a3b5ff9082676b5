//go:build unix

package store

import (
	"io"
	"log/slog"
	"syscall"
	"testing"
	"time"
)

// BenchmarkIdleSmallStores: the CPU that 100 idle Small stores cost a
// second, with Badger's two compactors each (the old Small store) and
// with compactLoop. CPU time, not wall: the machine is shared.
//
//	go test -run '^$' -bench IdleSmallStores -benchtime 3x ./node/internal/store/
func BenchmarkIdleSmallStores(b *testing.B) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, c := range []struct {
		name       string
		compactors int
	}{{"badger-compactors", 2}, {"compactLoop", 0}} {
		b.Run(c.name, func(b *testing.B) {
			const stores = 100
			for range stores {
				s, err := Open(b.TempDir(), Options{Logger: quiet, Small: true, compactors: c.compactors})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
			}
			time.Sleep(time.Second) // past their start-up
			b.ResetTimer()
			cpu0 := cpuNanos()
			for range b.N {
				time.Sleep(time.Second)
			}
			b.ReportMetric(float64(cpuNanos()-cpu0)/float64(b.N)/stores/1e3, "cpu-µs/store-s")
		})
	}
}

// cpuNanos is the CPU time (user and system) this process has used.
func cpuNanos() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
