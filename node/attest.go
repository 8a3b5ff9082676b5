package node

// Attestation challenges: a buyer sends a fresh nonce to a provider over
// p2p.AttestProtocol, the provider's GPUs sign reports over it, and the
// buyer verifies each with gpu/attest against NVIDIA's pinned roots. The
// verdict is cached in Badger under attest/<peer>; a verified one, while
// fresh (WithAttestWindow), lifts the provider's asks to cc-verified.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/gpu/attest"
	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/internal/store"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// DefaultAttestWindow is how long a verified verdict counts by default.
const DefaultAttestWindow = time.Hour

// attestConcurrency bounds the challenges a provider answers at once (NVML
// serializes attestation per machine anyway); attestQueue bounds those
// waiting for a turn, beyond which a challenge is refused as busy.
const (
	attestConcurrency = 2
	attestQueue       = 16
)

// maxSelfAttest bounds a provider's check of its own GPUs.
const maxSelfAttest = 10 * time.Second

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

// attestState is the node's attestation side: the provider's bound on
// concurrent answers, and a memo of the Badger verdicts for the hot path
// (every ask checked against its provider's verdict).
type attestState struct {
	window  time.Duration
	sem     chan struct{}
	waiting atomic.Int32
	selfMu  sync.Mutex // one self-check at a time

	mu   sync.Mutex
	memo map[peer.ID]attestMemo
}

// attestMemo is a stored verdict without its checks; the zero value
// records that none is stored.
type attestMemo struct {
	found bool
	rep   api.AttestReport
}

// startAttest sets up attestation and serves p2p.AttestProtocol.
func (n *Node) startAttest(o options) {
	w := o.verdictTTL
	if w == 0 {
		w = DefaultAttestWindow
	}
	n.attest = &attestState{window: w, sem: make(chan struct{}, attestConcurrency), memo: map[peer.ID]attestMemo{}}
	p2p.HandleAttest(n.host, n.answerAttest)
}

// answerAttest is the provider's side: evidence from the GPUs over the
// challenger's nonce, only for GPUs this node offers.
func (n *Node) answerAttest(ctx context.Context, from peer.ID, nonce []byte, uuids []string) ([]*proto.AttestEvidence, error) {
	if n.gpus == nil {
		return nil, errors.New("this node offers no GPUs")
	}
	if n.ctx.Err() != nil {
		return nil, errors.New("node shutting down")
	}
	if o := n.Published(); o != nil {
		offered := make(map[string]bool, len(o.Gpus))
		for _, g := range o.Gpus {
			offered[g.Uuid] = true
		}
		for _, u := range uuids {
			if !offered[u] {
				return nil, fmt.Errorf("GPU %q is not in my offer", p2p.Printable(u, 80))
			}
		}
		if len(uuids) == 0 {
			for _, g := range o.Gpus {
				uuids = append(uuids, g.Uuid)
			}
		}
	}
	busy := errors.New("busy: too many attestation challenges at once, try again later")
	if n.attest.waiting.Add(1) > attestQueue {
		n.attest.waiting.Add(-1)
		return nil, busy
	}
	select {
	case n.attest.sem <- struct{}{}:
		n.attest.waiting.Add(-1)
		defer func() { <-n.attest.sem }()
	case <-ctx.Done():
		n.attest.waiting.Add(-1)
		return nil, busy
	}
	evs, err := n.gpus.Attest(nonce, uuids...)
	if err != nil {
		n.log.Debug("attestation refused", "from", from, "err", err)
		return nil, fmt.Errorf("cannot attest: %s", strings.TrimPrefix(err.Error(), "gpu: attest: "))
	}
	out := make([]*proto.AttestEvidence, 0, len(evs))
	for _, e := range evs {
		out = append(out, &proto.AttestEvidence{Uuid: e.UUID, Report: e.Report, CertChain: e.CertChain})
	}
	n.log.Debug("attestation answered", "from", from, "gpus", len(out))
	return out, nil
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
	return n.attestPeer(ctx, p)
}

// attest is Attest of a decoded peer.
func (n *Node) attestPeer(ctx context.Context, provider peer.ID) (api.AttestReport, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p2p.AttestTimeout)
		defer cancel()
	}
	offer, err := n.offerOf(ctx, provider, 0)
	if err != nil {
		return api.AttestReport{}, fmt.Errorf("node: attest %s: %w", provider, err)
	}
	want := make([]string, 0, len(offer.Gpus))
	for _, g := range offer.Gpus {
		want = append(want, g.Uuid)
	}
	nonce := make([]byte, p2p.AttestNonceSize)
	rand.Read(nonce)
	rep := api.AttestReport{Provider: provider.String(), Nonce: hex.EncodeToString(nonce), Time: n.now().UTC(), GPUs: []api.GPUVerdict{}}

	var evs []*proto.AttestEvidence
	if provider == n.host.ID() {
		if evs, err = n.answerAttest(ctx, provider, nonce, want); err != nil {
			err = fmt.Errorf("%w: %v", p2p.ErrAttestRefused, err)
		} else {
			evs, err = p2p.MatchEvidence(evs, want)
		}
	} else {
		evs, err = p2p.Challenge(ctx, n.host, provider, nonce, want)
	}
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, p2p.ErrAttestUnreachable) {
			return api.AttestReport{}, fmt.Errorf("node: attest %s: %w", provider, err)
		}
		n.metrics.rejects.WithLabelValues("attest", p2p.AttestReason(err)).Inc()
		rep.Failure = strings.TrimPrefix(err.Error(), "p2p: ")
		rep.Summary = "FAILED: " + rep.Failure
		n.saveVerdict(provider, rep)
		n.log.Info("provider failed attestation", "provider", provider, "reason", rep.Failure)
		return api.AttestReport{}, fmt.Errorf("%w: %s: %w", api.ErrAttestFailed, provider, err)
	}

	now := n.now()
	sim := strings.HasPrefix(offer.GetHost().GetBackend(), "sim:")
	verdicts := make([]*attest.Verdict, len(evs))
	for i, e := range evs {
		verdicts[i] = attest.Verify(attest.Evidence{
			Report: e.Report, CertChain: e.CertChain, Nonce: nonce,
			DriverVersion: offer.GetHost().GetDriverVersion(), GPUUUID: want[i],
		}, attest.Options{Now: now})
	}
	distinct := distinctDevices(verdicts)
	rep.Verified = true
	verified := 0
	for i, v := range verdicts {
		g := api.GPUVerdict{UUID: want[i], Verified: v.Verified(), Summary: v.Summary(), Checks: make([]api.CheckView, 0, len(v.Checks)+1)}
		for _, c := range v.Checks {
			reason := c.Reason
			if c.Name == attest.CheckNonce && c.Outcome == attest.Fail && sim {
				reason += " (a simulated machine serves NVIDIA's sample evidence, made for another nonce)"
			}
			g.Checks = append(g.Checks, api.CheckView{Name: c.Name, Outcome: c.Outcome.String(), Reason: reason})
		}
		g.Checks = append(g.Checks, distinct[i])
		if distinct[i].Outcome == attest.Fail.String() {
			g.Verified = false
			g.Summary += ", " + distinct[i].Reason
		}
		if g.Verified {
			verified++
		}
		rep.Verified = rep.Verified && g.Verified
		rep.GPUs = append(rep.GPUs, g)
	}
	rep.Summary = summarizeGPUs(rep.GPUs, verified)
	if !rep.Verified {
		n.metrics.rejects.WithLabelValues("attest", "unverified").Inc()
	}
	n.saveVerdict(provider, rep)
	return rep, nil
}

// CheckDistinct names the check, beyond gpu/attest's, that each GPU of an
// answer is a different device: the evidence does not bind the NVML UUID,
// so one genuine GPU's evidence could otherwise stand for eight.
const CheckDistinct = "distinct"

// distinctDevices checks that no two evidences come from the same device
// (same leaf key, or same device ID in the leaf certificate).
func distinctDevices(vs []*attest.Verdict) []api.CheckView {
	out := make([]api.CheckView, len(vs))
	byKey, byID := map[string][]int{}, map[string][]int{}
	for i, v := range vs {
		if len(v.Chain) == 0 {
			continue
		}
		byKey[string(v.Chain[0].RawSubjectPublicKeyInfo)] = append(byKey[string(v.Chain[0].RawSubjectPublicKeyInfo)], i)
		if v.Facts.DeviceID != "" {
			byID[v.Facts.DeviceID] = append(byID[v.Facts.DeviceID], i)
		}
	}
	for i, v := range vs {
		if len(v.Chain) == 0 {
			out[i] = api.CheckView{Name: CheckDistinct, Outcome: attest.NotChecked.String(), Reason: "no leaf certificate"}
			continue
		}
		same := map[int]bool{}
		for _, j := range byKey[string(v.Chain[0].RawSubjectPublicKeyInfo)] {
			same[j] = true
		}
		if v.Facts.DeviceID != "" {
			for _, j := range byID[v.Facts.DeviceID] {
				same[j] = true
			}
		}
		name := v.Facts.DeviceID
		if name == "" {
			name = "with this leaf key"
		}
		if len(same) == 1 {
			out[i] = api.CheckView{Name: CheckDistinct, Outcome: attest.Pass.String(), Reason: "device " + name + " answers for this GPU only"}
			continue
		}
		out[i] = api.CheckView{Name: CheckDistinct, Outcome: attest.Fail.String(),
			Reason: fmt.Sprintf("the same device %s answers for %d of the offer's GPUs", name, len(same))}
	}
	return out
}

// summarizeGPUs is "N of M GPUs verified", then the GPUs' summaries, once
// each.
func summarizeGPUs(gs []api.GPUVerdict, verified int) string {
	s := fmt.Sprintf("%d of %d GPUs verified", verified, len(gs))
	var distinct []string
	seen := map[string]bool{}
	for _, g := range gs {
		if !seen[g.Summary] {
			seen[g.Summary] = true
			distinct = append(distinct, g.Summary)
		}
	}
	if len(distinct) == 1 && len(gs) > 1 {
		return s + ", each: " + distinct[0]
	}
	return s + ": " + strings.Join(distinct, "; ")
}

// saveVerdict stores rep as the verdict on p and updates the memo.
func (n *Node) saveVerdict(p peer.ID, rep api.AttestReport) {
	b, err := json.Marshal(rep)
	if err == nil {
		err = n.store.PutVerdict(p, b)
	}
	if err != nil {
		n.log.Warn("storing attestation verdict failed", "provider", p, "err", err)
	}
	n.remember(p, memoOf(rep))
}

func memoOf(rep api.AttestReport) attestMemo {
	m := attestMemo{found: true, rep: rep}
	m.rep.GPUs = make([]api.GPUVerdict, len(rep.GPUs))
	for i, g := range rep.GPUs {
		m.rep.GPUs[i] = api.GPUVerdict{UUID: g.UUID, Verified: g.Verified}
	}
	return m
}

func (n *Node) remember(p peer.ID, m attestMemo) {
	n.attest.mu.Lock()
	defer n.attest.mu.Unlock()
	if len(n.attest.memo) > 100_000 {
		clear(n.attest.memo)
	}
	n.attest.memo[p] = m
}

// Verdict is the last verdict stored for a provider, read from Badger;
// ok is false when it was never challenged.
func (n *Node) Verdict(p peer.ID) (rep api.AttestReport, ok bool, err error) {
	b, err := n.store.Verdict(p)
	if err == nil {
		err = json.Unmarshal(b, &rep)
	}
	if errors.Is(err, store.ErrNotFound) {
		return api.AttestReport{}, false, nil
	}
	if err != nil {
		return api.AttestReport{}, false, fmt.Errorf("node: read attestation verdict: %w", err)
	}
	return rep, true, nil
}

// verdictMemo returns the memo of p's verdict, reading Badger once on a miss.
func (n *Node) verdictMemo(p peer.ID) attestMemo {
	n.attest.mu.Lock()
	m, ok := n.attest.memo[p]
	n.attest.mu.Unlock()
	if ok {
		return m
	}
	rep, found, err := n.Verdict(p)
	if err != nil {
		return attestMemo{} // do not remember a read error
	}
	if found {
		m = memoOf(rep)
	}
	n.remember(p, m)
	return m
}

// Verified reports whether this node's last verdict on p is verified and no
// older than window (zero: the node's attestation window).
func (n *Node) Verified(p peer.ID, window time.Duration) bool {
	if window == 0 {
		window = n.attest.window
	}
	m := n.verdictMemo(p)
	return m.found && m.rep.Counts(n.now(), window)
}

// attestedLevel is the attestation level of an ask backed by offer:
// cc-verified when this node's fresh verified verdict on the provider
// covers every GPU of the offer, else what the offer claims. A provider
// checks its own GPUs locally, once per window, so that its asks keep up
// with bids that require cc-verified when it re-checks a take.
func (n *Node) attestedLevel(ctx context.Context, p peer.ID, offer *proto.Offer) string {
	level := attestationName(offer.Attestation)
	if n.attest == nil {
		return level
	}
	if p == n.host.ID() && n.gpus != nil {
		n.selfAttest(ctx)
	}
	m := n.verdictMemo(p)
	if !m.found || !m.rep.Counts(n.now(), n.attest.window) {
		return level
	}
	uuids := make([]string, len(offer.Gpus))
	for i, g := range offer.Gpus {
		uuids[i] = g.Uuid
	}
	if !m.rep.Covers(uuids...) {
		return level
	}
	return market.AttestCCVerified
}

// selfAttest verifies this provider's own GPUs when it has no fresh
// verdict on itself; a failed check also counts until the window ends.
func (n *Node) selfAttest(ctx context.Context) {
	self := n.host.ID()
	recent := func() bool {
		m := n.verdictMemo(self)
		age := n.now().Sub(m.rep.Time)
		return m.found && age <= n.attest.window && age > -time.Minute
	}
	if recent() {
		return
	}
	n.attest.selfMu.Lock()
	defer n.attest.selfMu.Unlock()
	if recent() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, maxSelfAttest)
	defer cancel()
	if _, err := n.attestPeer(ctx, self); err != nil && !errors.Is(err, api.ErrAttestFailed) {
		n.log.Debug("self-attestation did not run", "err", err)
	}
}
