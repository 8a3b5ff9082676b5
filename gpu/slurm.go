package gpu

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Slurm reaches a Slurm cluster through its CLI (sinfo, squeue, sbatch,
// scancel, scontrol) with --json where the command has it.
//
// The CLI, not slurmrestd: the Slurm that distributions ship (Debian 12:
// 22.05) serves only OpenAPI v0.0.36–v0.0.38, older than what the
// maintained Go clients speak, and slurmrestd needs its own daemon, socket
// and JWT or munge set-up; the CLI is on every login node, authenticates
// with the cluster's munge, and its --json output is slurmrestd's own
// schema (the same data parser plugins).
type Slurm struct {
	// Conf is the slurm.conf to use (SLURM_CONF); empty: Slurm's default.
	Conf string
	// Bin is the directory of the Slurm commands; empty: $PATH.
	Bin string
}

// ErrSlurm is returned (wrapped, with the command's own message) when a
// Slurm command fails or cannot be run.
var ErrSlurm = errors.New("slurm command failed")

// slurmTimeout bounds one CLI call: slurmctld answers in milliseconds, or
// is down.
const slurmTimeout = 30 * time.Second

// Run runs one Slurm command with stdin (may be nil) and returns its
// standard output. The command's environment is PATH, TZ=UTC and
// SLURM_CONF only:
// nothing of the caller's (passphrases) reaches Slurm or, through sbatch's
// --export=ALL, a job.
func (s Slurm) Run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, slurmTimeout)
	defer cancel()
	bin := name
	if s.Bin != "" {
		bin = s.Bin + "/" + name
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	// TZ=UTC: the times scontrol reads and writes (reservations) are
	// UTC, whatever the daemon's or the system's zone.
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", "TZ=UTC"}
	if s.Conf != "" {
		cmd.Env = append(cmd.Env, "SLURM_CONF="+s.Conf)
	}
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return stdout.Bytes(), fmt.Errorf("%w: %s: %s", ErrSlurm, name, msg)
	}
	return stdout.Bytes(), nil
}

// SlurmNode is one node of the cluster as sinfo reports it.
type SlurmNode struct {
	Name       string
	State      string // idle, mixed, allocated, down, drained, …
	Partitions []string
	// GPUs are the node's gpu gres by type ("" when untyped): how many it
	// has and which indices are allocated to running jobs.
	GPUs []SlurmGres
}

// SlurmGres is one gres type of a node.
type SlurmGres struct {
	Type  string
	Count int
	// Used are the allocated indices, 0-based within the node's gres of
	// this name (Slurm numbers a node's gpus across types).
	Used []int
}

type sinfoJSON struct {
	Nodes []struct {
		Name       string   `json:"name"`
		State      string   `json:"state"`
		StateFlags []string `json:"state_flags"`
		Partitions []string `json:"partitions"`
		Gres       string   `json:"gres"`
		GresUsed   string   `json:"gres_used"`
	} `json:"nodes"`
}

// Nodes lists the cluster's nodes (sinfo --json).
func (s Slurm) Nodes(ctx context.Context) ([]SlurmNode, error) {
	out, err := s.Run(ctx, nil, "sinfo", "--json")
	if err != nil {
		return nil, err
	}
	return parseSinfo(out)
}

func parseSinfo(b []byte) ([]SlurmNode, error) {
	var doc sinfoJSON
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%w: sinfo --json: %v", ErrSlurm, err)
	}
	var nodes []SlurmNode
	seen := map[string]bool{}
	for _, n := range doc.Nodes {
		if n.Name == "" || seen[n.Name] {
			continue // sinfo lists a node once per partition in some versions
		}
		seen[n.Name] = true
		node := SlurmNode{Name: n.Name, State: strings.ToLower(n.State), Partitions: n.Partitions}
		for _, f := range n.StateFlags {
			node.State += "+" + strings.ToLower(f)
		}
		gres, err := ParseGres(n.Gres)
		if err != nil {
			return nil, fmt.Errorf("%w: node %s: %v", ErrSlurm, n.Name, err)
		}
		used, err := ParseGres(n.GresUsed)
		if err != nil {
			return nil, fmt.Errorf("%w: node %s used: %v", ErrSlurm, n.Name, err)
		}
		for _, g := range gres {
			for _, u := range used {
				if u.Type == g.Type {
					g.Used = u.Used
				}
			}
			node.GPUs = append(node.GPUs, g)
		}
		nodes = append(nodes, node)
	}
	return nodes, nil
}

// SlurmJob is one job as squeue reports it.
type SlurmJob struct {
	ID        string
	Name      string
	Comment   string
	State     string // RUNNING, PENDING, COMPLETED, PREEMPTED, …
	Reason    string // why it pends, or "None"
	Partition string
	// ExitCode is the batch script's exit status, Signal the signal that
	// ended it (0: none), as Slurm recorded them.
	ExitCode, Signal int
	Start, End       time.Time // zero until known
	TimeLimit        time.Duration
	StdOut           string
	// Reservation is the Slurm reservation the job runs in ("": none).
	Reservation string
	// HetJobID is the leader's ID when the job is a component of a
	// heterogeneous job (the leader's own too); "" otherwise. Each
	// component is listed with its own nodes and GPUs.
	HetJobID string
	// GPUs are the allocated gpu gres per node, Used holding the indices.
	GPUs map[string][]SlurmGres
}

type squeueJSON struct {
	Jobs []struct {
		JobID        json.Number `json:"job_id"`
		Name         string      `json:"name"`
		Comment      string      `json:"comment"`
		JobState     string      `json:"job_state"`
		StateReason  string      `json:"state_reason"`
		Partition    string      `json:"partition"`
		ExitCode     int         `json:"exit_code"`
		StartTime    int64       `json:"start_time"`
		EndTime      int64       `json:"end_time"`
		TimeLimit    int64       `json:"time_limit"`
		StdOut       string      `json:"standard_output"`
		ResvName     string      `json:"resv_name"`
		HetJobID     int64       `json:"het_job_id"`
		GresDetail   []string    `json:"gres_detail"`
		JobResources struct {
			AllocatedNodes []struct {
				NodeName string `json:"nodename"`
			} `json:"allocated_nodes"`
		} `json:"job_resources"`
	} `json:"jobs"`
}

// Jobs lists the jobs the controller knows (squeue --json: pending,
// running, and ended within MinJobAge).
func (s Slurm) Jobs(ctx context.Context) ([]SlurmJob, error) {
	out, err := s.Run(ctx, nil, "squeue", "--json")
	if err != nil {
		return nil, err
	}
	return ParseSqueue(out)
}

// ParseSqueue reads squeue --json.
func ParseSqueue(b []byte) ([]SlurmJob, error) {
	var doc squeueJSON
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%w: squeue --json: %v", ErrSlurm, err)
	}
	jobs := make([]SlurmJob, 0, len(doc.Jobs))
	for _, j := range doc.Jobs {
		job := SlurmJob{ID: j.JobID.String(), Name: j.Name, Comment: j.Comment, State: j.JobState,
			Reason: j.StateReason, Partition: j.Partition, StdOut: j.StdOut, Reservation: j.ResvName,
			TimeLimit: time.Duration(j.TimeLimit) * time.Minute}
		// exit_code is the wait status: the exit code in the high byte,
		// the signal in the low bits.
		job.ExitCode, job.Signal = j.ExitCode>>8&0xff, j.ExitCode&0x7f
		if j.HetJobID > 0 {
			job.HetJobID = strconv.FormatInt(j.HetJobID, 10)
		}
		if j.StartTime > 0 {
			job.Start = time.Unix(j.StartTime, 0)
		}
		if j.EndTime > 0 {
			job.End = time.Unix(j.EndTime, 0)
		}
		for i, d := range j.GresDetail {
			if i >= len(j.JobResources.AllocatedNodes) {
				break
			}
			gs, err := ParseGres(d)
			if err != nil {
				return nil, fmt.Errorf("%w: job %s: %v", ErrSlurm, job.ID, err)
			}
			if job.GPUs == nil {
				job.GPUs = map[string][]SlurmGres{}
			}
			node := j.JobResources.AllocatedNodes[i].NodeName
			job.GPUs[node] = append(job.GPUs[node], gs...)
		}
		jobs = append(jobs, job)
	}
	return jobs, nil
}

// gresItem is one gpu gres: "gpu:h100:8(S:0-1)", "gpu:4",
// "gpu:h100:2(IDX:0-1)", "gpu:h100:0(IDX:N/A)".
var gresItem = regexp.MustCompile(`^gpu(?::([A-Za-z0-9_.-]+))?:(\d+)(?:\((.*)\))?$`)

// ParseGres reads the gpu entries of a Slurm gres string (sinfo's gres
// and gres_used, squeue's gres_detail); other gres (nic, mps, shard) are
// skipped. Used holds the IDX list when there is one.
func ParseGres(s string) ([]SlurmGres, error) {
	var out []SlurmGres
	if s == "" || s == "(null)" {
		return nil, nil
	}
	for _, item := range splitGres(s) {
		if !strings.HasPrefix(item, "gpu") {
			continue
		}
		m := gresItem.FindStringSubmatch(item)
		if m == nil {
			return nil, fmt.Errorf("gres %q: not gpu[:type]:count[(…)]", item)
		}
		n, err := strconv.Atoi(m[2])
		if err != nil || n > 1<<16 {
			return nil, fmt.Errorf("gres %q: bad count", item)
		}
		g := SlurmGres{Type: m[1], Count: n}
		// "(S:0-1)", "(IDX:0-1,5)": IDX's list runs to the next "KEY:".
		var idx []string
		inIdx := false
		for _, part := range strings.Split(m[3], ",") {
			if v, ok := strings.CutPrefix(part, "IDX:"); ok {
				idx, inIdx = append(idx, v), true
			} else if inIdx && !strings.Contains(part, ":") {
				idx = append(idx, part)
			} else {
				inIdx = false
			}
		}
		if g.Used, err = parseRanges(strings.Join(idx, ",")); err != nil {
			return nil, fmt.Errorf("gres %q: %v", item, err)
		}
		out = append(out, g)
	}
	return out, nil
}

// splitGres splits on the commas outside parentheses.
func splitGres(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

// parseRanges reads Slurm's "0-1,4" ("N/A" is none) into sorted indices.
func parseRanges(s string) ([]int, error) {
	if s == "N/A" || s == "" {
		return nil, nil
	}
	var out []int
	for _, r := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("index %q", r)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a || b-a > 1<<16 {
				return nil, fmt.Errorf("index range %q", r)
			}
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// SlurmGPU is where a Slurm backend's GPU lives: its cluster, node, gres
// type and index on the node. Its UUID is "slurm:CLUSTER:NODE:TYPE:INDEX",
// stable across restarts and unique in the market.
type SlurmGPU struct {
	Cluster, Node, Type string
	Index               int
}

// UUID is the GPU's identifier in offers and leases.
func (g SlurmGPU) UUID() string {
	return fmt.Sprintf("slurm:%s:%s:%s:%d", g.Cluster, g.Node, g.Type, g.Index)
}

// ParseSlurmUUID reads a UUID made by SlurmGPU.UUID.
func ParseSlurmUUID(u string) (SlurmGPU, error) {
	p := strings.Split(u, ":")
	if len(p) != 5 || p[0] != "slurm" || p[1] == "" || p[2] == "" {
		return SlurmGPU{}, fmt.Errorf("gpu: %q is not a Slurm GPU (slurm:CLUSTER:NODE:TYPE:INDEX)", u)
	}
	i, err := strconv.Atoi(p[4])
	if err != nil || i < 0 {
		return SlurmGPU{}, fmt.Errorf("gpu: %q: bad index", u)
	}
	return SlurmGPU{Cluster: p[1], Node: p[2], Type: p[3], Index: i}, nil
}

// SlurmBackendConfig configures OpenSlurm.
type SlurmBackendConfig struct {
	Slurm
	// Cluster names the cluster in GPU UUIDs; default: ClusterName from
	// `scontrol show config`.
	Cluster string
	// Markets maps a gres type to its market key ("h100" ->
	// "nvidia-h100-sxm5-80gb"), where Slurm's names are not enough. An
	// unmapped type gets MarketKey("NVIDIA "+type, 0).
	Markets map[string]string
	// Partitions, when set, limits the inventory to nodes in them.
	Partitions []string
	// JobPrefix names this provider's lease jobs (the executor's
	// SlurmJobPrefix): their GPUs stay in the inventory, marked leased by
	// the provider's own book. GPUs held by any other job belong to the
	// cluster's own users and are not offered.
	JobPrefix string
	// MaxNodes is the most nodes one lease may span as one job, as the
	// offer states it (SlurmFacts); 0: every node that sells GPUs.
	MaxNodes int
	// Local, when the daemon runs on a compute node, is that node's NVML
	// (or a simulation of it): Telemetry samples it for the node's GPUs.
	// LocalNode is the node's name in Slurm; default: the short host
	// name. Slurm's gres index i on the node is NVML's device i (the
	// order gres.conf lists /dev/nvidiaN, and AutoDetect=nvml, give).
	Local     Backend
	LocalNode string
}

// SlurmBackend is a Backend over a Slurm cluster: the GPUs are the gpu
// gres of its nodes, as the controller knows them. Telemetry comes from
// NVML only where the daemon runs on a compute node (Local), for that
// node's GPUs; there is no attestation evidence.
type SlurmBackend struct {
	cfg SlurmBackendConfig
	// local maps the local NVML UUIDs to their Slurm UUIDs.
	local map[string]string
}

var _ Backend = (*SlurmBackend)(nil)

// OpenSlurm connects to the cluster and checks that it answers.
func OpenSlurm(ctx context.Context, cfg SlurmBackendConfig) (*SlurmBackend, error) {
	if cfg.Cluster == "" {
		out, err := cfg.Run(ctx, nil, "scontrol", "show", "config")
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(string(out), "\n") {
			k, v, ok := strings.Cut(line, "=")
			if ok && strings.TrimSpace(k) == "ClusterName" {
				cfg.Cluster = strings.TrimSpace(v)
			}
		}
		if cfg.Cluster == "" {
			return nil, fmt.Errorf("%w: scontrol show config: no ClusterName", ErrSlurm)
		}
	}
	if strings.Contains(cfg.Cluster, ":") {
		return nil, fmt.Errorf("gpu: cluster name %q has a colon", cfg.Cluster)
	}
	b := &SlurmBackend{cfg: cfg}
	if _, err := b.Inventory(); err != nil {
		return nil, err
	}
	if cfg.Local != nil {
		if err := b.mapLocal(ctx); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// mapLocal pairs the local NVML devices with the local node's gres.
func (b *SlurmBackend) mapLocal(ctx context.Context) error {
	name := b.cfg.LocalNode
	if name == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("gpu: slurm local node: %w", err)
		}
		name, _, _ = strings.Cut(h, ".")
	}
	nodes, err := b.cfg.Nodes(ctx)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(nodes, func(n SlurmNode) bool { return n.Name == name })
	if i < 0 {
		return fmt.Errorf("gpu: the local node %q is not in Slurm cluster %s", name, b.cfg.Cluster)
	}
	inv, err := b.cfg.Local.Inventory()
	if err != nil {
		return err
	}
	b.local, err = localMap(b.cfg.Cluster, nodes[i], inv.Devices)
	return err
}

// localMap maps each local device's UUID to the Slurm UUID of the gres
// with its index on node.
func localMap(cluster string, node SlurmNode, devs []Device) (map[string]string, error) {
	var ids []SlurmGPU
	for _, g := range node.GPUs {
		for range g.Count {
			ids = append(ids, SlurmGPU{Cluster: cluster, Node: node.Name, Type: g.Type, Index: len(ids)})
		}
	}
	if len(ids) != len(devs) {
		return nil, fmt.Errorf("gpu: Slurm gives node %s %d GPUs, NVML sees %d", node.Name, len(ids), len(devs))
	}
	m := make(map[string]string, len(devs))
	for _, d := range devs {
		if d.Index < 0 || d.Index >= len(ids) {
			return nil, fmt.Errorf("gpu: NVML device index %d on node %s", d.Index, node.Name)
		}
		m[d.UUID] = ids[d.Index].UUID()
	}
	return m, nil
}

// Name implements Backend: "slurm:CLUSTER".
func (b *SlurmBackend) Name() string { return "slurm:" + b.cfg.Cluster }

// Cluster is the cluster's name.
func (b *SlurmBackend) Cluster() string { return b.cfg.Cluster }

// Slurm is the CLI the backend reads through.
func (b *SlurmBackend) Slurm() Slurm { return b.cfg.Slurm }

// marketOf maps a gres type to its market key and memory.
func (b *SlurmBackend) marketOf(typ string) (string, uint64) {
	key := b.cfg.Markets[typ]
	if key == "" {
		key = MarketKey("NVIDIA "+typ, 0)
	}
	// The memory is the key's nominal figure ("-80gb"), if it has one.
	var mem uint64
	if i := strings.LastIndex(key, "-"); i >= 0 && strings.HasSuffix(key, "gb") {
		if gb, err := strconv.ParseUint(key[i+1:len(key)-2], 10, 32); err == nil {
			mem = gb << 30
		}
	}
	return key, mem
}

// Inventory implements Backend: one Device per gpu gres of every node
// that can run jobs, less the GPUs the cluster's own users hold.
// Drained, down and failing nodes, and nodes in another's active
// reservation, sell nothing.
func (b *SlurmBackend) Inventory() (*Inventory, error) {
	ctx := context.Background()
	nodes, err := b.cfg.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	jobs, err := b.cfg.Jobs(ctx)
	if err != nil {
		return nil, err
	}
	// held[node] are the indices other users' running jobs hold.
	held := map[string][]int{}
	for _, j := range jobs {
		if j.State != "RUNNING" && j.State != "COMPLETING" && j.State != "SUSPENDED" {
			continue
		}
		if b.cfg.JobPrefix != "" && strings.HasPrefix(j.Name, b.cfg.JobPrefix) {
			continue
		}
		for node, gs := range j.GPUs {
			for _, g := range gs {
				held[node] = append(held[node], g.Used...)
			}
		}
	}
	reserved, err := b.reservedNodes(ctx)
	if err != nil {
		return nil, err
	}
	inv := &Inventory{Backend: b.Name()}
	for _, n := range nodes {
		if !schedulable(n.State) || reserved[n.Name] {
			continue
		}
		if len(b.cfg.Partitions) > 0 && !slices.ContainsFunc(n.Partitions, func(p string) bool { return slices.Contains(b.cfg.Partitions, p) }) {
			continue
		}
		base := 0
		for _, g := range n.GPUs {
			key, mem := b.marketOf(g.Type)
			for i := range g.Count {
				if slices.Contains(held[n.Name], base+i) {
					continue // a cluster user's job holds it
				}
				id := SlurmGPU{Cluster: b.cfg.Cluster, Node: n.Name, Type: g.Type, Index: base + i}
				inv.Devices = append(inv.Devices, Device{
					Index:       len(inv.Devices),
					UUID:        id.UUID(),
					Name:        fmt.Sprintf("Slurm gres gpu:%s on %s", g.Type, n.Name),
					Market:      key,
					MemoryBytes: mem,
				})
			}
			base += g.Count
		}
	}
	return inv, nil
}

// reservedNodes are the nodes in reservations active now that are not
// this provider's (JobPrefix): a maintenance window or a group's
// reservation, where a lease's job would only pend. Reserved cores
// (CoreCnt) count as the whole node. Slurm 22.05's sinfo shows no
// reservation in a node's state, so the reservations are read.
func (b *SlurmBackend) reservedNodes(ctx context.Context) (map[string]bool, error) {
	rs, err := b.cfg.Reservations(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, r := range rs {
		if r.State != "ACTIVE" || b.cfg.JobPrefix != "" && strings.HasPrefix(r.Name, b.cfg.JobPrefix) || r.Nodes == "" || r.Nodes == "(null)" {
			continue // ours, not begun, or of licenses only
		}
		names, err := b.cfg.Run(ctx, nil, "scontrol", "show", "hostnames", r.Nodes)
		if err != nil {
			return nil, err
		}
		for _, n := range strings.Fields(string(names)) {
			out[n] = true
		}
	}
	return out, nil
}

// schedulable says whether a node in this sinfo state takes new jobs.
func schedulable(state string) bool {
	base, flags, _ := strings.Cut(state, "+")
	switch base {
	case "idle", "mixed", "allocated", "completing":
	default:
		return false
	}
	for _, f := range strings.Split(flags, "+") {
		switch f {
		case "drain", "draining", "drained", "fail", "failing", "maintenance", "reserved_for_maint", "power_down", "not_responding":
			return false
		}
	}
	return true
}

// Telemetry implements Backend: the local node's GPUs through NVML
// (Local), under their Slurm UUIDs; none without Local, since the
// controller sees no GPU counters.
func (b *SlurmBackend) Telemetry() ([]Telemetry, error) {
	if b.cfg.Local == nil {
		return nil, nil
	}
	ts, err := b.cfg.Local.Telemetry()
	if err != nil {
		return nil, err
	}
	out := make([]Telemetry, 0, len(ts))
	for _, t := range ts {
		if u, ok := b.local[t.UUID]; ok {
			t.UUID = u
			out = append(out, t)
		}
	}
	return out, nil
}

// Attest implements Backend: a Slurm cluster carries no evidence.
func (b *SlurmBackend) Attest([]byte, ...string) ([]Evidence, error) {
	return nil, errors.New("gpu: a Slurm cluster's GPUs carry no attestation evidence")
}

// Close implements Backend: it closes Local.
func (b *SlurmBackend) Close() error {
	if b.cfg.Local != nil {
		return b.cfg.Local.Close()
	}
	return nil
}

// SlurmFacts are what an offer states of a Slurm provider beyond its
// GPUs (proto Offer.scheduler, Offer.max_nodes, Host.scheduler_version;
// each GPU's node is SlurmNodeOf its UUID, proto GPU.node).
type SlurmFacts struct {
	// Scheduler is "slurm": the cluster's scheduler places the leases and
	// picks the device indices, and the cluster's own users share it.
	Scheduler string
	// Version is Slurm's, e.g. "22.05.8".
	Version string
	// MaxNodes is the most nodes one lease may span as one job (a
	// multi-node lease): the nodes selling GPUs now, at most
	// SlurmBackendConfig.MaxNodes.
	MaxNodes int
}

// Facts reads the facts an offer states (scontrol --version and the
// inventory).
func (b *SlurmBackend) Facts(ctx context.Context) (SlurmFacts, error) {
	f := SlurmFacts{Scheduler: "slurm"}
	out, err := b.cfg.Run(ctx, nil, "scontrol", "--version")
	if err != nil {
		return f, err
	}
	if fs := strings.Fields(string(out)); len(fs) > 0 {
		f.Version = fs[len(fs)-1] // "slurm-wlm 22.05.8", "slurm 23.11.4"
	}
	inv, err := b.Inventory()
	if err != nil {
		return f, err
	}
	nodes := map[string]bool{}
	for _, d := range inv.Devices {
		nodes[SlurmNodeOf(d.UUID)] = true
	}
	f.MaxNodes = len(nodes)
	if b.cfg.MaxNodes > 0 {
		f.MaxNodes = min(f.MaxNodes, b.cfg.MaxNodes)
	}
	return f, nil
}

// SlurmNodeOf is the node of a Slurm GPU UUID, "" for any other UUID.
func SlurmNodeOf(uuid string) string {
	g, err := ParseSlurmUUID(uuid)
	if err != nil {
		return ""
	}
	return g.Node
}
