package node

import (
	"slices"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"

	"github.com/suanli/suanli/gpu"
)

// metrics is one node's Prometheus registry, served at /metrics.
type metrics struct {
	reg       *prometheus.Registry
	util      *prometheus.GaugeVec
	memUsed   *prometheus.GaugeVec
	temp      *prometheus.GaugeVec
	power     *prometheus.GaugeVec
	energy    *energyCounter
	published prometheus.Counter
	found     prometheus.Counter
	rejects   *prometheus.CounterVec
	// storeErrors counts failed writes on the money path, by what.
	storeErrors *prometheus.CounterVec
	orders      prometheus.Counter
	fills       prometheus.Counter
	// leaseReceiptsDropped counts a provider's receipts dropped because
	// they billed past a close agreed with the buyer afterwards.
	leaseReceiptsDropped prometheus.Counter
}

func newMetrics() *metrics {
	gpuLabels := []string{"uuid", "index"}
	m := &metrics{
		reg: prometheus.NewRegistry(),
		util: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "suanli_gpu_utilization_percent", Help: "GPU utilization over the last sample period, percent.",
		}, gpuLabels),
		memUsed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "suanli_gpu_memory_used_bytes", Help: "GPU memory in use, bytes.",
		}, gpuLabels),
		temp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "suanli_gpu_temperature_celsius", Help: "GPU core temperature, degrees Celsius.",
		}, gpuLabels),
		power: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "suanli_gpu_power_watts", Help: "GPU power draw, watts.",
		}, gpuLabels),
		energy: &energyCounter{desc: prometheus.NewDesc("suanli_gpu_energy_joules_total",
			"GPU energy consumed since the driver loaded, joules (0 when not reported).", gpuLabels, nil)},
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "suanli_offers_published_total", Help: "Offers this node published to the DHT.",
		}),
		found: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "suanli_offers_found_total", Help: "Valid offers this node fetched from the DHT.",
		}),
		rejects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "suanli_validation_rejects_total", Help: "Signed objects refused, by kind and reason.",
		}, []string{"kind", "reason"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "suanli_store_write_errors_total", Help: "Failed datastore writes on the money path (leases, receipts, holds, evidence), by what.",
		}, []string{"what"}),
		orders: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "suanli_book_orders_total", Help: "Orders added to this node's book replicas.",
		}),
		fills: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "suanli_book_fills_total", Help: "Doubly-signed fills applied to this node's book replicas.",
		}),
		leaseReceiptsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "suanli_lease_receipts_dropped_total", Help: "Uncountersigned receipts this provider dropped: they billed past a close agreed with the buyer.",
		}),
	}
	m.reg.MustRegister(m.orders, m.fills, m.util, m.memUsed, m.temp, m.power, m.energy, m.published, m.found, m.rejects, m.storeErrors, m.leaseReceiptsDropped,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// watch registers gauges read from the node on each scrape.
func (m *metrics) watch(n *Node) {
	m.reg.MustRegister(newLeaseCollector(n),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "suanli_dht_routing_table_peers", Help: "Peers in the DHT routing table.",
		}, func() float64 {
			if d := n.dht; d != nil {
				return float64(d.RoutingTableSize())
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "suanli_peers_connected", Help: "Peers with an open connection.",
		}, func() float64 {
			if h := n.host; h != nil {
				return float64(len(h.Network().Peers()))
			}
			return 0
		}),
	)
}

func (m *metrics) observe(tel []gpu.Telemetry) {
	for i, t := range tel {
		l := prometheus.Labels{"uuid": t.UUID, "index": strconv.Itoa(i)}
		m.util.With(l).Set(float64(t.UtilizationPercent))
		m.memUsed.With(l).Set(float64(t.MemoryUsedBytes))
		m.temp.With(l).Set(float64(t.TemperatureC))
		m.power.With(l).Set(float64(t.PowerMilliwatts) / 1000)
	}
	m.energy.set(tel)
}

// energyCounter serves each GPU's cumulative energy reading, as NVML
// reports it, as a counter: the driver counts, this only reports.
type energyCounter struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	last []gpu.Telemetry
}

func (e *energyCounter) set(tel []gpu.Telemetry) {
	e.mu.Lock()
	e.last = slices.Clone(tel)
	e.mu.Unlock()
}

func (e *energyCounter) Describe(ch chan<- *prometheus.Desc) { ch <- e.desc }

func (e *energyCounter) Collect(ch chan<- prometheus.Metric) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, t := range e.last {
		ch <- prometheus.MustNewConstMetric(e.desc, prometheus.CounterValue, float64(t.EnergyMillijoules)/1000, t.UUID, strconv.Itoa(i))
	}
}

// lintFailing are libp2p's metric families that Prometheus's linter
// (promtool check metrics) refuses: a counter without _total, a gauge with
// _total, gauges ending _count. /metrics leaves them out, so a scrape
// passes the linter; libp2p's other metrics are served as they are.
var lintFailing = map[string]bool{
	"libp2p_eventbus_subscriber_event_queued": true,
	"libp2p_eventbus_subscribers_total":       true,
	"libp2p_identify_addrs_count":             true,
	"libp2p_identify_protocols_count":         true,
}

// gatherer is what /metrics serves: the registry less lintFailing.
func (m *metrics) gatherer() prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, err := m.reg.Gather()
		return slices.DeleteFunc(mfs, func(mf *dto.MetricFamily) bool { return lintFailing[mf.GetName()] }), err
	})
}
