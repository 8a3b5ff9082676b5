package node

import (
	"errors"
	"fmt"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
)

// WithHost runs the node on a libp2p host the caller built (for example on
// go-libp2p's mocknet, to simulate a network with per-link latency). The
// node signs with the host's key, which must be an Ed25519 key held in the
// host's peerstore; the repo's own key is not used. WithListen is ignored.
// The caller owns the host: Close stops the node's protocols and DHT on it
// but does not close it.
func WithHost(h host.Host) Option {
	return func(o *options) error {
		if h == nil {
			return errors.New("node: WithHost(nil)")
		}
		if _, err := hostKey(h); err != nil {
			return err
		}
		o.host = h
		return nil
	}
}

// hostKey is the private key of the host's own identity.
func hostKey(h host.Host) (crypto.PrivKey, error) {
	k := h.Peerstore().PrivKey(h.ID())
	if k == nil {
		return nil, fmt.Errorf("node: host %s has no private key in its peerstore", h.ID())
	}
	if k.Type() != crypto.Ed25519 {
		return nil, fmt.Errorf("node: host key is %v, want Ed25519", k.Type())
	}
	return k, nil
}
