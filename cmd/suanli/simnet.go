package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"syscall"
	"time"

	"github.com/suanli/suanli/node/simnet"
)

func cmdSimnet(e *env, args []string) error {
	fs := flag.NewFlagSet("simnet", flag.ContinueOnError)
	var cfg simnet.Config
	fs.IntVar(&cfg.Nodes, "nodes", 100, "`N` Suanli nodes")
	fs.IntVar(&cfg.Regions, "regions", 4, "`R` regions (CN-SH, CN-GZ, CN-NM, CN-GZ-W, then CN-R5...)")
	fs.DurationVar(&cfg.Intra, "intra", 2*time.Millisecond, "one-way latency inside a region")
	fs.DurationVar(&cfg.Inter, "inter", 20*time.Millisecond, "one-way latency between regions (at most 40ms)")
	fs.Float64Var(&cfg.ProviderShare, "providers", 0.25, "share of nodes that are providers, in (0, 1)")
	fs.IntVar(&cfg.Samples, "samples", 20, "`K` samples per measure")
	fs.IntVar(&cfg.ConnHigh, "conn-high", simnet.DefaultConnHigh, "each simulated host's connection manager trims above `N` connections, back to N/3 (a real node's: 192)")
	fs.StringVar(&cfg.Model, "model", "dgxh100", "the providers' simulated `machine` (dgxa100: offers without CC evidence, ≈ 3 KB instead of ≈ 60 KB)")
	fs.DurationVar(&cfg.OfferTTL, "offer-ttl", 10*time.Minute, "how long the providers' offers live (they republish before); shorter, the measures after the asks see asks whose offers expired")
	fs.BoolVar(&cfg.Faults, "faults", false, "after the measures: partition east from west and heal, then churn")
	attack := fs.Bool("attack", false, "after the measures: hostile peers flood the market (valid bids from fresh keys, broken signatures, replays); measure again")
	fs.Float64Var(&cfg.Attack, "hostile", 0.1, "with --attack: hostile peers as a `share` of the nodes")
	fs.Float64Var(&cfg.AttackCores, "attack-cores", 0, "with --attack: `cores` of their own the hostile peers grind maker stamps on, each charged a real stamp's work (default: what as many honest nodes get here, this machine's cores over --nodes each)")
	timeout := fs.Duration("timeout", 30*time.Minute, "fail if the run takes longer than `duration`")
	memprofile := fs.String("memprofile", "", "write a heap profile to `file` after the core measures (for development)")
	logLevel := fs.String("log-level", "info", "progress log level on stderr: debug, info, warn or error")
	if err := parse(e, fs, args, 0); err != nil {
		return err
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("%w: --log-level: %v", errUsage, err)
	}
	if !*attack {
		cfg.Attack = 0
	}
	if err := cfg.Check(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if *memprofile != "" {
		cfg.MemProfile = func() {
			if err := writeHeapProfile(*memprofile); err != nil {
				cfg.Logger.Error("memprofile", "err", err)
			}
		}
	}
	cfg.Logger = slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: lvl}))
	ctx, stop := signalContext()
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if path := os.Getenv("SUANLI_CPUPROFILE"); path != "" {
		// A developer's CPU profile (all nodes share the process): of the
		// whole run, or from the progress message SUANLI_CPUPROFILE_FROM
		// to SUANLI_CPUPROFILE_TO.
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		defer f.Close()
		p := &profState{f: f, from: os.Getenv("SUANLI_CPUPROFILE_FROM"), to: os.Getenv("SUANLI_CPUPROFILE_TO")}
		if p.from == "" {
			p.toggleLocked()
		}
		defer p.stop()
		cfg.Logger = slog.New(profWindow{cfg.Logger.Handler(), p})
	}
	if dir := os.Getenv("SUANLI_PROFILE_DIR"); dir != "" {
		defer profileOnSignal(dir, cfg.Logger)()
	}
	rep, err := simnet.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if e.json {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	rep.Print(e.stdout)
	return nil
}

// writeHeapProfile writes the heap profile (in-use and allocated) to
// path and the goroutine profile to path.goroutine.
func writeHeapProfile(path string) error {
	for name, p := range map[string]string{"heap": path, "goroutine": path + ".goroutine"} {
		f, err := os.Create(p)
		if err != nil {
			return err
		}
		if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	return nil
}

// profileOnSignal writes, each time the process gets SIGUSR1, the heap
// profile and the goroutine profile (grouped by stack, as text) to dir as
// heap.N.pb.gz and goroutine.N.txt: a look inside a long run (1,000 nodes
// take half an hour to reach their measures) without stopping it, as a
// SIGQUIT dump would, and without a debug port. The returned func stops
// listening.
func profileOnSignal(dir string, log *slog.Logger) func() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	done := make(chan struct{})
	go func() {
		for n := 1; ; n++ {
			select {
			case <-done:
				return
			case <-sig:
			}
			for _, p := range []struct {
				name, file string
				debug      int
			}{{"heap", fmt.Sprintf("heap.%d.pb.gz", n), 0}, {"goroutine", fmt.Sprintf("goroutine.%d.txt", n), 1}} {
				f, err := os.Create(filepath.Join(dir, p.file))
				if err == nil {
					err = pprof.Lookup(p.name).WriteTo(f, p.debug)
					if cerr := f.Close(); err == nil {
						err = cerr
					}
				}
				if err != nil {
					log.Error("profile on SIGUSR1", "profile", p.name, "err", err)
				} else {
					log.Info("profile written", "file", filepath.Join(dir, p.file))
				}
			}
		}
	}()
	return func() { signal.Stop(sig); close(done) }
}

// profWindow is a progress log handler that starts a CPU profile at the
// message from and stops it at to.
type profWindow struct {
	slog.Handler
	*profState
}

type profState struct {
	mu       sync.Mutex
	f        *os.File
	from, to string
	on, done bool
}

func (w profWindow) Handle(ctx context.Context, r slog.Record) error {
	w.mu.Lock()
	if (!w.on && r.Message == w.from) || (w.on && r.Message == w.to) {
		w.toggleLocked()
	}
	w.mu.Unlock()
	return w.Handler.Handle(ctx, r)
}

func (w profWindow) WithAttrs(as []slog.Attr) slog.Handler {
	return profWindow{w.Handler.WithAttrs(as), w.profState}
}

func (w profWindow) WithGroup(g string) slog.Handler {
	return profWindow{w.Handler.WithGroup(g), w.profState}
}

func (p *profState) toggleLocked() {
	if p.on {
		pprof.StopCPUProfile()
		p.on, p.done = false, true
		return
	}
	if !p.done && pprof.StartCPUProfile(p.f) == nil {
		p.on = true
	}
}

func (p *profState) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.on {
		p.toggleLocked()
	}
}
