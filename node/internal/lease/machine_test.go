package lease

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/executor"
	"github.com/suanli/suanli/node/internal/leases"
	"github.com/suanli/suanli/node/internal/store"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// The lease protocol's state machine (the table in doc.go), one row per
// test case: a lease in a state, a message in, and what the side that
// takes it answers, becomes and counts. Messages go over real streams
// between two hosts on 127.0.0.1; time is a fake clock.

// t0 is when the test leases start.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// counts records the refusals a Manager counts, "kind/reason" → n.
type counts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counts) Reject(kind, reason string) { c.add(kind + "/" + reason) }
func (c *counts) StoreError(what string)     { c.add("store/" + what) }
func (c *counts) ReceiptsDropped(n int)      { c.add("dropped") }
func (c *counts) add(k string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[k]++
}
func (c *counts) get(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[k]
}
func (c *counts) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := 0
	for _, v := range c.n {
		t += v
	}
	return t
}

// party is one side's lease runtime on a real host and store.
type party struct {
	m       *Manager
	key     crypto.PrivKey
	h       host.Host
	st      *store.Store
	counts  *counts
	clock   *clockwork.FakeClock
	payment chan []byte // payment frames handed to the hook
}

func newKey(t testing.TB) crypto.PrivKey {
	k, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newParty(t testing.TB, clock *clockwork.FakeClock, grace time.Duration) *party {
	t.Helper()
	key := newKey(t)
	h, err := p2p.NewHost(p2p.HostConfig{Key: key, Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(filepath.Join(t.TempDir(), "ds"), store.Options{Logger: slog.New(slog.DiscardHandler), Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	p := &party{key: key, h: h, st: st, counts: &counts{}, clock: clock, payment: make(chan []byte, 4)}
	p.m = New(Config{
		Host: h, Key: key, Store: st, Clock: clock, Log: slog.New(slog.DiscardHandler), Metrics: p.counts,
		Executors: map[string]executor.Executor{executor.Reserve: executor.ReserveExecutor{}},
		Ctx:       ctx, Grace: grace, LogCap: 1 << 20,
		Spawn: func(fn func()) bool {
			wg.Add(1)
			go func() { defer wg.Done(); fn() }()
			return true
		},
		Hooks: Hooks{
			CreditOthers: func(string, peer.ID, string, time.Time) (market.Credit, bool) { return market.Credit{}, false },
			OverCreditLocked: func(market.Credit, bool, *market.Lease, time.Time) (string, bool) {
				return "", false
			},
			LeaseEnded: func() {},
			TakePayment: func(_ peer.ID, body []byte) error {
				p.payment <- body
				return nil
			},
			TakePreemption: func(peer.ID, []byte) error { return errors.New("no preemption here") },
			TakePremium:    func(peer.ID, []byte) error { return errors.New("no resale here") },
			TakeHandover:   func(peer.ID, []byte) ([]byte, error) { return nil, errors.New("no resale here") },
			BidWorkload:    func(string) (executor.Spec, bool) { return executor.Spec{}, false },
			CachedOffer:    func(peer.ID) *proto.Offer { return nil },
			Limits:         func(int) executor.Limits { return executor.Limits{} },
		},
	})
	if err := p.m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		p.m.Stop()
		wg.Wait()
		h.Close()
		st.Close()
	})
	return p
}

func connect(t testing.TB, a, b *party) {
	t.Helper()
	if err := a.h.Connect(context.Background(), peer.AddrInfo{ID: b.h.ID(), Addrs: b.h.Addrs()}); err != nil {
		t.Fatal(err)
	}
}

// terms is a one-hour lease of typ from provider to buyer, billed each
// minute from t0.
func terms(id string, provider, buyer *party, typ proto.LeaseType) *proto.Lease {
	return &proto.Lease{
		Id: id, Provider: []byte(provider.h.ID()), Buyer: []byte(buyer.h.ID()), PriceMicros: 2_400_000, Currency: "USD",
		LeaseType: typ, DurationS: 3600, BillingIntervalS: 60, StartUnixMs: t0.UnixMilli(),
		Gpus: []string{"GPU-0"}, Market: "nvidia-h100-sxm5-80gb",
	}
}

// state is a lease's state as a test sets it up.
type state int

const (
	starting state = iota
	running
	closed // by this side, at t0+30s, as its own close (buyer's or provider's)
)

func (s state) String() string { return [...]string{"starting", "running", "closed"}[s] }

// put adds a run of terms to p's manager in state s, as role.
func (p *party) put(t testing.TB, lt *proto.Lease, role market.Role, s state) *Run {
	t.Helper()
	ml, err := market.NewLease(lt)
	if err != nil {
		t.Fatal(err)
	}
	r := NewRun(lt, ml, leases.Record{Role: role})
	if s >= running {
		ml.Start(t0)
	}
	if s == closed {
		reason := market.CloseBuyer
		if role == market.RoleProvider {
			reason = market.CloseProvider
		}
		if err := ml.End(reason, t0.Add(30*time.Second)); err != nil {
			t.Fatal(err)
		}
		ml.Close(t0.Add(30 * time.Second))
	}
	r.syncRecord()
	if err := p.st.PutLease(lt); err != nil {
		t.Fatal(err)
	}
	if err := leases.PutRecord(p.st, lt.Id, &r.rec); err != nil {
		t.Fatal(err)
	}
	p.m.mu.Lock()
	p.m.runs[lt.Id] = r
	p.m.mu.Unlock()
	p.m.wakeRedial() // as every path that adds a run does
	return r
}

// bill makes provider p sign and store its lease's receipt for the first
// window (t0 to t0+1m) and returns its envelope.
func (p *party) bill(t testing.TB, r *Run) []byte {
	t.Helper()
	now := t0.Add(61 * time.Second)
	r.mu.Lock()
	defer r.mu.Unlock()
	w, ok := r.ml.Due(now)
	if !ok {
		t.Fatal("no window due")
	}
	if err := p.m.billLocked(r, w, now); err != nil {
		t.Fatal(err)
	}
	sr, err := p.st.GetReceipt(r.id, r.ml.Chain.Seq)
	if err != nil {
		t.Fatal(err)
	}
	return sr.Receipt
}

// closeNotice is p's signed notice that it closed lease id.
func closeNotice(t testing.TB, p *party, id string, reason market.CloseReason, at time.Time) []byte {
	t.Helper()
	b, err := SealClose(p.key, leases.CloseNotice{Lease: id, Reason: reason, AtMs: at.UnixMilli()}, p.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func send(t testing.TB, from, to *party, kind byte, body []byte) (byte, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	k, b, err := p2p.SendReceiptMessage(ctx, from.h, to.h.ID(), kind, body)
	if err != nil {
		t.Fatal(err)
	}
	return k, string(b)
}

func frameName(k byte) string {
	switch k {
	case p2p.FrameOK:
		return "ok"
	case p2p.FrameRefuse:
		return "refuse"
	case p2p.FrameCountersign:
		return "countersign"
	}
	return fmt.Sprintf("frame %q", k)
}

func TestReceiptProtocolStates(t *testing.T) {
	type env struct {
		prov, buyer, stranger *party
		lt                    *proto.Lease
		pr                    *Run // the provider's run (running), billing the receipts
	}
	type want struct {
		answer byte
		reject string // the refusal counted ("" none)
		state  market.LeaseState
		reason market.CloseReason // 0: unchanged
		check  func(t *testing.T, e env, r *Run)
	}
	rows := []struct {
		name  string
		side  market.Role // whose run takes the message
		typ   proto.LeaseType
		state state
		msg   func(t *testing.T, e env) (from *party, kind byte, body []byte)
		want  want
	}{
		{"receipt/buyer/running", market.RoleBuyer, proto.LeaseType_LEASE_TYPE_ON_DEMAND, running,
			func(t *testing.T, e env) (*party, byte, []byte) {
				return e.prov, p2p.FrameReceipt, e.prov.bill(t, e.pr)
			},
			want{answer: p2p.FrameCountersign, state: market.LeaseRunning, check: func(t *testing.T, _ env, r *Run) {
				if r.ml.Countersigned.Seq != 1 {
					t.Errorf("countersigned %d receipts, want 1", r.ml.Countersigned.Seq)
				}
			}}},
		{"receipt/buyer/running/resent", market.RoleBuyer, proto.LeaseType_LEASE_TYPE_ON_DEMAND, running,
			func(t *testing.T, e env) (*party, byte, []byte) {
				rc := e.prov.bill(t, e.pr)
				if k, b := send(t, e.prov, e.buyer, p2p.FrameReceipt, rc); k != p2p.FrameCountersign {
					t.Fatalf("first send: %s %s", frameName(k), b)
				}
				return e.prov, p2p.FrameReceipt, rc
			},
			want{answer: p2p.FrameCountersign, state: market.LeaseRunning}},
		{"receipt/buyer/running/forged-signer", market.RoleBuyer, proto.LeaseType_LEASE_TYPE_ON_DEMAND, running,
			func(t *testing.T, e env) (*party, byte, []byte) {
				rc := mustReceipt(e.prov.bill(t, e.pr))
				env, err := p2p.Seal(e.stranger.key, rc, proto.MaxReceiptSize)
				if err != nil {
					t.Fatal(err)
				}
				return e.stranger, p2p.FrameReceipt, env
			},
			want{answer: p2p.FrameRefuse, reject: "receipt/wrong-signer", state: market.LeaseRunning}},
		{"receipt/buyer/running/equivocation", market.RoleBuyer, proto.LeaseType_LEASE_TYPE_ON_DEMAND, running,
			func(t *testing.T, e env) (*party, byte, []byte) {
				env1 := e.prov.bill(t, e.pr)
				if k, b := send(t, e.prov, e.buyer, p2p.FrameReceipt, env1); k != p2p.FrameCountersign {
					t.Fatalf("first send: %s %s", frameName(k), b)
				}
				rc := mustReceipt(env1)
				rc.Usage[0].MeanUtilizationPermille++ // the same window, signed twice differently
				env2, err := p2p.Seal(e.prov.key, rc, proto.MaxReceiptSize)
				if err != nil {
					t.Fatal(err)
				}
				return e.prov, p2p.FrameReceipt, env2
			},
			want{answer: p2p.FrameRefuse, reject: "receipt/equivocation", state: market.LeaseRunning, check: func(t *testing.T, e env, r *Run) {
				if n, err := e.buyer.st.EvidenceCount(r.id); err != nil || n == 0 {
					t.Errorf("no evidence stored of the equivocation (%v)", err)
				}
			}}},
		// A buyer's lease starts with its fill (FromFill, replayLease); one
		// still starting takes a receipt as a running one does.
		{"receipt/buyer/starting", market.RoleBuyer, proto.LeaseType_LEASE_TYPE_ON_DEMAND, starting,
			func(t *testing.T, e env) (*party, byte, []byte) {
				return e.prov, p2p.FrameReceipt, e.prov.bill(t, e.pr)
			},
			want{answer: p2p.FrameCountersign, state: market.LeaseStarting}},
		{"receipt/buyer/closed/past-close", market.RoleBuyer, proto.LeaseType_LEASE_TYPE_ON_DEMAND, closed,
			func(t *testing.T, e env) (*party, byte, []byte) {
				return e.prov, p2p.FrameReceipt, e.prov.bill(t, e.pr)
			},
			want{answer: p2p.FrameRefuse, reject: "receipt/receipt-window", state: market.LeaseClosed}},
		{"receipt/provider/running", market.RoleProvider, proto.LeaseType_LEASE_TYPE_ON_DEMAND, running,
			func(t *testing.T, e env) (*party, byte, []byte) {
				return e.buyer, p2p.FrameReceipt, e.prov.bill(t, e.pr)
			},
			want{answer: p2p.FrameRefuse, reject: "receipt/receipt-lease", state: market.LeaseRunning}},
		{"close/provider/running/buyer", market.RoleProvider, proto.LeaseType_LEASE_TYPE_ON_DEMAND, running,
			func(t *testing.T, e env) (*party, byte, []byte) {
				return e.buyer, p2p.FrameClose, closeNotice(t, e.buyer, e.lt.Id, market.CloseBuyer, t0.Add(10*time.Second))
			},
			want{answer: p2p.FrameOK, state: market.LeaseClosed, reason: market.CloseBuyer}},
		{"close/provider/running/not-its-reason", market.RoleProvider, proto.LeaseType_LEASE_TYPE_ON_DEMAND, running,
			func(t *testing.T, e env) (*party, byte, []byte) {
				return e.buyer, p2p.FrameClose, closeNotice(t, e.buyer, e.lt.Id, market.CloseUnpaid, t0.Add(10*time.Second))
			},
			want{answer: p2p.FrameRefuse, reject: "close/reason", state: market.LeaseRunning}},
		{"close/provider/running/reserved-early", market.RoleProvider, proto.LeaseType_LEASE_TYPE_RESERVED, running,
			func(t *testing.T, e env) (*party, byte, []byte) {
				return e.buyer, p2p.FrameClose, closeNotice(t, e.buyer, e.lt.Id, market.CloseBuyer, t0.Add(10*time.Second))
			},
			want{answer: p2p.FrameRefuse, reject: "close/early-close", state: market.LeaseRunning}},
		{"close/provider/running/malformed", market.RoleProvider, proto.LeaseType_LEASE_TYPE_ON_DEMAND, running,
			func(t *testing.T, e env) (*party, byte, []byte) { return e.buyer, p2p.FrameClose, []byte("{not json") },
			want{answer: p2p.FrameRefuse, reject: "close/bad-envelope", state: market.LeaseRunning}},
		{"close/provider/running/unsigned", market.RoleProvider, proto.LeaseType_LEASE_TYPE_ON_DEMAND, running,
			func(t *testing.T, e env) (*party, byte, []byte) {
				b, _ := json.Marshal(leases.CloseNotice{Lease: e.lt.Id, Reason: market.CloseBuyer, AtMs: t0.Add(10 * time.Second).UnixMilli()})
				return e.buyer, p2p.FrameClose, b
			},
			want{answer: p2p.FrameRefuse, reject: "close/bad-envelope", state: market.LeaseRunning}},
		{"close/provider/running/forged", market.RoleProvider, proto.LeaseType_LEASE_TYPE_ON_DEMAND, running,
			func(t *testing.T, e env) (*party, byte, []byte) {
				// The stranger signs the notice; the buyer's stream carries it.
				return e.buyer, p2p.FrameClose, closeNotice(t, e.stranger, e.lt.Id, market.CloseBuyer, t0.Add(10*time.Second))
			},
			want{answer: p2p.FrameRefuse, reject: "close/wrong-signer", state: market.LeaseRunning}},
		{"close/provider/running/no-reason", market.RoleProvider, proto.LeaseType_LEASE_TYPE_ON_DEMAND, running,
			func(t *testing.T, e env) (*party, byte, []byte) {
				return e.buyer, p2p.FrameClose, closeNotice(t, e.buyer, e.lt.Id, 0, t0.Add(10*time.Second))
			},
			want{answer: p2p.FrameRefuse, reject: "close/malformed", state: market.LeaseRunning}},
		{"close/provider/running/stranger", market.RoleProvider, proto.LeaseType_LEASE_TYPE_ON_DEMAND, running,
			func(t *testing.T, e env) (*party, byte, []byte) {
				return e.stranger, p2p.FrameClose, closeNotice(t, e.stranger, e.lt.Id, market.CloseBuyer, t0.Add(10*time.Second))
			},
			want{answer: p2p.FrameRefuse, reject: "close/unknown-lease", state: market.LeaseRunning}},
		{"close/provider/starting", market.RoleProvider, proto.LeaseType_LEASE_TYPE_ON_DEMAND, starting,
			func(t *testing.T, e env) (*party, byte, []byte) {
				return e.buyer, p2p.FrameClose, closeNotice(t, e.buyer, e.lt.Id, market.CloseBuyer, t0.Add(10*time.Second))
			},
			want{answer: p2p.FrameRefuse, reject: "close/out-of-turn", state: market.LeaseStarting}},
		{"close/buyer/running/provider", market.RoleBuyer, proto.LeaseType_LEASE_TYPE_ON_DEMAND, running,
			func(t *testing.T, e env) (*party, byte, []byte) {
				return e.prov, p2p.FrameClose, closeNotice(t, e.prov, e.lt.Id, market.CloseProvider, t0.Add(10*time.Second))
			},
			want{answer: p2p.FrameOK, state: market.LeaseClosed, reason: market.CloseProvider}},
		{"close/buyer/running/completed-early", market.RoleBuyer, proto.LeaseType_LEASE_TYPE_ON_DEMAND, running,
			func(t *testing.T, e env) (*party, byte, []byte) {
				return e.prov, p2p.FrameClose, closeNotice(t, e.prov, e.lt.Id, market.CloseCompleted, t0.Add(10*time.Second))
			},
			want{answer: p2p.FrameRefuse, reject: "close/out-of-turn", state: market.LeaseRunning}},
		{"close/buyer/running/preempted-on-demand", market.RoleBuyer, proto.LeaseType_LEASE_TYPE_ON_DEMAND, running,
			func(t *testing.T, e env) (*party, byte, []byte) {
				return e.prov, p2p.FrameClose, closeNotice(t, e.prov, e.lt.Id, market.ClosePreempted, t0.Add(10*time.Second))
			},
			want{answer: p2p.FrameRefuse, reject: "close/out-of-turn", state: market.LeaseRunning}},
		{"close/buyer/running/resold-not-reserved", market.RoleBuyer, proto.LeaseType_LEASE_TYPE_ON_DEMAND, running,
			func(t *testing.T, e env) (*party, byte, []byte) {
				return e.prov, p2p.FrameClose, closeNotice(t, e.prov, e.lt.Id, market.CloseResold, t0.Add(10*time.Second))
			},
			want{answer: p2p.FrameRefuse, reject: "close/out-of-turn", state: market.LeaseRunning}},
		{"close/buyer/running/buyer's-reason", market.RoleBuyer, proto.LeaseType_LEASE_TYPE_ON_DEMAND, running,
			func(t *testing.T, e env) (*party, byte, []byte) {
				return e.prov, p2p.FrameClose, closeNotice(t, e.prov, e.lt.Id, market.CloseBuyer, t0.Add(10*time.Second))
			},
			want{answer: p2p.FrameRefuse, reject: "close/reason", state: market.LeaseRunning}},
		{"close/buyer/closed/earlier-agreed", market.RoleBuyer, proto.LeaseType_LEASE_TYPE_ON_DEMAND, closed,
			func(t *testing.T, e env) (*party, byte, []byte) {
				return e.prov, p2p.FrameClose, closeNotice(t, e.prov, e.lt.Id, market.CloseProvider, t0.Add(10*time.Second))
			},
			want{answer: p2p.FrameOK, state: market.LeaseClosed, reason: market.CloseProvider, check: func(t *testing.T, _ env, r *Run) {
				if !r.ml.ClosedAt.Equal(t0.Add(10 * time.Second)) {
					t.Errorf("closed at %s, want the earlier close t0+10s", r.ml.ClosedAt)
				}
			}}},
		{"close/buyer/closed/later-ours-stands", market.RoleBuyer, proto.LeaseType_LEASE_TYPE_ON_DEMAND, closed,
			func(t *testing.T, e env) (*party, byte, []byte) {
				return e.prov, p2p.FrameClose, closeNotice(t, e.prov, e.lt.Id, market.CloseProvider, t0.Add(50*time.Second))
			},
			want{answer: p2p.FrameOK, state: market.LeaseClosed, reason: market.CloseBuyer}},
		{"preemption/buyer/running/hook", market.RoleBuyer, proto.LeaseType_LEASE_TYPE_SPOT, running,
			func(t *testing.T, e env) (*party, byte, []byte) { return e.prov, p2p.FramePreempt, []byte("N") },
			want{answer: p2p.FrameRefuse, state: market.LeaseRunning}},
		{"payment/provider/running/hook", market.RoleProvider, proto.LeaseType_LEASE_TYPE_ON_DEMAND, running,
			func(t *testing.T, e env) (*party, byte, []byte) { return e.buyer, p2p.FramePayment, []byte("P") },
			want{answer: p2p.FrameOK, state: market.LeaseRunning, check: func(t *testing.T, e env, _ *Run) {
				select {
				case b := <-e.prov.payment:
					if string(b) != "P" {
						t.Errorf("payment hook got %q", b)
					}
				default:
					t.Error("the payment frame did not reach the payment hook")
				}
			}}},
		{"unknown-kind/provider/running", market.RoleProvider, proto.LeaseType_LEASE_TYPE_ON_DEMAND, running,
			func(t *testing.T, e env) (*party, byte, []byte) { return e.buyer, 'z', []byte("?") },
			want{answer: p2p.FrameRefuse, reject: "frame/unknown-kind", state: market.LeaseRunning}},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			clock := clockwork.NewFakeClockAt(t0.Add(61 * time.Second))
			e := env{prov: newParty(t, clock, 0), buyer: newParty(t, clock, 0), stranger: newParty(t, clock, 0)}
			connect(t, e.prov, e.buyer)
			connect(t, e.stranger, e.buyer)
			connect(t, e.stranger, e.prov)
			e.lt = terms("lease-"+row.name, e.prov, e.buyer, row.typ)
			// The provider's own run bills the receipts the rows send; the
			// run under test is the side's.
			taker := e.buyer
			if row.side == market.RoleProvider {
				taker = e.prov
			}
			var r *Run
			if row.side == market.RoleProvider {
				r = taker.put(t, e.lt, market.RoleProvider, row.state)
				e.pr = r
			} else {
				e.pr = e.prov.put(t, e.lt, market.RoleProvider, running)
				r = taker.put(t, e.lt, market.RoleBuyer, row.state)
			}
			from, kind, body := row.msg(t, e)
			before := taker.counts.total()
			k, answer := send(t, from, taker, kind, body)
			if k != row.want.answer {
				t.Fatalf("answer %s (%s), want %s", frameName(k), answer, frameName(row.want.answer))
			}
			got := taker.counts.total() - before
			switch {
			case row.want.reject == "" && got != 0:
				t.Errorf("counted %d refusals (%v), want none", got, taker.counts.n)
			case row.want.reject != "" && got != 1:
				t.Errorf("counted %d refusals (%v), want 1 under %s", got, taker.counts.n, row.want.reject)
			case row.want.reject != "" && row.want.reject[len(row.want.reject)-1] != '/' && taker.counts.get(row.want.reject) != 1:
				t.Errorf("refusals %v, want one under %s", taker.counts.n, row.want.reject)
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.ml.State != row.want.state {
				t.Errorf("state %s, want %s", r.ml.State, row.want.state)
			}
			if row.want.reason != 0 && r.ml.Reason != row.want.reason {
				t.Errorf("close reason %s, want %s", r.ml.Reason, row.want.reason)
			}
			if row.want.check != nil {
				row.want.check(t, e, r)
			}
		})
	}
}

// A receipt countersigned by anyone but the lease's buyer is refused and
// counted by the provider, which keeps the receipt pending; the buyer's
// own countersignature is taken (the negative control).
func TestCountersignAnswers(t *testing.T) {
	for _, c := range []struct {
		name   string
		forged bool
	}{{"buyer", false}, {"forged", true}} {
		t.Run(c.name, func(t *testing.T) {
			clock := clockwork.NewFakeClockAt(t0.Add(61 * time.Second))
			prov := newParty(t, clock, 0)
			buyerKey := newKey(t)
			signer := buyerKey
			if c.forged {
				signer = newKey(t)
			}
			bh, err := p2p.NewHost(p2p.HostConfig{Key: buyerKey, Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
			if err != nil {
				t.Fatal(err)
			}
			defer bh.Close()
			p2p.HandleReceipts(bh, func(_ peer.ID, kind byte, body []byte) (byte, []byte) {
				rc := mustReceipt(body)
				cs := &proto.Countersign{LeaseId: rc.LeaseId, Seq: rc.Seq, ReceiptHash: proto.ReceiptHash(body), Buyer: []byte(bh.ID()), CreatedUnixMs: clock.Now().UnixMilli()}
				env, err := p2p.Seal(signer, cs, proto.MaxReceiptSize)
				if err != nil {
					return p2p.FrameRefuse, []byte(err.Error())
				}
				return p2p.FrameCountersign, env
			})
			if err := prov.h.Connect(context.Background(), peer.AddrInfo{ID: bh.ID(), Addrs: bh.Addrs()}); err != nil {
				t.Fatal(err)
			}
			lt := terms("lease-cs-"+c.name, prov, prov, proto.LeaseType_LEASE_TYPE_ON_DEMAND)
			lt.Buyer = []byte(bh.ID())
			r := prov.put(t, lt, market.RoleProvider, running)
			prov.bill(t, r)
			prov.m.sendPending(r)
			r.mu.Lock()
			got := r.ml.Countersigned.Seq
			r.mu.Unlock()
			if c.forged {
				if got != 0 || prov.counts.get("countersign/"+market.Reason(market.ErrCountersign)) != 1 {
					t.Fatalf("forged countersignature: countersigned %d, refusals %v", got, prov.counts.n)
				}
				return
			}
			if got != 1 || prov.counts.total() != 0 {
				t.Fatalf("buyer's countersignature: countersigned %d, refusals %v", got, prov.counts.n)
			}
		})
	}
}

// The exec stream's rows (doc.go): each request in each state, answered
// with an exit frame and a counted refusal, or run.
func TestExecStates(t *testing.T) {
	rows := []struct {
		name   string
		state  state
		from   string // "buyer" or "stranger"
		req    func(id string) []byte
		reject string
		closes market.CloseReason // the lease closes so (0: stays as it was)
	}{
		{"malformed", running, "buyer", func(string) []byte { return []byte("{") }, "exec/malformed", 0},
		{"unknown-lease", running, "buyer", func(string) []byte { return []byte(`{"lease":"nope","command":["true"]}`) }, "exec/unknown-lease", 0},
		{"stranger", running, "stranger", func(id string) []byte { return []byte(`{"lease":"` + id + `","command":["true"]}`) }, "exec/unknown-lease", 0},
		{"starting", starting, "buyer", func(id string) []byte { return []byte(`{"lease":"` + id + `","command":["true"]}`) }, "exec/not-running", 0},
		{"closed", closed, "buyer", func(id string) []byte { return []byte(`{"lease":"` + id + `","command":["true"]}`) }, "exec/not-running", 0},
		// The process executor is not allowed here: the workload is refused
		// and the lease fails.
		{"running/refused", running, "buyer", func(id string) []byte { return []byte(`{"lease":"` + id + `","command":["true"]}`) }, "exec/workload-refused", market.CloseFailed},
		{"closed/attach", closed, "buyer", func(id string) []byte { return []byte(`{"lease":"` + id + `","attach":true}`) }, "", 0},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			clock := clockwork.NewFakeClockAt(t0.Add(10 * time.Second))
			prov, buyer, stranger := newParty(t, clock, 0), newParty(t, clock, 0), newParty(t, clock, 0)
			connect(t, buyer, prov)
			connect(t, stranger, prov)
			lt := terms("lease-exec-"+row.name, prov, buyer, proto.LeaseType_LEASE_TYPE_ON_DEMAND)
			r := prov.put(t, lt, market.RoleProvider, row.state)
			from := buyer
			if row.from == "stranger" {
				from = stranger
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := p2p.OpenExec(ctx, from.h, prov.h.ID(), row.req(lt.Id))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			br := bufio.NewReader(s)
			for {
				kind, body, err := p2p.ReadFrame(br)
				if err != nil {
					t.Fatalf("stream ended without an exit frame: %v", err)
				}
				if kind != p2p.FrameExit {
					continue
				}
				var res executor.ExitResult
				if err := json.Unmarshal(body, &res); err != nil || res.Code != -1 {
					t.Fatalf("exit %s (%v), want code -1", body, err)
				}
				break
			}
			if row.reject != "" && prov.counts.get(row.reject) != 1 {
				t.Errorf("refusals %v, want one under %s", prov.counts.n, row.reject)
			}
			if row.reject == "" && prov.counts.total() != 0 {
				t.Errorf("refusals %v, want none", prov.counts.n)
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			if row.closes != 0 && (r.ml.State != market.LeaseClosed || r.ml.Reason != row.closes) {
				t.Errorf("lease %s (%s), want closed (%s)", r.ml.State, r.ml.Reason, row.closes)
			}
		})
	}
}

// advanceUntil moves the fake clock on by step until cond holds, giving
// the lease's loops time to take each tick; it fails at a real deadline.
func advanceUntil(t *testing.T, clock *clockwork.FakeClock, step time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met by fake time %s", clock.Now().Sub(t0))
		}
		clock.Advance(step)
		time.Sleep(2 * time.Millisecond) // let the loops run: a poll, not a timed assertion
	}
}

func (r *Run) snapshot() (market.LeaseState, market.CloseReason, time.Time, *leases.CloseNotice) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ml.State, r.ml.Reason, r.ml.ClosedAt, r.rec.CloseOwed
}

// A provider whose buyer never countersigns bills on its loop's ticks and
// ends the lease as unpaid once the grace has passed since the lease
// started (no countersignature yet, market.UnpaidDeadline), never before;
// the notice is owed to the buyer.
func TestUnpaidGraceOnFakeClock(t *testing.T) {
	clock := clockwork.NewFakeClockAt(t0)
	const grace = 2 * time.Minute
	prov := newParty(t, clock, grace)
	lt := terms("lease-unpaid", prov, prov, proto.LeaseType_LEASE_TYPE_ON_DEMAND)
	buyer, _ := peer.IDFromPrivateKey(newKey(t)) // nowhere to be reached: no countersignatures
	lt.Buyer = []byte(buyer)
	r := prov.put(t, lt, market.RoleProvider, running)
	prov.m.RunLoop(r)
	// Closed, then the notice recorded as owed (SendClose, after the lock).
	advanceUntil(t, clock, 5*time.Second, func() bool { s, _, _, owed := r.snapshot(); return s == market.LeaseClosed && owed != nil })
	_, reason, at, owed := r.snapshot()
	if reason != market.CloseUnpaid {
		t.Fatalf("closed %s, want unpaid", reason)
	}
	if !at.After(t0.Add(grace)) {
		t.Fatalf("closed at t0+%s, not after the grace from the start (t0+%s)", at.Sub(t0), grace)
	}
	r.mu.Lock()
	billed := r.ml.Chain.Seq
	r.mu.Unlock()
	if billed == 0 {
		t.Fatal("closed as unpaid with no receipt billed")
	}
	if owed == nil || owed.Reason != market.CloseUnpaid {
		t.Fatalf("close notice owed %+v, want the unpaid close", owed)
	}
}

// A buyer that hears no receipt for an interval and the grace (and 2 s)
// closes the lease on its loop's ticks, and owes the provider the notice.
func TestSilentProviderOnFakeClock(t *testing.T) {
	clock := clockwork.NewFakeClockAt(t0)
	const grace = time.Minute
	prov, buyer := newParty(t, clock, grace), newParty(t, clock, grace)
	lt := terms("lease-silent", prov, buyer, proto.LeaseType_LEASE_TYPE_ON_DEMAND)
	r := buyer.put(t, lt, market.RoleBuyer, running)
	buyer.m.RunLoop(r)
	advanceUntil(t, clock, time.Second, func() bool { s, _, _, _ := r.snapshot(); return s == market.LeaseClosed })
	_, reason, at, owed := r.snapshot()
	if min := t0.Add(time.Minute + grace + 2*time.Second); reason != market.CloseBuyer || !at.After(min) {
		t.Fatalf("closed %s at t0+%s, want the buyer's close after t0+%s", reason, at.Sub(t0), min.Sub(t0))
	}
	if owed == nil {
		t.Fatal("no close notice owed to the provider")
	}
}

// An owed close notice that finds no one is re-sent after 1 s, then after
// twice the wait each time; once the counterparty is reachable again the
// loop's next try delivers it, and both sides keep one close.
func TestCloseNoticeBackoffOnFakeClock(t *testing.T) {
	clock := clockwork.NewFakeClockAt(t0.Add(10 * time.Second))
	prov, buyer := newParty(t, clock, 0), newParty(t, clock, 0)
	lt := terms("lease-owed", prov, buyer, proto.LeaseType_LEASE_TYPE_ON_DEMAND)
	pr := prov.put(t, lt, market.RoleProvider, running)
	br := buyer.put(t, lt, market.RoleBuyer, running)
	pr.mu.Lock()
	prov.m.EndLocked(pr, market.CloseProvider, clock.Now(), "")
	at := pr.ml.ClosedAt
	pr.mu.Unlock()
	prov.m.SendClose(pr, market.CloseProvider, at) // the buyer is not reachable
	tries := func() (time.Time, time.Duration) {
		pr.mu.Lock()
		defer pr.mu.Unlock()
		return pr.closeTried, pr.closeWait
	}
	tried, wait := tries()
	if !tried.Equal(clock.Now()) || wait != closeResendFirst {
		t.Fatalf("first try at %s, wait %s; want now, %s", tried, wait, closeResendFirst)
	}
	for _, w := range []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second} {
		clock.Advance(w/2 - time.Millisecond) // still within the wait: not re-sent
		prov.m.sendOwedClose(pr)
		if again, _ := tries(); !again.Equal(tried) {
			t.Fatalf("re-sent %s after the last try, before its wait %s", again.Sub(tried), w/2)
		}
		clock.Advance(time.Millisecond)
		prov.m.sendOwedClose(pr)
		tried, wait = tries()
		if !tried.Equal(clock.Now()) || wait != w {
			t.Fatalf("try at %s with wait %s; want now and %s", tried, wait, w)
		}
	}
	// Reachable again: the provider's loop delivers on a tick past the wait.
	connect(t, prov, buyer)
	prov.m.RunLoop(pr)
	advanceUntil(t, clock, 250*time.Millisecond, func() bool { _, _, _, owed := pr.snapshot(); return owed == nil })
	state, reason, closedAt, _ := br.snapshot()
	if state != market.LeaseClosed || reason != market.CloseProvider || !closedAt.Equal(at) {
		t.Fatalf("buyer's lease %s (%s) at %s; want closed by the provider at %s", state, reason, closedAt, at)
	}
}

// The redial loop reconnects a lease's counterparty on its ticks, from
// the addresses stored with the lease.
func TestRedialOnFakeClock(t *testing.T) {
	clock := clockwork.NewFakeClockAt(t0.Add(10 * time.Second))
	prov, buyer := newParty(t, clock, 0), newParty(t, clock, 0)
	lt := terms("lease-redial", prov, buyer, proto.LeaseType_LEASE_TYPE_ON_DEMAND)
	r := buyer.put(t, lt, market.RoleBuyer, running)
	for _, a := range prov.h.Addrs() {
		r.rec.PeerAddrs = append(r.rec.PeerAddrs, a.String())
	}
	buyer.m.addPeerAddrs(r)
	connected := func() bool { return buyer.h.Network().Connectedness(prov.h.ID()) == network.Connected }
	if connected() {
		t.Fatal("connected before any redial")
	}
	advanceUntil(t, clock, redialEvery, connected)
}

// A buyer whose exec stream breaks reopens it as an attach after 0.5 s,
// then after twice the wait each time, on its clock: each reopening comes
// no sooner than its backoff after the one before, and the first one's
// failure is in the lease's stored output.
func TestExecReconnectBackoffOnFakeClock(t *testing.T) {
	clock := clockwork.NewFakeClockAt(t0.Add(10 * time.Second))
	buyer := newParty(t, clock, 0)
	// The provider answers every exec stream by closing it: no exit frame.
	pkey := newKey(t)
	ph, err := p2p.NewHost(p2p.HostConfig{Key: pkey, Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ph.Close()
	var mu sync.Mutex
	type open struct {
		at     time.Time
		attach bool
	}
	var opens []open
	p2p.HandleExec(context.Background(), ph, func(_ context.Context, _ peer.ID, req []byte, _ *p2p.FrameWriter) {
		var r execRequest
		json.Unmarshal(req, &r)
		mu.Lock()
		opens = append(opens, open{clock.Now(), r.Attach})
		mu.Unlock()
	})
	if err := buyer.h.Connect(context.Background(), peer.AddrInfo{ID: ph.ID(), Addrs: ph.Addrs()}); err != nil {
		t.Fatal(err)
	}
	lt := terms("lease-exec-backoff", buyer, buyer, proto.LeaseType_LEASE_TYPE_ON_DEMAND)
	lt.Provider = []byte(ph.ID())
	r := buyer.put(t, lt, market.RoleBuyer, running)
	r.mu.Lock()
	r.rec.Workload = &executor.Spec{Command: []string{"true"}}
	r.mu.Unlock()
	buyer.m.spawn(func() { buyer.m.followExec(r) })
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(opens) }
	advanceUntil(t, clock, 50*time.Millisecond, func() bool { return count() >= 5 })
	mu.Lock()
	defer mu.Unlock()
	wait := 500 * time.Millisecond
	for i := 1; i < 5; i++ {
		if gap := opens[i].at.Sub(opens[i-1].at); gap < wait {
			t.Errorf("reopening %d came %s after the one before, sooner than its backoff %s", i, gap, wait)
		}
		if !opens[i].attach {
			t.Errorf("reopening %d is not an attach", i)
		}
		wait *= 2
	}
	if opens[0].attach {
		t.Error("the first exec request is an attach")
	}
	v, err := buyer.m.Logs(r.id, 0)
	if err != nil || len(v.Chunks) == 0 || v.Chunks[0].Stream != "stderr" {
		t.Fatalf("stored output %+v (%v), want the first stream's failure on stderr", v, err)
	}
}

// TestFromFillNilManager: a node without a lease runtime (a nil Manager)
// applies a fill it is party to without a lease, and does not panic: the
// book's fill hook and the trader both call FromFill unguarded.
func TestFromFillNilManager(t *testing.T) {
	var m *Manager
	m.FromFill(&p2p.BookEvent{Kind: p2p.KindFill, Lease: &proto.Lease{Id: "lease"}})
}
