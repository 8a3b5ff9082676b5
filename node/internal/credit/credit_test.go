package credit

import (
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// world is a provider's payments and running leases, in memory, the
// acknowledgements sealed with its real key.
type world struct {
	t      *testing.T
	key    crypto.PrivKey
	self   peer.ID
	mu     sync.Mutex
	acks   map[peer.ID][][]byte
	leases []*market.Lease
	reads  int // PaymentsBetween calls
	kinds  []string
}

func newWorld(t *testing.T) *world {
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.IDFromPrivateKey(k)
	return &world{t: t, key: k, self: id, acks: map[peer.ID][][]byte{}}
}

func (w *world) PaymentsBetween(provider, buyer peer.ID, fn func(uint64, []byte) error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reads++
	if provider != w.self {
		w.t.Errorf("payments read for provider %s, want %s", provider, w.self)
	}
	for i, env := range w.acks[buyer] {
		if err := fn(uint64(i+1), env); err != nil {
			return err
		}
	}
	return nil
}

// pay acknowledges a payment of buyer.
func (w *world) pay(buyer peer.ID, micros int64, currency string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ack := &proto.PaymentAck{Provider: []byte(w.self), Buyer: []byte(buyer), AmountMicros: micros, Currency: currency,
		Seq: uint64(len(w.acks[buyer]) + 1), CreatedUnixMs: t0.UnixMilli()}
	env, err := p2p.Seal(w.key, ack, proto.MaxReceiptSize)
	if err != nil {
		w.t.Fatal(err)
	}
	w.acks[buyer] = append(w.acks[buyer], env)
}

func (w *world) leasesOf(buyer peer.ID, currency, except string, add func(*market.Lease) error) error {
	for _, l := range w.leases {
		if l.Terms.GetId() != except && peer.ID(l.Terms.Buyer) == buyer && l.Terms.Currency == currency {
			if err := add(l); err != nil {
				return err
			}
		}
	}
	return nil
}

func (w *world) policy(s Settings) *Policy {
	w.t.Helper()
	p, err := New(s, Config{Self: w.self, Payments: w, Leases: w.leasesOf,
		Reject: func(kind, reason string) { w.kinds = append(w.kinds, kind+"/"+reason) }})
	if err != nil {
		w.t.Fatal(err)
	}
	return p
}

func newBuyer(t *testing.T) peer.ID {
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.IDFromPrivateKey(k)
	return id
}

// terms are a lease of gpus GPUs at 2.40 USD an hour each, billed every
// minute: 40 000 micros a GPU per window.
func (w *world) terms(id string, buyer peer.ID, gpus int) *proto.Lease {
	names := make([]string, gpus)
	for i := range names {
		names[i] = fmt.Sprintf("GPU-%s-%d", id, i)
	}
	return &proto.Lease{Id: id, Provider: []byte(w.self), Buyer: []byte(buyer), Gpus: names, PriceMicros: 2_400_000, Currency: "USD",
		LeaseType: proto.LeaseType_LEASE_TYPE_SPOT, DurationS: 3600, BillingIntervalS: 60, StartUnixMs: t0.UnixMilli(),
		Market: "nvidia-h100-sxm5-80gb"}
}

// TestCreditGrowsWithPayments: a new buyer starts at the first credit;
// each acknowledged payment raises its limit by as much, up to the limit,
// once the policy is told (Paid) — until then the cached ledger stands.
func TestCreditGrowsWithPayments(t *testing.T) {
	w := newWorld(t)
	p := w.policy(Settings{Limit: "2", Currency: "USD", New: "0.5"})
	buyer := newBuyer(t)
	c, err := p.Of(buyer, "USD", t0, "")
	if err != nil || c.Limit != 500_000 || c.Paid != 0 {
		t.Fatalf("new buyer: Of = %+v, %v; want limit 500000, paid 0", c, err)
	}
	w.pay(buyer, 1_000_000, "USD")
	if c, _ := p.Of(buyer, "USD", t0, ""); c.Limit != 500_000 || w.reads != 1 {
		t.Errorf("before Paid: limit %d after %d store reads, want the cached 500000 after 1", c.Limit, w.reads)
	}
	p.Paid(buyer)
	if c, _ := p.Of(buyer, "USD", t0, ""); c.Limit != 1_500_000 || c.Paid != 1_000_000 || c.Available() != 2_500_000 {
		t.Errorf("after paying 1: %+v (available %d), want limit 1500000, paid 1000000, available 2500000", c, c.Available())
	}
	w.pay(buyer, 5_000_000, "USD")
	p.Paid(buyer)
	if c, _ := p.Of(buyer, "USD", t0, ""); c.Limit != 2_000_000 {
		t.Errorf("after paying 6 in all: limit %d, want the cap 2000000", c.Limit)
	}
	// Another buyer (a new key) starts over.
	if c, _ := p.Of(newBuyer(t), "USD", t0, ""); c.Limit != 500_000 {
		t.Errorf("a new key: limit %d, want 500000", c.Limit)
	}
	// No credit in another currency: only what was prepaid in it.
	w.pay(buyer, 30_000, "EUR")
	p.Paid(buyer)
	if c, _ := p.Of(buyer, "EUR", t0, ""); c.Limit != 0 || c.Paid != 30_000 {
		t.Errorf("EUR: %+v, want limit 0, paid 30000", c)
	}
}

// TestCheckRefusesPastLimit: a lease whose first window would pass the
// buyer's credit is refused and counted; the running leases of the buyer
// count against it; a payment lets the same lease through.
func TestCheckRefusesPastLimit(t *testing.T) {
	w := newWorld(t)
	p := w.policy(Settings{Limit: "1", Currency: "USD", New: "0.1"})
	buyer := newBuyer(t)
	if err := p.Check(w.terms("small", buyer, 2), t0); err != nil { // 80 000 of 100 000
		t.Fatalf("a first window within the credit: %v", err)
	}
	ml, err := market.NewLease(w.terms("running", buyer, 1))
	if err != nil {
		t.Fatal(err)
	}
	ml.Start(t0)
	w.leases = append(w.leases, ml) // 40 000 reserved for its window in progress
	err = p.Check(w.terms("second", buyer, 2), t0.Add(time.Second))
	if err == nil || !strings.Contains(err.Error(), "credit") {
		t.Fatalf("80 000 more with 40 000 in use of 100 000: %v, want a credit refusal", err)
	}
	if len(w.kinds) != 1 || w.kinds[0] != "take/credit-limit" {
		t.Errorf("refusals counted %v, want [take/credit-limit]", w.kinds)
	}
	if err := p.CheckBid("bid", buyer.String(), 1, 2_400_000, "USD", time.Hour, 60, t0.Add(time.Second)); err != nil {
		t.Errorf("one GPU (40 000 more) fits: %v", err)
	}
	w.pay(buyer, 100_000, "USD")
	p.Paid(buyer)
	if err := p.Check(w.terms("second", buyer, 2), t0.Add(time.Second)); err != nil {
		t.Errorf("after a payment of 100 000: %v", err)
	}
	if _, err := p.Of(buyer, "USD", t0, "running"); err != nil {
		t.Fatal(err)
	}
}

// TestOverEndsRunningLease: a running lease whose window no longer fits
// the buyer's credit beside its other leases is over, with a note, and
// counted; under the limit, or unlimited, it is not.
func TestOverEndsRunningLease(t *testing.T) {
	w := newWorld(t)
	p := w.policy(Settings{Limit: "0.1", Currency: "USD", New: "0.1"})
	buyer := newBuyer(t)
	var mls []*market.Lease
	for _, id := range []string{"a", "b", "c"} {
		ml, err := market.NewLease(w.terms(id, buyer, 1))
		if err != nil {
			t.Fatal(err)
		}
		ml.Start(t0)
		mls = append(mls, ml)
	}
	w.leases = mls[:2]
	others, limited := p.Others("b", buyer, "USD", t0)
	if !limited {
		t.Fatal("Others: not limited")
	}
	if note, over := p.Over(others, limited, mls[1], t0); over {
		t.Errorf("two windows of 40 000 within 100 000: over (%s)", note)
	}
	w.leases = mls
	others, _ = p.Others("c", buyer, "USD", t0)
	note, over := p.Over(others, true, mls[2], t0)
	if !over || !strings.Contains(note, "credit") || strings.HasPrefix(note, "market:") {
		t.Errorf("three windows of 40 000 past 100 000: over %v, note %q", over, note)
	}
	if len(w.kinds) != 1 || w.kinds[0] != "lease/credit-limit" {
		t.Errorf("refusals counted %v, want [lease/credit-limit]", w.kinds)
	}
	if _, over := p.Over(others, false, mls[2], t0); over {
		t.Error("unlimited: over")
	}
	off := w.policy(Settings{Limit: "none"})
	if _, limited := off.Others("c", buyer, "USD", t0); limited {
		t.Error("no limit: Others says limited")
	}
	if err := off.Check(w.terms("big", buyer, 100), t0); err != nil || off.Views(buyer, []string{"USD"}, t0) != nil {
		t.Errorf("no limit: Check = %v, views %v; want nil, none", err, off.Views(buyer, nil, t0))
	}
}

// TestNewSettings: defaults, "none", and the refusals of bad settings.
func TestNewSettings(t *testing.T) {
	p, err := New(Settings{Currency: "CNY"}, Config{})
	if err != nil || p.Off() || p.Limit() != (market.Money{Micros: 10_000_000, Currency: "CNY"}) || p.First() != 1_000_000 || p.LimitIn("USD") != 0 {
		t.Errorf("defaults: %+v, %v", p, err)
	}
	for _, bad := range []Settings{{Limit: "-1", Currency: "USD"}, {Limit: "x", Currency: "USD"}, {Limit: "1", Currency: "USD", New: "-1"}} {
		if _, err := New(bad, Config{}); err == nil {
			t.Errorf("New(%+v) = nil error", bad)
		}
	}
	if err := ParseLimit("", "USD"); err == nil || ParseLimit("none", "") != nil || ParseLimit("2.5", "") != nil {
		t.Error("ParseLimit: want empty refused, none and 2.5 accepted")
	}
	if ParseNew("-1") == nil || ParseNew("0") != nil || errors.Is(ParseNew("1"), market.ErrPayment) {
		t.Error("ParseNew: want -1 refused, 0 accepted")
	}
}
