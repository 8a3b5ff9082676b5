package simnet

import (
	"context"
	"syscall"
	"testing"
	"time"
)

// BenchmarkIdleNodes: the CPU that idle Suanli nodes cost a second on the
// simulated network, once they are up and their offers published (40 nodes,
// 10 providers: heartbeats, DHT and book upkeep, Badger, timers). CPU time
// of the process, not wall: the machine is shared. What this costs a node
// decides how many fit on a core, in a simulation and on a small machine.
//
//	go test -run '^$' -bench IdleNodes -benchtime 3x ./node/simnet/
func BenchmarkIdleNodes(b *testing.B) {
	const nodes = 40
	cfg := Config{Nodes: nodes, Regions: 4, Samples: 1, Dir: b.TempDir()}
	if err := cfg.defaults(); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s := newSim(cfg)
	defer s.close()
	net, err := s.startNodes(ctx, cfg.Dir)
	if net != nil {
		defer net.close()
	}
	if err != nil {
		b.Fatal(err)
	}
	time.Sleep(10 * time.Second) // past the start-up's lookups and syncs
	b.ResetTimer()
	cpu0 := cpuNow()
	for range b.N {
		time.Sleep(5 * time.Second)
	}
	b.ReportMetric(float64(cpuNow()-cpu0)/float64(b.N)/5/nodes/1e3, "cpu-µs/node-s")
}

// cpuNow is the CPU time (user and system) this process has used, in ns.
func cpuNow() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
