package node

import (
	"errors"

	"github.com/libp2p/go-libp2p/core/host"

	"github.com/suanli/suanli/p2p"
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
		if _, err := p2p.HostKey(h); err != nil {
			return err
		}
		o.host = h
		return nil
	}
}

// WithStampBits sets the work of this node's maker stamp (p2p/stamp.go)
// and the work it asks of others' to admit them in the stamped lane:
// leading zero bits, default p2p.DefaultStampBits. A repo's stamp of less
// is ground again, in the background (orders go unstamped meanwhile).
// Tests and simulations lower it; every node of a network needs the same.
func WithStampBits(bits int) Option {
	return func(o *options) error { o.stampBits = bits; return p2p.CheckStampBits(bits) }
}
