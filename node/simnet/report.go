package simnet

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"
	"time"
)

// Stats are the percentiles of a set of durations, in milliseconds.
type Stats struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P95   float64 `json:"p95_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

func statsOf(ds []time.Duration) Stats {
	if len(ds) == 0 {
		return Stats{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	pct := func(p float64) float64 {
		// Nearest rank.
		i := int(p*float64(len(s))+0.999999) - 1
		i = max(0, min(i, len(s)-1))
		return ms(s[i])
	}
	return Stats{Count: len(s), P50: pct(0.50), P95: pct(0.95), P99: pct(0.99), Max: ms(s[len(s)-1])}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// pick returns the named percentile.
func (s Stats) pick(p string) float64 {
	switch p {
	case "p95":
		return s.P95
	case "p99":
		return s.P99
	}
	return s.P50
}

// Measure is one measured quantity beside its floor.
type Measure struct {
	Name  string `json:"name"`
	Stats Stats  `json:"stats"`
	// Floor is the same-run floor at the percentile Compare names, in ms,
	// and Ratio the measure over it at that percentile.
	FloorName string  `json:"floor_name"`
	Floor     float64 `json:"floor_ms"`
	Compare   string  `json:"compare"`
	Ratio     float64 `json:"ratio"`
	// Goal is the ratio to meet (0: none); Met whether it was.
	Goal float64 `json:"goal,omitempty"`
	Met  *bool   `json:"met,omitempty"`
	Note string  `json:"note,omitempty"`
}

// Report is what a run measured.
type Report struct {
	Nodes       int      `json:"nodes"`
	Regions     int      `json:"regions"`
	RegionNames []string `json:"region_names"`
	Providers   int      `json:"providers"`
	// Model is the providers' simulated machine, Market its GPUs' market.
	Model     string    `json:"model"`
	Market    string    `json:"market"`
	Intra     string    `json:"intra_latency"`
	Inter     string    `json:"inter_latency"`
	Samples   int       `json:"samples"`
	Floors    Floors    `json:"floors"`
	Measures  []Measure `json:"measures"`
	Faults    []Measure `json:"faults,omitempty"`
	Converged *bool     `json:"converged,omitempty"`
	// FaultsError says why the fault runs stopped early, if they did.
	FaultsError string `json:"faults_error,omitempty"`
	// AskReplicasFull of AskReplicas replicas held every provider's ask
	// 30 s after they were placed.
	AskReplicas     int `json:"ask_replicas"`
	AskReplicasFull int `json:"ask_replicas_full"`
	// AskAllSeconds is how long after the asks were placed every replica
	// held every ask (0 when they never all did).
	AskAllSeconds float64 `json:"ask_all_seconds"`
	// AskRefusals are the book messages the replicas refused or set aside
	// while the asks spread (all replicas, by reason): an ask whose
	// offer could not be pulled at once (offer-pull-failed) or found
	// (offer-unknown, retried) is counted here.
	AskRefusals map[string]int64 `json:"ask_refusals,omitempty"`
	// PartitionCancels bids, held by every replica, were cancelled by
	// their makers on one side of the partition; CancelledLeft is how many
	// (replica, bid) pairs still held one once the books converged.
	PartitionCancels int `json:"partition_cancels"`
	CancelledLeft    int `json:"cancelled_left"`
	// Memory: the Go heap in use per node once the core measures ran
	// (after a GC), the memory the runtime took from the OS per node, and
	// the process's peak RSS, in MiB.
	HeapPerNodeMiB float64 `json:"heap_per_node_mib"`
	SysPerNodeMiB  float64 `json:"sys_per_node_mib"`
	MaxRSSMiB      float64 `json:"max_rss_mib"`
	// What per-node memory grows with, read at the same moment: the
	// goroutines per node (the runtime's count over the nodes) and their
	// stacks' memory per node, and each
	// node's open connections, mean and most.
	GoroutinesPerNode float64 `json:"goroutines_per_node"`
	StackPerNodeMiB   float64 `json:"stack_per_node_mib"`
	ConnsPerNode      float64 `json:"conns_per_node"`
	ConnsMax          int     `json:"conns_max"`
	// HostileIDs is how many hostile identities flooded (Config.Attack);
	// AttackError says why the attack measures stopped, if they did.
	HostileIDs  int    `json:"hostile_ids,omitempty"`
	AttackError string `json:"attack_error,omitempty"`
	// AttackStamped is how many stamped identities the hostile peers
	// paid for (Config.AttackCores); AttackRefusals the book messages the
	// replicas refused while they flooded, all replicas together, by
	// reason.
	AttackStamped  int              `json:"attack_stamped,omitempty"`
	AttackCores    float64          `json:"attack_cores,omitempty"`
	AttackRefusals map[string]int64 `json:"attack_refusals,omitempty"`
	StartSeconds   float64          `json:"start_seconds"`
	Seconds        float64          `json:"seconds"`
}

// Measure returns the named measure, or false.
func (r *Report) Measure(name string) (Measure, bool) {
	for _, m := range append(slices.Clone(r.Measures), r.Faults...) {
		if m.Name == name {
			return m, true
		}
	}
	return Measure{}, false
}

func (r *Report) add(m Measure, faults bool) {
	if m.Floor > 0 {
		m.Ratio = m.Stats.pick(m.Compare) / m.Floor
	}
	if m.Goal > 0 && m.Floor > 0 {
		met := m.Ratio <= m.Goal
		m.Met = &met
	}
	if faults {
		r.Faults = append(r.Faults, m)
	} else {
		r.Measures = append(r.Measures, m)
	}
}

// Print writes the report as a table.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "simnet: %d nodes (%d providers, %s in %s) in %d regions %v, latency %s intra / %s inter (one way), %d samples per measure\n",
		r.Nodes, r.Providers, r.Model, r.Market, r.Regions, r.RegionNames, r.Intra, r.Inter, r.Samples)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "measure\tn\tp50 ms\tp95 ms\tp99 ms\tfloor\tfloor ms\tratio\tgoal\t")
	row := func(m Measure) {
		goal := "-"
		if m.Goal > 0 {
			goal = fmt.Sprintf("<= %.1fx", m.Goal)
			if m.Met != nil && !*m.Met {
				goal += " MISSED"
			} else if m.Met != nil {
				goal += " met"
			}
		}
		ratio, floor := "-", "-"
		if m.Floor > 0 {
			ratio = fmt.Sprintf("%.2fx (%s)", m.Ratio, m.Compare)
			floor = fmt.Sprintf("%.1f", m.Floor)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.1f\t%s\t%s\t%s\t%s\t\n",
			m.Name, m.Stats.Count, m.Stats.P50, m.Stats.P95, m.Stats.P99, m.FloorName, floor, ratio, goal)
	}
	for _, m := range r.Measures {
		row(m)
	}
	for _, m := range r.Faults {
		row(m)
	}
	tw.Flush()
	f := r.Floors
	fmt.Fprintf(w, "floors: find-providers p50 %.1f p95 %.1f ms (%d/%d found all); gossip p50 %.1f p99 %.1f ms; rtt intra p50 %.1f, inter p50 %.1f ms\n",
		f.FindProviders.P50, f.FindProviders.P95, f.FoundAll, f.FindProviders.Count, f.Gossip.P50, f.Gossip.P99, f.RTTIntra.P50, f.RTTInter.P50)
	for _, m := range append(slices.Clone(r.Measures), r.Faults...) {
		if m.Note != "" {
			fmt.Fprintf(w, "note: %s: %s\n", m.Name, m.Note)
		}
	}
	fmt.Fprintf(w, "asks: %d of %d replicas held every provider's ask within 30 s", r.AskReplicasFull, r.AskReplicas)
	if r.AskAllSeconds > 0 {
		fmt.Fprintf(w, " (all of them after %.1f s)", r.AskAllSeconds)
	}
	if len(r.AskRefusals) > 0 {
		fmt.Fprint(w, "; set aside or refused meanwhile, by reason:")
		for _, k := range slices.Sorted(maps.Keys(r.AskRefusals)) {
			fmt.Fprintf(w, " %s %d", k, r.AskRefusals[k])
		}
	}
	fmt.Fprintln(w)
	if r.PartitionCancels > 0 {
		fmt.Fprintf(w, "partition: %d bids cancelled on one side; (replica, cancelled bid) pairs left after heal: %d\n", r.PartitionCancels, r.CancelledLeft)
	}
	fmt.Fprintf(w, "memory: Go heap %.1f MiB per node, runtime total %.1f MiB per node, peak RSS %.0f MiB (%.1f MiB per node); per node %.0f goroutines (stacks %.1f MiB), %.0f connections (most %d)\n",
		r.HeapPerNodeMiB, r.SysPerNodeMiB, r.MaxRSSMiB, r.MaxRSSMiB/float64(max(r.Nodes, 1)), r.GoroutinesPerNode, r.StackPerNodeMiB, r.ConnsPerNode, r.ConnsMax)
	if r.FaultsError != "" {
		fmt.Fprintf(w, "faults stopped early: %s\n", r.FaultsError)
	}
	if r.AttackError != "" {
		fmt.Fprintf(w, "attack measures stopped early: %s\n", r.AttackError)
	}
	if len(r.AttackRefusals) > 0 {
		fmt.Fprintf(w, "attack: %d stamped hostile identities paid for (%.2f cores); book messages refused while they flooded (all replicas), by reason:", r.AttackStamped, r.AttackCores)
		for _, k := range slices.Sorted(maps.Keys(r.AttackRefusals)) {
			fmt.Fprintf(w, " %s %d", k, r.AttackRefusals[k])
		}
		fmt.Fprintln(w)
	}
	if r.Converged != nil {
		fmt.Fprintf(w, "books converged after heal: %v\n", *r.Converged)
	}
	fmt.Fprintf(w, "network up in %.1fs, run %.1fs\n", r.StartSeconds, r.Seconds)
}
