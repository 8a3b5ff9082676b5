package p2p

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"
	quic "github.com/libp2p/go-libp2p/p2p/transport/quic"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	"github.com/prometheus/client_golang/prometheus"
)

// UserAgent is what this host tells its peers it runs.
const UserAgent = "suanli/0.1"

// HostConfig configures NewHost. Zero values take the defaults written on
// each field.
type HostConfig struct {
	// Key is the node's identity; its peer ID is the account. Required.
	Key crypto.PrivKey
	// Listen lists multiaddrs to listen on. Default: TCP and QUIC on
	// 127.0.0.1 with OS-chosen ports, so nothing is exposed unless asked.
	Listen []string
	// ConnLow and ConnHigh are the connection manager's watermarks: above
	// High it trims back to Low. Default 64 and 192: a market node talks to a
	// DHT neighbourhood and a gossip mesh, not thousands of peers.
	ConnLow, ConnHigh int
	// MemoryLimit is the resource manager's memory budget in bytes.
	// Default 512 MiB.
	MemoryLimit int64
	// FDLimit is the resource manager's file-descriptor budget. Default 1024.
	FDLimit int
	// ConnsPerIP bounds the connections from one IPv4 address, and from
	// one IPv6 /56 (eight times as many from one /48), through the
	// resource manager: making keys is free, addresses are not. Default
	// DefaultConnsPerIP.
	ConnsPerIP int
	// LoopbackConns bounds the connections from 127.0.0.0/8 and ::1 all
	// together. Default 0: unlimited, as a devnet runs every node there.
	LoopbackConns int
	// Registerer receives libp2p's own metrics. Default: none (disabled).
	Registerer prometheus.Registerer
}

// DefaultConnsPerIP is HostConfig.ConnsPerIP when not set: libp2p's own
// default, as many as one peer's concurrent dials.
const DefaultConnsPerIP = 8

// DefaultListen is where a node listens when not told: loopback only.
var DefaultListen = []string{"/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1"}

// NewHost starts a libp2p host with Ed25519 identity, TCP and QUIC, noise
// and TLS security, and explicit resource-manager and connection-manager
// limits. It does not use mDNS, NAT port mapping, relays or any public
// bootstrap peer.
func NewHost(cfg HostConfig) (host.Host, error) {
	if cfg.Key == nil {
		return nil, fmt.Errorf("p2p: host needs a key")
	}
	if cfg.Key.Type() != crypto.Ed25519 {
		return nil, fmt.Errorf("p2p: host key is %v, want Ed25519", cfg.Key.Type())
	}
	listen := cfg.Listen
	if len(listen) == 0 {
		listen = DefaultListen
	}
	low, high := cfg.ConnLow, cfg.ConnHigh
	if low == 0 {
		low = 64
	}
	if high == 0 {
		high = 192
	}
	if high < low {
		return nil, fmt.Errorf("p2p: connection high watermark %d below low %d", high, low)
	}
	mem, fds := cfg.MemoryLimit, cfg.FDLimit
	if mem == 0 {
		mem = 512 << 20
	}
	if fds == 0 {
		fds = 1024
	}
	scaling := rcmgr.DefaultLimits
	libp2p.SetDefaultServiceLimits(&scaling)
	limiter := rcmgr.NewFixedLimiter(scaling.Scale(mem, fds))
	perIP := cfg.ConnsPerIP
	if perIP <= 0 {
		perIP = DefaultConnsPerIP
	}
	rmOpts := []rcmgr.Option{rcmgr.WithLimitPerSubnet(
		[]rcmgr.ConnLimitPerSubnet{{PrefixLength: 32, ConnCount: perIP}},
		[]rcmgr.ConnLimitPerSubnet{{PrefixLength: 56, ConnCount: perIP}, {PrefixLength: 48, ConnCount: 8 * perIP}},
	)}
	if cfg.LoopbackConns > 0 {
		rmOpts = append(rmOpts, rcmgr.WithNetworkPrefixLimit(
			[]rcmgr.NetworkPrefixLimit{{Network: netip.MustParsePrefix("127.0.0.0/8"), ConnCount: cfg.LoopbackConns}},
			[]rcmgr.NetworkPrefixLimit{{Network: netip.MustParsePrefix("::1/128"), ConnCount: cfg.LoopbackConns}},
		))
	}
	if cfg.Registerer != nil {
		rcmgr.MustRegisterWith(cfg.Registerer)
		str, err := rcmgr.NewStatsTraceReporter()
		if err != nil {
			return nil, fmt.Errorf("p2p: resource manager metrics: %w", err)
		}
		rmOpts = append(rmOpts, rcmgr.WithTraceReporter(str))
	}
	rm, err := rcmgr.NewResourceManager(limiter, rmOpts...)
	if err != nil {
		return nil, fmt.Errorf("p2p: resource manager: %w", err)
	}
	cm, err := connmgr.NewConnManager(low, high)
	if err != nil {
		return nil, fmt.Errorf("p2p: connection manager: %w", err)
	}
	opts := []libp2p.Option{
		libp2p.Identity(cfg.Key),
		libp2p.ListenAddrStrings(listen...),
		// No port reuse for outgoing TCP: two peers that dial each other at
		// once (mutual bootstrap) would otherwise merge the dials into one
		// TCP simultaneous open, where both sides act as TLS client and
		// the connection fails.
		libp2p.Transport(tcp.NewTCPTransport, tcp.DisableReuseport()),
		libp2p.Transport(quic.NewTransport),
		libp2p.ResourceManager(rm),
		libp2p.ConnectionManager(cm),
		libp2p.UserAgent(UserAgent),
		libp2p.DisableRelay(),
	}
	if cfg.Registerer != nil {
		opts = append(opts, libp2p.PrometheusRegisterer(cfg.Registerer))
	} else {
		opts = append(opts, libp2p.DisableMetrics())
	}
	h, err := libp2p.New(opts...)
	if err != nil {
		rm.Close()
		return nil, fmt.Errorf("p2p: libp2p host: %w", err)
	}
	// The host's address manager publishes the listen addresses a moment
	// after New returns; a node reports them (suanli id, the ready line,
	// offers) only once they are there.
	for deadline := time.Now().Add(5 * time.Second); len(h.Addrs()) == 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if len(h.Addrs()) == 0 {
		h.Close()
		return nil, fmt.Errorf("p2p: the host has no listen address after 5s (listen %v)", listen)
	}
	return h, nil
}

// HostKey is the private key of a host's own identity, which must be an
// Ed25519 key held in its peerstore.
func HostKey(h host.Host) (crypto.PrivKey, error) {
	k := h.Peerstore().PrivKey(h.ID())
	if k == nil {
		return nil, fmt.Errorf("p2p: host %s has no private key in its peerstore", h.ID())
	}
	if k.Type() != crypto.Ed25519 {
		return nil, fmt.Errorf("p2p: host key is %v, want Ed25519", k.Type())
	}
	return k, nil
}
