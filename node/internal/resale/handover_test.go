package resale

import (
	"bytes"
	"crypto/rand"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/internal/store"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// provider is the provider's side of leases, as the handover sees them.
type provider struct {
	Node    // any other method panics: the provider's handover must not reach it
	leases  map[string]*Lease
	started []string // new leases started
}

func (p *provider) Lease(id string) (Lease, error) {
	if l := p.leases[id]; l != nil {
		return *l, nil
	}
	return Lease{}, store.ErrNotFound
}
func (p *provider) HandOver(id string, fn func(time.Time) (time.Time, string, error)) (time.Time, error) {
	l := p.leases[id]
	if l.State != market.LeaseRunning {
		return time.Time{}, &market.ResaleError{Label: "ended", Reason: "lease " + id + " is " + l.State.String()}
	}
	at, _, err := fn(time.UnixMilli(l.Terms.StartUnixMs))
	if err != nil {
		return time.Time{}, err
	}
	l.State = market.LeaseClosed
	return at, nil
}
func (p *provider) Spawn(fn func()) bool           { fn(); return true }
func (p *provider) StartLease(ev *p2p.BookEvent)   { p.started = append(p.started, ev.Lease.Id) }
func (p *provider) ResoldClosed(string, time.Time) {}

// count is rejects{handover,reason}.
func count(v *prometheus.CounterVec, reason string) float64 { return countOf(v, "handover", reason) }

// countOf is rejects{kind,reason}.
func countOf(v *prometheus.CounterVec, kind, reason string) float64 {
	var m dto.Metric
	if err := v.WithLabelValues(kind, reason).Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

type party struct {
	key crypto.PrivKey
	id  peer.ID
}

func newParty(t *testing.T) party {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.IDFromPrivateKey(k)
	return party{k, id}
}

// TestHandoverStates drives the provider's state table (package doc), one
// message at a time, each out-of-turn message with its refusal and its
// count, and the honest handover between them.
func TestHandoverStates(t *testing.T) {
	prov, holder, buyer, stranger := newParty(t), newParty(t), newParty(t), newParty(t)
	h, err := p2p.NewHost(p2p.HostConfig{Key: prov.key, Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	st, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	now := time.Now()
	lease := func(id string, state market.LeaseState, role market.Role) *Lease {
		return &Lease{ID: id, Peer: holder.id, Role: role, State: state, Terms: &proto.Lease{Id: id, Provider: []byte(prov.id),
			Buyer: []byte(holder.id), Gpus: []string{"g1", "g2"}, PriceMicros: 2_000_000, Currency: "USD",
			LeaseType: proto.LeaseType_LEASE_TYPE_RESERVED, DurationS: 3600, BillingIntervalS: 1,
			StartUnixMs: now.Add(-time.Minute).UnixMilli(), Market: "nvidia-h100-sxm5-80gb"}}
	}
	node := &provider{leases: map[string]*Lease{
		"L":      lease("L", market.LeaseRunning, market.RoleProvider),
		"ended":  lease("ended", market.LeaseClosed, market.RoleProvider),
		"bought": lease("bought", market.LeaseRunning, market.RoleBuyer),
	}}
	rejects := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rejects"}, []string{"kind", "reason"})
	m := New(Config{Host: h, Key: prov.key, Store: st, Now: time.Now, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Rejects: rejects, Node: node})

	var takes int64
	take := func(by party, ask string, qty uint32) []byte {
		takes++ // each take its own
		env, err := p2p.Seal(by.key, &proto.Take{Taker: []byte(by.id), Market: "nvidia-h100-sxm5-80gb", MakerOrderId: ask, Quantity: qty,
			PriceMicros: 2_600_000, Currency: "USD", LeaseType: proto.LeaseType_LEASE_TYPE_RESERVED, CreatedUnixMs: now.UnixMilli() + takes},
			proto.MaxBookMessageSize)
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	handover := func(signer party, lease string, takeEnv []byte) []byte {
		env, err := p2p.Seal(signer.key, &proto.Handover{LeaseId: lease, Holder: []byte(signer.id), Buyer: []byte(buyer.id), Take: takeEnv,
			AskId: "ask", CreatedUnixMs: now.UnixMilli()}, proto.MaxReceiptSize)
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	honest := handover(holder, "L", take(buyer, "ask", 2))
	var first []byte
	for _, c := range []struct {
		name   string
		from   peer.ID
		env    []byte
		refuse string // the reason label; "" for an accept
		same   bool   // the accept is the first one, byte for byte
	}{
		{"sent by a peer that did not sign it", stranger.id, honest, "not-holder", false},
		{"signed by a peer that does not hold the lease", stranger.id, handover(stranger, "L", take(buyer, "ask", 2)), "not-holder", false},
		{"of a lease this node does not have", holder.id, handover(holder, "nope", take(buyer, "ask", 2)), "unknown-lease", false},
		{"of a lease this node bought, not provides", holder.id, handover(holder, "bought", take(buyer, "ask", 2)), "unknown-lease", false},
		{"its take not signed by the new buyer", holder.id, handover(holder, "L", take(stranger, "ask", 2)), "bad-take", false},
		{"its take of another ask", holder.id, handover(holder, "L", take(buyer, "other", 2)), "bad-take", false},
		{"its take of one GPU of two", holder.id, handover(holder, "L", take(buyer, "ask", 1)), "wrong-gpus", false},
		{"of a lease that ended", holder.id, handover(holder, "ended", take(buyer, "ask", 2)), "ended", false},
		{"running, the honest handover", holder.id, honest, "", false},
		{"handed over, the same handover again", holder.id, honest, "", true},
		{"handed over, another handover of the lease", holder.id, handover(holder, "L", take(buyer, "ask", 2)), "already-resold", false},
	} {
		before := count(rejects, c.refuse)
		acc, err := m.TakeHandover(c.from, c.env)
		if c.refuse != "" {
			if err == nil || market.ResaleReason(err) != c.refuse {
				t.Errorf("%s: %v, want refused as %s", c.name, err, c.refuse)
			}
			if got := count(rejects, c.refuse); got != before+1 {
				t.Errorf("%s: rejects{handover,%s} %v → %v, want counted", c.name, c.refuse, before, got)
			}
			continue
		}
		if err != nil || len(acc) == 0 {
			t.Fatalf("%s: %v, want an accept", c.name, err)
		}
		if c.same && !bytes.Equal(acc, first) {
			t.Errorf("%s: a different accept", c.name)
		}
		if first == nil {
			first = acc
		}
	}
	a, signer, err := p2p.Open[*proto.Accept](first, proto.MaxBookMessageSize)
	if err != nil || signer != prov.id || string(a.Lease.GetBuyer()) != string(buyer.id) {
		t.Fatalf("accept %v by %s (%v), want the provider's of a lease to the new buyer", a, signer, err)
	}
	if len(node.started) != 1 || node.started[0] != a.Lease.Id {
		t.Errorf("new leases started %v, want %s once", node.started, a.Lease.Id)
	}
	if rep, err := st.HandoverOf("L"); err != nil || rep == nil || !bytes.Equal(rep.Accept, first) {
		t.Errorf("stored handover %v, %v; want the accept", rep, err)
	}
}
