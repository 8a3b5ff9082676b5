package lease

import (
	"context"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/suanli/suanli/market"
)

// Redialling: a lease's two parties must keep reaching each other through
// restarts and network blips, without bootstrap peers. Each side stores
// the counterparty's addresses with the lease (leases.Record.PeerAddrs),
// puts them back in the peerstore on restart, and a loop redials every
// counterparty of an open lease that is not connected, with backoff.

const (
	redialEvery      = time.Second
	redialMaxBackoff = 15 * time.Second
	redialTimeout    = 5 * time.Second
	peerAddrTTL      = 24 * time.Hour
)

// peerAddrs are the addresses this node knows for p, as strings.
func (m *Manager) peerAddrs(p peer.ID) []string {
	var out []string
	for _, a := range m.host.Peerstore().Addrs(p) {
		out = append(out, a.String())
	}
	if o := m.hooks.CachedOffer(p); o != nil {
		for _, a := range o.Addrs { // a provider's offer names its addresses (with /p2p/)
			if m, err := ma.NewMultiaddr(a); err == nil {
				if ai, err := peer.AddrInfoFromP2pAddr(m); err == nil && ai.ID == p {
					for _, x := range ai.Addrs {
						out = append(out, x.String())
					}
				}
			}
		}
	}
	return dedupe(out)
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	out := s[:0]
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// addPeerAddrs puts a lease's stored counterparty addresses back in the
// peerstore.
func (m *Manager) addPeerAddrs(r *Run) {
	var addrs []ma.Multiaddr
	for _, a := range r.rec.PeerAddrs {
		if m, err := ma.NewMultiaddr(a); err == nil {
			addrs = append(addrs, m)
		}
	}
	m.host.Peerstore().AddAddrs(r.peer, addrs, peerAddrTTL)
}

// wakeRedial tells redialLoop that runs has a lease.
func (m *Manager) wakeRedial() {
	select {
	case m.runAdded <- struct{}{}:
	default:
	}
}

// noRuns reports whether the manager holds no lease.
func (m *Manager) noRuns() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.runs) == 0
}

// redialLoop keeps the counterparties of open leases connected.
func (m *Manager) redialLoop() {
	type state struct {
		next    time.Time
		backoff time.Duration
	}
	peers := map[peer.ID]*state{}
	t := m.clock.NewTicker(redialEvery)
	var now time.Time
	defer t.Stop()
	for {
		if m.noRuns() {
			// Nothing to keep connected: sleep until a lease is added
			// (1,000 simulated nodes in one process, most of them never
			// leasing, woke 1,000 times a second for nothing).
			select {
			case <-m.ctx.Done():
				return
			case <-m.runAdded:
			}
		}
		select {
		case <-m.ctx.Done():
			return
		case now = <-t.Chan(): // the ticker's time, not the node's (WithClock): backoffs are waits
		}
		want := map[peer.ID]bool{}
		m.mu.Lock()
		for _, r := range m.runs {
			r.mu.Lock()
			if r.ml.State != market.LeaseClosed || m.leaseUnsettled(r, m.now()) {
				want[r.peer] = true
			}
			r.mu.Unlock()
		}
		m.mu.Unlock()
		for p := range peers {
			if !want[p] {
				delete(peers, p)
			}
		}
		for p := range want {
			if m.host.Network().Connectedness(p) == network.Connected {
				delete(peers, p)
				continue
			}
			st := peers[p]
			if st == nil {
				st = &state{backoff: redialEvery}
				peers[p] = st
			}
			if now.Before(st.next) {
				continue
			}
			ctx, cancel := context.WithTimeout(m.ctx, redialTimeout)
			err := m.host.Connect(ctx, peer.AddrInfo{ID: p})
			cancel()
			if err == nil {
				m.log.Info("redialled a lease's counterparty", "peer", shortID(p))
				delete(peers, p)
				m.pokeLeasesWith(p)
				continue
			}
			m.log.Debug("redial failed", "peer", shortID(p), "err", err, "retry_in", st.backoff)
			st.next = now.Add(st.backoff)
			st.backoff = min(2*st.backoff, redialMaxBackoff)
		}
	}
}

// pokeLeasesWith wakes the loops of p's leases: pending receipts go now.
func (m *Manager) pokeLeasesWith(p peer.ID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.runs {
		if r.peer == p {
			r.mu.Lock()
			r.closeTried, r.closeWait = time.Time{}, 0 // an owed close notice goes now
			r.mu.Unlock()
			r.Poke()
		}
	}
}
