package simnet

import (
	"context"
	"slices"
	"sync"

	corenet "github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// connView is a mocknet host's network with a Connectedness that does not
// take mocknet's per-host lock.
//
// Mocknet's peernet answers Connectedness under its exclusive lock, the
// one every connection's setup and teardown and every stream's dial take
// too. Gossipsub asks it for each new peer from its single event loop, the
// DHT for every peer a query returns. At 1,000 nodes on 2 cores the
// lock's waiters form a convoy (each hand-off waits for a core among
// thousands of runnable goroutines) and gossipsub's loop, and with it
// every Publish, stalls for minutes. A real swarm answers Connectedness
// without such a lock, so this is a simulation artefact; connView keeps
// its own record of each peer's open connections, fed by the network's
// notifications, and asks each connection whether it is closed (an atomic
// load in mocknet), so a connection closed locally reads as closed at
// once, as it does in mocknet's own answer.
type connView struct {
	corenet.Network
	peers sync.Map // peer.ID → *peerConns
}

type peerConns struct {
	mu    sync.Mutex
	conns []corenet.Conn
}

func newConnView(n corenet.Network) *connView {
	v := &connView{Network: n}
	n.Notify(&corenet.NotifyBundle{ConnectedF: v.connected, DisconnectedF: v.disconnected})
	return v
}

// Connectedness reports Connected while the host holds an open connection
// to p.
func (v *connView) Connectedness(p peer.ID) corenet.Connectedness {
	x, ok := v.peers.Load(p)
	if !ok {
		return corenet.NotConnected
	}
	pc := x.(*peerConns)
	pc.mu.Lock()
	defer pc.mu.Unlock()
	for _, c := range pc.conns {
		if !c.IsClosed() {
			return corenet.Connected
		}
	}
	return corenet.NotConnected
}

// connected records c (a network notification).
func (v *connView) connected(_ corenet.Network, c corenet.Conn) {
	x, _ := v.peers.LoadOrStore(c.RemotePeer(), &peerConns{})
	pc := x.(*peerConns)
	pc.mu.Lock()
	pc.conns = append(pc.conns, c)
	pc.mu.Unlock()
}

// disconnected forgets c (a network notification).
func (v *connView) disconnected(_ corenet.Network, c corenet.Conn) {
	x, ok := v.peers.Load(c.RemotePeer())
	if !ok {
		return
	}
	pc := x.(*peerConns)
	pc.mu.Lock()
	pc.conns = slices.DeleteFunc(pc.conns, func(o corenet.Conn) bool { return o == c })
	pc.mu.Unlock()
}

// Connect is basichost's Connect with connView's answer to "already
// connected?". basichost asks its own network, mocknet's peernet, which
// answers under the exclusive lock connView exists to avoid; at 1,000
// nodes 1,829 goroutines waited there (attempt 5's dump), most of them
// for peers already connected. A peer not connected, or a dial forced
// direct, goes to basichost as before.
func (h *cmHost) Connect(ctx context.Context, pi peer.AddrInfo) error {
	if force, _ := corenet.GetForceDirectDial(ctx); !force && h.net.Connectedness(pi.ID) == corenet.Connected {
		h.Peerstore().AddAddrs(pi.ID, pi.Addrs, peerstore.TempAddrTTL)
		return nil
	}
	return h.Host.Connect(ctx, pi)
}

// NewStream opens a stream as basichost does, skipping its Connect (and
// with it peernet's exclusive lock) when connView holds an open
// connection to p. Should that connection close in between, the stream
// is opened again the usual way, dialing.
func (h *cmHost) NewStream(ctx context.Context, p peer.ID, pids ...protocol.ID) (corenet.Stream, error) {
	if nodial, _ := corenet.GetNoDial(ctx); !nodial && h.net.Connectedness(p) == corenet.Connected {
		s, err := h.Host.NewStream(corenet.WithNoDial(ctx, "connected"), p, pids...)
		if err == nil || ctx.Err() != nil {
			return s, err
		}
	}
	return h.Host.NewStream(ctx, p, pids...)
}
