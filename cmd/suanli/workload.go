package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/executor"
)

// execFlags are the daemon's flags for what leases may run.
type execFlags struct {
	executors                   listFlag
	images                      listFlag
	portRange, portBind, portAt string
	envOnly, openEgress         bool
	pullTimeout                 time.Duration
	processUser, processUIDs    string
	vcpus                       string
	ramGiB, diskGiB             uint64
	notice                      time.Duration
	margin                      optInt64
	increment                   time.Duration
	schedule, utcOffset         string
}

func (f *execFlags) register(fs *flag.FlagSet) {
	fs.Var(&f.executors, "executor", "allow an `executor` for leases: reserve, process, docker, slurm (repeatable; default reserve)")
	fs.Var(&f.images, "image-allow", "docker: allow images matching `pattern` (e.g. 'ghcr.io/org/*') or a sha256: digest (repeatable; default none)")
	fs.StringVar(&f.portRange, "port-range", "20000-20999", "docker: host `ports` buyers' container ports are published on")
	fs.StringVar(&f.portBind, "port-bind", "127.0.0.1", "docker: host `address` published ports listen on (0.0.0.0 to serve remote buyers)")
	fs.StringVar(&f.portAt, "port-host", "", "docker: `host` buyers are told to reach published ports at (default the bind address)")
	fs.BoolVar(&f.envOnly, "docker-env-only-gpus", false, "docker: on an engine without the NVIDIA runtime, run containers with the GPU UUIDs in their environment only (simulated GPUs only)")
	fs.BoolVar(&f.openEgress, "docker-open-private-egress", false, "docker: let containers reach the host, private and link-local (cloud metadata) addresses, blocked by default")
	fs.DurationVar(&f.pullTimeout, "pull-timeout", executor.DefaultPullTimeout, "docker: time allowed to pull a missing image, before billing starts")
	fs.StringVar(&f.processUser, "process-user", "", "process: run workloads as this unprivileged `user`, one lease at a time (never root or the daemon's own uid)")
	fs.StringVar(&f.processUIDs, "process-uids", "", "process: run each lease as its own uid from this `range`, e.g. 1900000000-1900000999 (the default; no account may use them)")
	fs.StringVar(&f.vcpus, "vcpus-per-gpu", "", "vCPUs sold with each GPU, a `decimal` (default: the host's cores shared out)")
	fs.Uint64Var(&f.ramGiB, "ram-per-gpu", 0, "RAM in `GiB` sold with each GPU (default: the host's memory shared out)")
	fs.Uint64Var(&f.diskGiB, "disk-per-gpu", 0, "scratch disk in `GiB` sold with each GPU (default: not stated)")
	fs.StringVar(&f.schedule, "price-schedule", "", "time-of-day prices, e.g. `'00:00-08:00=-30%,08:00-24:00=0%'` covering the day")
	fs.StringVar(&f.utcOffset, "price-utc-offset", "+00:00", "the UTC `offset` of the schedule's day, e.g. +08:00")
	fs.DurationVar(&f.increment, "billing-increment", 0, "charge GPU time in whole `units` of 1s, 1m or 1h (default: to the millisecond)")
	fs.DurationVar(&f.notice, "preemption-notice", 0, "notice spot leases get before a preemption (default 30s)")
	fs.Var(&f.margin, "preempt-margin", "`basis points` more a spot trade must pay per GPU-hour to preempt a spot lease (default 2000)")
}

// options turns the flags into node options; sim tells whether the GPUs
// are simulated.
func (f *execFlags) options(sim bool) ([]node.Option, error) {
	var opts []node.Option
	if len(f.executors) > 0 {
		opts = append(opts, node.WithExecutors(f.executors...))
	}
	docker := false
	for _, x := range f.executors {
		docker = docker || x == node.ExecDocker
	}
	if !docker && len(f.images) > 0 {
		return nil, fmt.Errorf("%w: --image-allow needs --executor docker", errUsage)
	}
	if f.envOnly && !sim {
		return nil, fmt.Errorf("%w: --docker-env-only-gpus is for simulated GPUs (--gpu-sim) only", errUsage)
	}
	if docker {
		pol, err := executor.ParseImagePolicy(f.images)
		if err != nil {
			return nil, fmt.Errorf("%w: --image-allow: %v", errUsage, err)
		}
		lo, hi, err := parsePortRange(f.portRange)
		if err != nil {
			return nil, fmt.Errorf("%w: --port-range: %v", errUsage, err)
		}
		opts = append(opts, node.WithDocker(node.DockerConfig{Images: pol, PortMin: lo, PortMax: hi, BindIP: f.portBind,
			AdvertiseHost: f.portAt, EnvOnlyGPUs: f.envOnly, PullTimeout: f.pullTimeout, OpenPrivateEgress: f.openEgress}))
	}
	if f.processUser != "" && f.processUIDs != "" {
		return nil, fmt.Errorf("%w: --process-user and --process-uids conflict", errUsage)
	}
	if f.processUser != "" {
		opts = append(opts, node.WithProcessUser(f.processUser))
	}
	if f.processUIDs != "" {
		a, b, ok := strings.Cut(f.processUIDs, "-")
		lo, err1 := strconv.ParseUint(a, 10, 32)
		hi, err2 := strconv.ParseUint(b, 10, 32)
		if !ok || err1 != nil || err2 != nil || lo == 0 || hi < lo {
			return nil, fmt.Errorf("%w: --process-uids %q: want LOW-HIGH, 1 <= LOW <= HIGH", errUsage, f.processUIDs)
		}
		opts = append(opts, node.WithProcessUIDs(uint32(lo), uint32(hi)))
	}
	if f.notice != 0 {
		if f.notice < time.Second || f.notice > time.Hour {
			return nil, fmt.Errorf("%w: --preemption-notice %s: want 1s..1h", errUsage, f.notice)
		}
		opts = append(opts, node.WithPreemptionNotice(f.notice))
	}
	if f.increment != 0 {
		if !market.ValidBillingIncrement(f.increment) {
			return nil, fmt.Errorf("%w: --billing-increment %s: want 1s, 1m or 1h", errUsage, f.increment)
		}
		opts = append(opts, node.WithBillingIncrement(f.increment))
	}
	if f.schedule != "" {
		ws, err := market.ParseSchedule(f.schedule)
		if err != nil {
			return nil, fmt.Errorf("%w: --price-schedule: %v", errUsage, err)
		}
		off, err := parseUTCOffset(f.utcOffset)
		if err != nil {
			return nil, fmt.Errorf("%w: --price-utc-offset: %v", errUsage, err)
		}
		if f.increment != 0 {
			return nil, fmt.Errorf("%w: --price-schedule and --billing-increment conflict (a schedule bills each window to the millisecond)", errUsage)
		}
		opts = append(opts, node.WithPriceSchedule(ws, off))
	}
	if f.margin.set {
		opts = append(opts, node.WithPreemptMargin(f.margin.v))
	}
	if f.vcpus != "" || f.ramGiB > 0 || f.diskGiB > 0 {
		var milli int64
		if f.vcpus != "" {
			m, err := parseMilli(f.vcpus)
			if err != nil || m <= 0 {
				return nil, fmt.Errorf("%w: --vcpus-per-gpu %q: want a positive decimal with at most 3 places", errUsage, f.vcpus)
			}
			milli = m
		}
		opts = append(opts, node.WithResourcesPerGPU(milli, f.ramGiB<<30, f.diskGiB<<30))
	}
	return opts, nil
}

// parseUTCOffset parses "+08:00" or "-05:30" into minutes.
func parseUTCOffset(s string) (int32, error) {
	sign := int32(1)
	switch {
	case strings.HasPrefix(s, "+"):
		s = s[1:]
	case strings.HasPrefix(s, "-"):
		sign, s = -1, s[1:]
	default:
		return 0, fmt.Errorf("%q: want +HH:MM or -HH:MM", s)
	}
	h, m, ok := strings.Cut(s, ":")
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if !ok || err1 != nil || err2 != nil || hh < 0 || hh > 14 || mm < 0 || mm > 59 {
		return 0, fmt.Errorf("%q: want +HH:MM or -HH:MM", s)
	}
	return sign * int32(hh*60+mm), nil
}

// parseMilli parses a decimal such as "8" or "0.25" into thousandths.
func parseMilli(s string) (int64, error) {
	whole, frac, _ := strings.Cut(s, ".")
	if len(frac) > 3 || whole == "" && frac == "" {
		return 0, fmt.Errorf("bad decimal %q", s)
	}
	w, err := strconv.ParseInt(cmpOr(whole, "0"), 10, 32)
	if err != nil || w < 0 {
		return 0, fmt.Errorf("bad decimal %q", s)
	}
	var f int64
	if frac != "" {
		if f, err = strconv.ParseInt((frac + "00")[:3], 10, 32); err != nil || f < 0 {
			return 0, fmt.Errorf("bad decimal %q", s)
		}
	}
	return w*1000 + f, nil
}

func parsePortRange(s string) (lo, hi uint16, err error) {
	a, b, ok := strings.Cut(s, "-")
	x, err1 := strconv.ParseUint(a, 10, 16)
	y, err2 := strconv.ParseUint(b, 10, 16)
	if !ok || err1 != nil || err2 != nil || x == 0 || y < x {
		return 0, 0, fmt.Errorf("%q: want LOW-HIGH, 1 <= LOW <= HIGH <= 65535", s)
	}
	return uint16(x), uint16(y), nil
}

// workloadFlags are a bid's flags for what the provider should run.
type workloadFlags struct {
	exec     bool
	image    string
	ports    listFlag
	sshKey   string
	writable bool
}

func (f *workloadFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&f.exec, "exec", false, "run the command after -- on the leased GPUs (the provider's process executor)")
	fs.StringVar(&f.image, "image", "", "run this container `image` on the leased GPUs (the provider's docker executor; a command after -- overrides the image's)")
	fs.Var(&f.ports, "port", "container TCP `port` to publish on the provider's host (repeatable; needs --image)")
	fs.StringVar(&f.sshKey, "ssh-key", "", "public key `file` to install as root's authorized_keys in the container (the image must run sshd)")
	fs.BoolVar(&f.writable, "writable-root", false, "ask for a writable root filesystem (default read-only, with /scratch and /tmp writable)")
}

// apply puts the workload into req.
func (f *workloadFlags) apply(req *api.OrderRequest, command []string) error {
	if f.image == "" {
		if f.exec != (len(command) > 0) {
			return fmt.Errorf("%w: --exec needs a command after --, and a command needs --exec or --image", errUsage)
		}
		if len(f.ports) > 0 || f.sshKey != "" || f.writable {
			return fmt.Errorf("%w: --port, --ssh-key and --writable-root need --image", errUsage)
		}
		req.Exec = command
		return nil
	}
	if f.exec {
		return fmt.Errorf("%w: --exec and --image conflict (a command after -- with --image is the container's)", errUsage)
	}
	req.Image, req.Exec, req.WritableRoot = f.image, command, f.writable
	for _, p := range f.ports {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return fmt.Errorf("%w: --port %q: want a TCP port 1-65535", errUsage, p)
		}
		req.Ports = append(req.Ports, uint16(n))
	}
	if f.sshKey != "" {
		b, err := os.ReadFile(f.sshKey)
		if err != nil {
			return fmt.Errorf("--ssh-key: %w", err)
		}
		req.SSHKey = strings.TrimSpace(string(b))
	}
	return nil
}

// printWorkload prints what a lease runs and where to reach it.
func printWorkload(e *env, l api.LeaseView) {
	if l.Image != "" {
		fmt.Fprintf(e.stdout, "  image %s\n", l.Image)
	}
	if l.ImageDigest != "" {
		fmt.Fprintf(e.stdout, "  image digest %s\n", l.ImageDigest)
	}
	if l.ContainerState != "" {
		fmt.Fprintf(e.stdout, "  container %s, GPUs %s\n", l.ContainerState, l.GPUAccess)
	}
	for _, ep := range l.Endpoints {
		fmt.Fprintf(e.stdout, "  port %d → %s:%d\n", ep.ContainerPort, ep.Host, ep.HostPort)
	}
	if l.Exit != nil {
		oom := ""
		if l.Exit.OOMKilled {
			oom = " (OOM-killed)"
		}
		fmt.Fprintf(e.stdout, "  exit code %d%s %s %s\n", l.Exit.Code, oom, l.Exit.Signal, l.Exit.Error)
	}
	if l.PreemptAt != nil {
		fmt.Fprintf(e.stdout, "  preempted: ends at %s\n", l.PreemptAt.Format(time.RFC3339))
	}
	if l.Note != "" {
		fmt.Fprintf(e.stdout, "  note %s\n", l.Note)
	}
}
