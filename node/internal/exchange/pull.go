package exchange

import (
	"context"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/p2p"
)

// Asks travel on gossip with their offer's digest, not the offer
// (proto.BookMessage.offer_digest): an offer is up to 64 KB, and with it
// beside every ask each ask dragged it through every mesh link of every
// node, several copies at once in every node's queues. A replica that
// holds no offer with the digest pulls it, once, from the peer that
// relayed the ask, which held it to validate the ask. When that fails the
// ask is checked as before, from the DHT or the provider itself, and
// retried if still unknown.
//
// Config.InlineOfferMax lets the first ask with a small offer carry it
// whole instead (the "the offer travels with the first ask"):
// no round trip per hop for that ask. It is off by default: the
// measurements disagree (BENCHMARKS.md, stop 31). At 300 simulated nodes
// with 60 KB offers the digest asks were held sooner; at 1,000 nodes with
// 3 KB offers the offer beside every ask was held 3x sooner than by
// digest (stop 29 against stop 30), but the one 1,000-node run with the
// offer on the first ask only stalled in its asks phase near the memory
// limit.

// offerPullTimeout bounds one pull from a relaying peer: a round trip and
// up to 64 KB.
const offerPullTimeout = 3 * time.Second

// pull is an offer being pulled by digest: done closes when env (nil when
// the pull failed) is set.
type pull struct {
	done chan struct{}
	env  []byte
}

// Pull is the sealed offer whose digest is d: held already, or asked of
// from by request. Pulls of one digest at the same time wait for the
// first; when it fails, each then asks its own peer.
func (x *Offers) Pull(ctx context.Context, from peer.ID, d [p2p.OfferDigestSize]byte,
	request func(context.Context, peer.ID, [p2p.OfferDigestSize]byte) ([]byte, error)) ([]byte, error) {
	if env := x.Held(d); env != nil {
		return env, nil
	}
	x.mu.Lock()
	p, waiting := x.pulls[d]
	if !waiting {
		p = &pull{done: make(chan struct{})}
		x.pulls[d] = p
	}
	x.mu.Unlock()
	if waiting {
		select {
		case <-p.done:
			if p.env != nil {
				return p.env, nil
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return request(ctx, from, d)
	}
	env, err := request(ctx, from, d)
	x.mu.Lock()
	p.env = env
	delete(x.pulls, d)
	x.mu.Unlock()
	close(p.done)
	return env, err
}

// pullOffer attaches to ev, an ask that travelled with its offer's
// digest, the offer it names: held already, or pulled from the first of
// peers that gives it (the peer that relayed the ask; on a retry its maker
// too, which holds what it published). It reports false when the pulled
// offer is the digest's but does not back the ask (a bad offer its author
// named: the ask is refused); a pull that fails leaves ev without an
// offer, for the DHT's path.
func (b *Books) pullOffer(ctx context.Context, ev *p2p.BookEvent, peers ...peer.ID) bool {
	x := b.cfg.Offers
	if x == nil || ev.Offer != nil || len(ev.OfferDigest) != p2p.OfferDigestSize {
		return true
	}
	d := [p2p.OfferDigestSize]byte(ev.OfferDigest)
	var env []byte
	err := p2p.ErrNoOffer
	for i, p := range peers {
		if p == "" || slices.Contains(peers[:i], p) {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, offerPullTimeout)
		env, err = x.Pull(pctx, p, d, b.requestOffer)
		cancel()
		if err == nil {
			break
		}
	}
	if err != nil {
		b.reject("book", "offer-pull-failed") // counted like offer-unknown: it may yet be accepted
		b.cfg.Log.Debug("offer pull failed", "order", ev.Order.ID, "from", peers, "err", err)
		return true
	}
	if err := x.verified().AttachPulled(ev, env, b.cfg.Now()); err != nil {
		b.cfg.Log.Debug("pulled offer refused", "order", ev.Order.ID, "from", peers, "err", err)
		return false
	}
	x.RememberSealed(ev.OfferProvider, ev.Offer, ev.OfferEnvelope)
	return true
}

// requestOffer asks p for the offer with digest d (OfferDigestProtocol).
func (b *Books) requestOffer(ctx context.Context, p peer.ID, d [p2p.OfferDigestSize]byte) ([]byte, error) {
	if p == "" || b.cfg.Host == nil || p == b.cfg.Host.ID() {
		return nil, p2p.ErrNoOffer
	}
	return p2p.RequestOfferDigest(ctx, b.cfg.Host, p, d)
}
