package lease

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/suanli/suanli/market"
)

// Collector serves the leases' figures at each scrape, read from the same
// views `suanli leases` shows, so the metrics and the CLI never disagree:
// leases by role, state and close reason; countersigned receipts and the
// amount they bill (a provider's revenue, a buyer's spend) by currency;
// and a provider's GPUs leased and free.
type Collector struct {
	m func() *Manager // nil until the node started its leases
	// inventory is how many GPUs the provider has (ok false: a buyer).
	inventory                func() (int, bool)
	leases, receipts, billed *prometheus.Desc
	gpusLeased, gpusFree     *prometheus.Desc
}

// NewCollector is the collector of the manager m returns (nil: none
// yet, nothing collected); inventory counts the provider's GPUs (ok
// false: a buyer, with no GPU figures).
func NewCollector(m func() *Manager, inventory func() (int, bool)) *Collector {
	return &Collector{m: m, inventory: inventory,
		leases: prometheus.NewDesc("suanli_leases", "Leases this node is party to, by role, state and close reason.",
			[]string{"role", "state", "reason"}, nil),
		receipts: prometheus.NewDesc("suanli_lease_receipts_countersigned_total", "Receipts countersigned by the buyer, by role.",
			[]string{"role"}, nil),
		billed: prometheus.NewDesc("suanli_lease_billed_micros_total",
			"What countersigned receipts bill, in micro-units of the currency: a provider's revenue (role provider), a buyer's spend (role buyer).",
			[]string{"role", "currency"}, nil),
		gpusLeased: prometheus.NewDesc("suanli_gpus_leased", "This provider's GPUs held by a running lease.", nil, nil),
		gpusFree:   prometheus.NewDesc("suanli_gpus_free", "This provider's GPUs not held by a running lease.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.leases, c.receipts, c.billed, c.gpusLeased, c.gpusFree} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	m := c.m()
	if m == nil {
		return
	}
	views := m.Leases()
	type key struct{ role, state, reason string }
	type money struct{ role, currency string }
	count := map[key]int{}
	receipts := map[string]uint64{"provider": 0, "buyer": 0}
	billed := map[money]int64{}
	leased := map[string]bool{}
	for _, v := range views {
		count[key{v.Role, v.State, v.Reason}]++
		receipts[v.Role] += v.Countersigned
		if a, err := market.ParseAmount(v.Cumulative, v.Currency); err == nil {
			billed[money{v.Role, v.Currency}] += a.Micros
		}
		if v.Role == market.RoleProvider.String() && v.State != market.LeaseClosed.String() {
			for _, g := range v.GPUs {
				leased[g] = true
			}
		}
	}
	for k, v := range count {
		ch <- prometheus.MustNewConstMetric(c.leases, prometheus.GaugeValue, float64(v), k.role, k.state, k.reason)
	}
	for role, v := range receipts {
		ch <- prometheus.MustNewConstMetric(c.receipts, prometheus.CounterValue, float64(v), role)
	}
	for k, v := range billed {
		ch <- prometheus.MustNewConstMetric(c.billed, prometheus.CounterValue, float64(v), k.role, k.currency)
	}
	if total, ok := c.inventory(); ok {
		ch <- prometheus.MustNewConstMetric(c.gpusLeased, prometheus.GaugeValue, float64(len(leased)))
		ch <- prometheus.MustNewConstMetric(c.gpusFree, prometheus.GaugeValue, float64(max(0, total-len(leased))))
	}
}
