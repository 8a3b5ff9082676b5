// Package attestor is a node's side of GPU attestation challenges: a
// buyer sends a fresh nonce to a provider over p2p.AttestProtocol, the
// provider's GPUs sign reports over it, and the buyer verifies each with
// gpu/attest against NVIDIA's pinned roots, and that no two come from one
// device. The verdict is kept in the store under attest/<peer>; a
// verified one, while fresh, lifts the provider's asks to cc-verified.
package attestor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/suanli/suanli/gpu"
	"github.com/suanli/suanli/gpu/attest"
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

// Config is what an Attestor needs from its node.
type Config struct {
	Host host.Host
	// GPUs is this node's machine; nil when it offers none.
	GPUs  gpu.Backend
	Store *store.Store
	// OfferOf finds a provider's current offer (the node's offer cache);
	// Published is this node's own, or nil.
	OfferOf   func(ctx context.Context, p peer.ID, minSeq uint64) (*proto.Offer, error)
	Published func() *proto.Offer
	// Closing reports that the node is shutting down: challenges are
	// refused from then on.
	Closing func() bool
	Now     func() time.Time
	Log     *slog.Logger
	// Rejects counts failed challenges by reason (kind "attest"); optional.
	Rejects *prometheus.CounterVec
	// Window is how long a verdict counts (default DefaultAttestWindow).
	Window time.Duration
}

// Attestor is a node's attestation side: it challenges providers and
// keeps its verdicts (in the store, with a memo for the hot path: every
// ask is checked against its provider's verdict), and as a provider it
// answers challenges, a bounded number at once. Its methods are safe for
// concurrent use.
type Attestor struct {
	cfg     Config
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

// New returns an Attestor and serves p2p.AttestProtocol on cfg.Host.
func New(cfg Config) *Attestor {
	if cfg.Window == 0 {
		cfg.Window = DefaultAttestWindow
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Published == nil {
		cfg.Published = func() *proto.Offer { return nil }
	}
	if cfg.Closing == nil {
		cfg.Closing = func() bool { return false }
	}
	a := &Attestor{cfg: cfg, window: cfg.Window, sem: make(chan struct{}, attestConcurrency), memo: map[peer.ID]attestMemo{}}
	p2p.HandleAttest(cfg.Host, a.answer)
	return a
}

// Window is how long a verdict counts.
func (a *Attestor) Window() time.Duration { return a.window }

func (a *Attestor) reject(reason string) {
	if a.cfg.Rejects != nil {
		a.cfg.Rejects.WithLabelValues("attest", reason).Inc()
	}
}

// answer is the provider's side: evidence from the GPUs over the
// challenger's nonce, only for GPUs this node offers.
func (a *Attestor) answer(ctx context.Context, from peer.ID, nonce []byte, uuids []string) ([]*proto.AttestEvidence, error) {
	if a.cfg.GPUs == nil {
		return nil, errors.New("this node offers no GPUs")
	}
	if a.cfg.Closing() {
		return nil, errors.New("node shutting down")
	}
	if o := a.cfg.Published(); o != nil {
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
	if a.waiting.Add(1) > attestQueue {
		a.waiting.Add(-1)
		return nil, busy
	}
	select {
	case a.sem <- struct{}{}:
		a.waiting.Add(-1)
		defer func() { <-a.sem }()
	case <-ctx.Done():
		a.waiting.Add(-1)
		return nil, busy
	}
	evs, err := a.cfg.GPUs.Attest(nonce, uuids...)
	if err != nil {
		a.cfg.Log.Debug("attestation refused", "from", from, "err", err)
		return nil, fmt.Errorf("cannot attest: %s", strings.TrimPrefix(err.Error(), "gpu: attest: "))
	}
	out := make([]*proto.AttestEvidence, 0, len(evs))
	for _, e := range evs {
		out = append(out, &proto.AttestEvidence{Uuid: e.UUID, Report: e.Report, CertChain: e.CertChain})
	}
	a.cfg.Log.Debug("attestation answered", "from", from, "gpus", len(out))
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
func (a *Attestor) Attest(ctx context.Context, provider peer.ID) (api.AttestReport, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p2p.AttestTimeout)
		defer cancel()
	}
	offer, err := a.cfg.OfferOf(ctx, provider, 0)
	if err != nil {
		return api.AttestReport{}, fmt.Errorf("attest %s: %w", provider, err)
	}
	want := make([]string, 0, len(offer.Gpus))
	for _, g := range offer.Gpus {
		want = append(want, g.Uuid)
	}
	nonce := make([]byte, p2p.AttestNonceSize)
	rand.Read(nonce)
	rep := api.AttestReport{Provider: provider.String(), Nonce: hex.EncodeToString(nonce), Time: a.cfg.Now().UTC(), GPUs: []api.GPUVerdict{}}

	var evs []*proto.AttestEvidence
	if provider == a.cfg.Host.ID() {
		if evs, err = a.answer(ctx, provider, nonce, want); err != nil {
			err = fmt.Errorf("%w: %v", p2p.ErrAttestRefused, err)
		} else {
			evs, err = p2p.MatchEvidence(evs, want)
		}
	} else {
		evs, err = p2p.Challenge(ctx, a.cfg.Host, provider, nonce, want)
	}
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, p2p.ErrAttestUnreachable) {
			return api.AttestReport{}, fmt.Errorf("attest %s: %w", provider, err)
		}
		a.reject(p2p.AttestReason(err))
		rep.Failure = strings.TrimPrefix(err.Error(), "p2p: ")
		rep.Summary = "FAILED: " + rep.Failure
		a.saveVerdict(provider, rep)
		a.cfg.Log.Info("provider failed attestation", "provider", provider, "reason", rep.Failure)
		return api.AttestReport{}, fmt.Errorf("%w: %s: %w", api.ErrAttestFailed, provider, err)
	}

	now := a.cfg.Now()
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
		a.reject("unverified")
	}
	a.saveVerdict(provider, rep)
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
func (a *Attestor) saveVerdict(p peer.ID, rep api.AttestReport) {
	b, err := json.Marshal(rep)
	if err == nil {
		err = a.cfg.Store.PutVerdict(p, b)
	}
	if err != nil {
		a.cfg.Log.Warn("storing attestation verdict failed", "provider", p, "err", err)
	}
	a.remember(p, memoOf(rep))
}

func memoOf(rep api.AttestReport) attestMemo {
	m := attestMemo{found: true, rep: rep}
	m.rep.GPUs = make([]api.GPUVerdict, len(rep.GPUs))
	for i, g := range rep.GPUs {
		m.rep.GPUs[i] = api.GPUVerdict{UUID: g.UUID, Verified: g.Verified}
	}
	return m
}

func (a *Attestor) remember(p peer.ID, m attestMemo) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.memo) > 100_000 {
		clear(a.memo)
	}
	a.memo[p] = m
}

// Verdict is the last verdict stored for a provider, read from Badger;
// ok is false when it was never challenged.
func (a *Attestor) Verdict(p peer.ID) (rep api.AttestReport, ok bool, err error) {
	b, err := a.cfg.Store.Verdict(p)
	if err == nil {
		err = json.Unmarshal(b, &rep)
	}
	if errors.Is(err, store.ErrNotFound) {
		return api.AttestReport{}, false, nil
	}
	if err != nil {
		return api.AttestReport{}, false, fmt.Errorf("attestor: read attestation verdict: %w", err)
	}
	return rep, true, nil
}

// verdictMemo returns the memo of p's verdict, reading Badger once on a miss.
func (a *Attestor) verdictMemo(p peer.ID) attestMemo {
	a.mu.Lock()
	m, ok := a.memo[p]
	a.mu.Unlock()
	if ok {
		return m
	}
	rep, found, err := a.Verdict(p)
	if err != nil {
		return attestMemo{} // do not remember a read error
	}
	if found {
		m = memoOf(rep)
	}
	a.remember(p, m)
	return m
}

// Verified reports whether this node's last verdict on p is verified and no
// older than window (zero: the node's attestation window).
func (a *Attestor) Verified(p peer.ID, window time.Duration) bool {
	if window == 0 {
		window = a.window
	}
	m := a.verdictMemo(p)
	return m.found && m.rep.Counts(a.cfg.Now(), window)
}

// Covers reports whether this node's fresh verified verdict on p covers
// every GPU of offer: an ask it backs is then cc-verified. A provider
// checks its own GPUs locally first, once per window, so that its asks
// keep up with bids that require cc-verified when it re-checks a take.
func (a *Attestor) Covers(ctx context.Context, p peer.ID, offer *proto.Offer) bool {
	if p == a.cfg.Host.ID() && a.cfg.GPUs != nil {
		a.selfAttest(ctx)
	}
	m := a.verdictMemo(p)
	if !m.found || !m.rep.Counts(a.cfg.Now(), a.window) {
		return false
	}
	uuids := make([]string, len(offer.Gpus))
	for i, g := range offer.Gpus {
		uuids[i] = g.Uuid
	}
	return m.rep.Covers(uuids...)
}

// selfAttest verifies this provider's own GPUs when it has no fresh
// verdict on itself; a failed check also counts until the window ends.
func (a *Attestor) selfAttest(ctx context.Context) {
	self := a.cfg.Host.ID()
	recent := func() bool {
		m := a.verdictMemo(self)
		age := a.cfg.Now().Sub(m.rep.Time)
		return m.found && age <= a.window && age > -time.Minute
	}
	if recent() {
		return
	}
	a.selfMu.Lock()
	defer a.selfMu.Unlock()
	if recent() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, maxSelfAttest)
	defer cancel()
	if _, err := a.Attest(ctx, self); err != nil && !errors.Is(err, api.ErrAttestFailed) {
		a.cfg.Log.Debug("self-attestation did not run", "err", err)
	}
}
