//go:build !unix

package market

// cpuNanos is not measured here: the benchmarks report no cpu-ns/op.
func cpuNanos() int64 { return 0 }
