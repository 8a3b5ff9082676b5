package node

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/suanli/suanli/node/internal/lease"
	"github.com/suanli/suanli/node/internal/metrics"
	"github.com/suanli/suanli/node/internal/provider"
)

// The node's Prometheus registry is package metrics'.

// Gatherer reads the node's metrics, as the API's /metrics serves them.
func (n *Node) Gatherer() prometheus.Gatherer { return n.metrics.Gatherer() }

// watchMetrics registers the gauges read from the node on each scrape.
func watchMetrics(m *metrics.Metrics, n *Node) {
	m.Reg.MustRegister(
		lease.NewCollector(func() *lease.Manager { return n.leases }, func() (int, bool) { return provider.Count(n.gpus), n.gpus != nil }),
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
