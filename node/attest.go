package node

import (
	"context"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/internal/attestor"
	"github.com/suanli/suanli/node/internal/view"
	"github.com/suanli/suanli/proto"
)

// Attestation challenges and verdicts are package attestor's; this file
// wires it and keeps the node's API to it.

// DefaultAttestWindow is how long a verified verdict counts by default.
const DefaultAttestWindow = attestor.DefaultAttestWindow

// CheckDistinct names the check, beyond gpu/attest's, that each GPU of an
// answer is a different device: the evidence does not bind the NVML UUID,
// so one genuine GPU's evidence could otherwise stand for eight.
const CheckDistinct = attestor.CheckDistinct

// WithAttestWindow sets how long a verified attestation verdict counts:
// for Verified, and to lift a provider's asks to cc-verified. Default 1 h.
func WithAttestWindow(d time.Duration) Option {
	return func(o *options) error {
		if d < time.Second || d > 30*24*time.Hour {
			return fmt.Errorf("node: attestation window %s out of range 1s..720h", d)
		}
		o.verdictTTL = d
		return nil
	}
}

// startAttest sets up attestation and serves p2p.AttestProtocol.
func (n *Node) startAttest(o options) {
	n.attest = attestor.New(attestor.Config{
		Host: n.host, GPUs: n.gpus, Store: n.store, OfferOf: n.offerOf, Published: n.Published,
		Closing: func() bool { return n.ctx.Err() != nil },
		Now:     n.now, Log: n.log, Rejects: n.metrics.Rejects, Window: o.verdictTTL,
	})
}

// Attest challenges a provider: a fresh 32-byte nonce from crypto/rand,
// evidence for every GPU of its offer, each verified with gpu/attest
// (nonce ours, driver version and UUID as the offer claims). It ends at
// ctx's deadline, or after p2p.AttestTimeout when ctx has none.
//
// A challenge that completes returns its report, verified or not. A
// provider that fails it (refuses, answers late, for the wrong number of
// GPUs or for a GPU not in its offer) gets a failed verdict and the error
// wraps ErrAttestFailed. Either verdict replaces the cached one. When the
// offer cannot be found or the provider cannot be reached, the error says
// so and the cache is left alone. A node attests itself without the network.
func (n *Node) Attest(ctx context.Context, provider string) (_ api.AttestReport, err error) {
	defer classified(&err)
	p, err := peer.Decode(provider)
	if err != nil {
		return api.AttestReport{}, api.BadRequest("peer: %v", err)
	}
	if api.ReadOnly(ctx) {
		return api.AttestReport{}, api.ErrReadOnlyNetwork
	}
	return n.attest.Attest(ctx, p)
}

// Verdict is the last verdict stored for a provider, read from Badger;
// ok is false when it was never challenged.
func (n *Node) Verdict(p peer.ID) (rep api.AttestReport, ok bool, err error) {
	return n.attest.Verdict(p)
}

// Verified reports whether this node's last verdict on p is verified and no
// older than window (zero: the node's attestation window).
func (n *Node) Verified(p peer.ID, window time.Duration) bool {
	return n.attest.Verified(p, window)
}

// attestedLevel is the attestation level of an ask backed by offer:
// cc-verified when this node's fresh verified verdict on the provider
// covers every GPU of the offer (attestor.Covers), else what the offer
// claims.
func (n *Node) attestedLevel(ctx context.Context, p peer.ID, offer *proto.Offer) string {
	if n.attest != nil && n.attest.Covers(ctx, p, offer) {
		return market.AttestCCVerified
	}
	return view.AttestationName(offer.Attestation)
}
