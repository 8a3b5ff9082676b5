package market

import (
	"errors"
	gproto "google.golang.org/protobuf/proto"
	"reflect"
	"testing"
	"time"

	"github.com/suanli/suanli/proto"
)

const (
	ledgerSelf = "node-n"
	peerB      = "buyer-b"
	peerQ      = "provider-q"
)

// ledgerLeases are the node's leases with two peers: it provides l1, l2
// (USD) and l4 (CNY) to B, and buys l3 (USD) from Q.
func ledgerLeases() (l1, l2, l3, l4 *proto.Lease) {
	mk := func(id, provider, buyer, currency string, startMin int, gpus ...string) *proto.Lease {
		return withTerms(testTerms(), func(l *proto.Lease) {
			l.Id, l.Provider, l.Buyer, l.Currency, l.Gpus = id, []byte(provider), []byte(buyer), currency, gpus
			l.StartUnixMs = testLeaseStart.Add(time.Duration(startMin) * time.Minute).UnixMilli()
		})
	}
	return mk("l1", ledgerSelf, peerB, "USD", 0, "GPU-a", "GPU-b"),
		mk("l2", ledgerSelf, peerB, "USD", 60, "GPU-a"),
		mk("l3", peerQ, ledgerSelf, "USD", 30, "GPU-q"),
		mk("l4", ledgerSelf, peerB, "CNY", 0, "GPU-c")
}

func mustAddReceipts(t *testing.T, l *Ledger, terms *proto.Lease, chain []SignedReceiptDecoded) {
	t.Helper()
	for _, e := range chain {
		if _, err := l.AddReceipt(terms, e.Receipt, e.Hash, e.Countersign); err != nil {
			t.Fatalf("AddReceipt(%s seq %d) = %v", terms.Id, e.Receipt.Seq, err)
		}
	}
}

func ack(provider, buyer string, seq uint64, micros int64, currency string) *proto.PaymentAck {
	return &proto.PaymentAck{
		Provider: []byte(provider), Buyer: []byte(buyer), AmountMicros: micros, Currency: currency, Seq: seq,
		CreatedUnixMs: testLeaseStart.Add(time.Duration(seq) * time.Hour).UnixMilli(), Reference: "tx-" + string(rune('0'+seq)),
	}
}

func TestLedger(t *testing.T) {
	l1, l2, l3, l4 := ledgerLeases()
	c1, _ := testChain(l1, 3) // 2 GPUs, 30 minutes: 2.00
	c2, _ := testChain(l2, 2) // 1 GPU, 20 minutes: 0.666667
	c3, _ := testChain(l3, 6) // 1 GPU, 1 hour: 2.00
	c4, _ := testChain(l4, 1) // 1 GPU, 10 minutes: 0.333334
	led := NewLedger([]byte(ledgerSelf))
	// In any order: the ledger keeps the latest countersigned receipt.
	mustAddReceipts(t, led, l2, c2)
	mustAddReceipts(t, led, l1, []SignedReceiptDecoded{c1[2], c1[0], c1[1]})
	mustAddReceipts(t, led, l3, c3[:4])
	mustAddReceipts(t, led, l4, c4)
	mustAddReceipts(t, led, l3, c3[4:])
	for _, a := range []*proto.PaymentAck{
		ack(ledgerSelf, peerB, 1, 2_500_000, "USD"), // B paid the node
		ack(peerQ, ledgerSelf, 1, 1_500_000, "USD"), // the node paid Q
		ack(peerQ, ledgerSelf, 2, 700_000, "USD"),   // ... and overpaid
	} {
		if added, err := led.AddPayment(a); !added || err != nil {
			t.Fatalf("AddPayment(%v) = %v, %v", a, added, err)
		}
	}

	if got, want := led.Peers(), []string{peerB, peerQ}; !reflect.DeepEqual(got, want) {
		t.Errorf("Peers() = %q, want %q", got, want)
	}
	if got, want := led.Owed(peerB), []Money{{333_334, "CNY"}, {2_000_000 + 666_667 - 2_500_000, "USD"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("Owed(B) = %v, want %v", got, want)
	}
	if got, want := led.Owed(peerQ), []Money{{200_000, "USD"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("Owed(Q) = %v, want %v (a credit with Q)", got, want)
	}
	if got := led.Owed("stranger"); got != nil {
		t.Errorf("Owed(stranger) = %v, want nil", got)
	}

	at := func(min int) time.Time { return testLeaseStart.Add(time.Duration(min) * time.Minute) }
	wantB := Statement{
		Peer: peerB,
		Leases: []LeaseStatement{
			{LeaseID: "l1", Role: RoleProvider, Currency: "USD", Start: at(0), Receipts: 3, GPUMillis: 3_600_000, Countersigned: 2_000_000, Paid: 2_000_000},
			{LeaseID: "l4", Role: RoleProvider, Currency: "CNY", Start: at(0), Receipts: 1, GPUMillis: 600_000, Countersigned: 333_334, Owed: 333_334},
			{LeaseID: "l2", Role: RoleProvider, Currency: "USD", Start: at(60), Receipts: 2, GPUMillis: 1_200_000, Countersigned: 666_667, Paid: 500_000, Owed: 166_667},
		},
		Payments: []Payment{
			{Role: RoleProvider, Seq: 1, Amount: Money{2_500_000, "USD"}, Created: at(60), Reference: "tx-1"},
		},
		Totals: []Total{
			{Currency: "CNY", Receivable: 333_334, Owed: 333_334},
			{Currency: "USD", Receivable: 2_666_667, Received: 2_500_000, Owed: 166_667},
		},
	}
	if got := led.Statement(peerB); !reflect.DeepEqual(got, wantB) {
		t.Errorf("Statement(B) =\n%+v\nwant\n%+v", got, wantB)
	}
	wantQ := Statement{
		Peer: peerQ,
		Leases: []LeaseStatement{
			{LeaseID: "l3", Role: RoleBuyer, Currency: "USD", Start: at(30), Receipts: 6, GPUMillis: 3_600_000, Countersigned: 2_000_000, Paid: 2_000_000},
		},
		Payments: []Payment{
			{Role: RoleBuyer, Seq: 1, Amount: Money{1_500_000, "USD"}, Created: at(60), Reference: "tx-1"},
			{Role: RoleBuyer, Seq: 2, Amount: Money{700_000, "USD"}, Created: at(120), Reference: "tx-2"},
		},
		Totals: []Total{{Currency: "USD", Payable: 2_000_000, Paid: 2_200_000, Owed: 200_000}},
	}
	if got := led.Statement(peerQ); !reflect.DeepEqual(got, wantQ) {
		t.Errorf("Statement(Q) =\n%+v\nwant\n%+v", got, wantQ)
	}
	if got := led.Statement("stranger"); !reflect.DeepEqual(got, Statement{Peer: "stranger"}) {
		t.Errorf("Statement(stranger) = %+v", got)
	}

	// Idempotent: the same entries again change nothing.
	before := led.Statement(peerB)
	for _, e := range append(c1, c2...) {
		terms := l1
		if e.Receipt.LeaseId == "l2" {
			terms = l2
		}
		if added, err := led.AddReceipt(terms, e.Receipt, e.Hash, e.Countersign); added || err != nil {
			t.Errorf("AddReceipt(%s seq %d again) = %v, %v, want false, nil", terms.Id, e.Receipt.Seq, added, err)
		}
	}
	if added, err := led.AddPayment(ack(ledgerSelf, peerB, 1, 2_500_000, "USD")); added || err != nil {
		t.Errorf("AddPayment(again) = %v, %v, want false, nil", added, err)
	}
	if got := led.Statement(peerB); !reflect.DeepEqual(got, before) {
		t.Errorf("statement changed on replay: %+v", got)
	}
}

func TestLedgerRefusals(t *testing.T) {
	l1, _, _, _ := ledgerLeases()
	c1, _ := testChain(l1, 3)
	newLedger := func(t *testing.T) *Ledger {
		led := NewLedger([]byte(ledgerSelf))
		mustAddReceipts(t, led, l1, c1[:2])
		return led
	}
	twin := cloneReceipt(c1[1].Receipt)
	twin.Usage[0].EnergyMj++
	twinHash := hashOf(twin)
	lower := cloneReceipt(c1[2].Receipt)
	lower.CumulativeMicros = 1
	lowerHash := hashOf(lower)
	csFor := func(terms *proto.Lease, r *proto.Receipt, h []byte) *proto.Countersign {
		return &proto.Countersign{LeaseId: terms.Id, Seq: r.Seq, ReceiptHash: h, Buyer: terms.Buyer}
	}
	strangers := withTerms(testTerms(), func(l *proto.Lease) { l.Id = "l9" })
	cs9, _ := testChain(strangers, 1)
	repriced, _, _, _ := ledgerLeases()
	repriced.PriceMicros++

	receipts := []struct {
		name  string
		terms *proto.Lease
		r     *proto.Receipt
		h     []byte
		c     *proto.Countersign
		err   error
	}{
		{"not countersigned", l1, c1[2].Receipt, c1[2].Hash, nil, ErrCountersign},
		{"countersigned for another receipt", l1, c1[2].Receipt, c1[2].Hash, c1[1].Countersign, ErrCountersign},
		{"equivocation", l1, twin, twinHash, csFor(l1, twin, twinHash), ErrEquivocation},
		{"less owed at a later seq", l1, lower, lowerHash, csFor(l1, lower, lowerHash), ErrLedgerConflict},
		{"same lease, other terms", repriced, c1[2].Receipt, c1[2].Hash, c1[2].Countersign, ErrLedgerConflict},
		{"not the node's lease", strangers, cs9[0].Receipt, cs9[0].Hash, cs9[0].Countersign, ErrLedgerParty},
		{"receipt from another provider", l1, otherProvider(c1[2].Receipt), c1[2].Hash, c1[2].Countersign, ErrReceiptLease},
	}
	for _, tt := range receipts {
		t.Run(tt.name, func(t *testing.T) {
			led := newLedger(t)
			before := led.Statement(peerB)
			added, err := led.AddReceipt(tt.terms, tt.r, tt.h, tt.c)
			if added || !errors.Is(err, tt.err) {
				t.Fatalf("AddReceipt = %v, %v, want %v", added, err, tt.err)
			}
			if got := led.Statement(peerB); !reflect.DeepEqual(got, before) {
				t.Errorf("refused receipt changed the statement: %+v", got)
			}
			if got := led.Peers(); len(got) != 1 {
				t.Errorf("Peers() = %q after a refusal", got)
			}
		})
	}

	payments := []struct {
		name string
		ack  *proto.PaymentAck
		err  error
	}{
		{"missing", nil, ErrPayment},
		{"zero", ack(ledgerSelf, peerB, 2, 0, "USD"), ErrPayment},
		{"negative", ack(ledgerSelf, peerB, 2, -5, "USD"), ErrPayment},
		{"too large", ack(ledgerSelf, peerB, 2, MaxLedgerMicros+1, "USD"), ErrPayment},
		{"seq 0", ack(ledgerSelf, peerB, 0, 5, "USD"), ErrPayment},
		{"unknown currency", ack(ledgerSelf, peerB, 2, 5, "XXX"), ErrUnknownCurrency},
		{"to itself", ack(ledgerSelf, ledgerSelf, 2, 5, "USD"), ErrPayment},
		{"between strangers", ack(peerQ, peerB, 2, 5, "USD"), ErrLedgerParty},
		{"another payment under a recorded seq", ack(ledgerSelf, peerB, 1, 6, "USD"), ErrLedgerConflict},
		{"overflow", ack(ledgerSelf, peerB, 2, MaxLedgerMicros, "USD"), ErrLedgerOverflow},
	}
	for _, tt := range payments {
		t.Run(tt.name, func(t *testing.T) {
			led := newLedger(t)
			if _, err := led.AddPayment(ack(ledgerSelf, peerB, 1, 5, "USD")); err != nil {
				t.Fatal(err)
			}
			before := led.Statement(peerB)
			added, err := led.AddPayment(tt.ack)
			if added || !errors.Is(err, tt.err) {
				t.Fatalf("AddPayment = %v, %v, want %v", added, err, tt.err)
			}
			if got := led.Statement(peerB); !reflect.DeepEqual(got, before) {
				t.Errorf("refused payment changed the statement: %+v", got)
			}
		})
	}

	t.Run("stale receipt", func(t *testing.T) {
		led := newLedger(t)
		mustAddReceipts(t, led, l1, c1[2:])
		if added, err := led.AddReceipt(l1, c1[0].Receipt, c1[0].Hash, c1[0].Countersign); added || err != nil {
			t.Errorf("AddReceipt(seq 1 after 3) = %v, %v, want false, nil", added, err)
		}
		if got := led.Statement(peerB).Leases[0]; got.Receipts != 3 || got.Countersigned != 2_000_000 {
			t.Errorf("lease = %+v, want 3 receipts, 2000000", got)
		}
	})
}

// otherProvider is r claiming another provider.
func otherProvider(r *proto.Receipt) *proto.Receipt {
	r = cloneReceipt(r)
	r.Provider = []byte(peerQ)
	return r
}

func TestRoleText(t *testing.T) {
	for r, want := range map[Role]string{RoleProvider: "provider", RoleBuyer: "buyer"} {
		if b, err := r.MarshalText(); err != nil || string(b) != want {
			t.Errorf("Role(%d).MarshalText() = %s, %v, want %s", r, b, err, want)
		}
	}
	if _, err := Role(0).MarshalText(); err == nil {
		t.Error("Role(0).MarshalText succeeded")
	}
}

func BenchmarkLedgerAddReceipt(b *testing.B) {
	l1, _, _, _ := ledgerLeases()
	l1.DurationS = 7 * 24 * 3600
	chain, _ := testChain(l1, 1000)
	b.ReportAllocs()
	for b.Loop() {
		led := NewLedger([]byte(ledgerSelf))
		for _, e := range chain {
			if _, err := led.AddReceipt(l1, e.Receipt, e.Hash, e.Countersign); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// TestLedgerPremium: a resale's countersigned premium is owed to the
// holder by the new buyer (a discount the other way), once, in the pair's
// account and statement; a countersignature of another premium, or a
// premium this node is no party to, is refused.
func TestLedgerPremium(t *testing.T) {
	holder, buyer, other := []byte("holder-h"), []byte("buyer-b"), []byte("other-o")
	p := &proto.Premium{LeaseId: "L", NewLeaseId: "L2", Holder: holder, Buyer: buyer, Provider: other, Gpus: 2,
		FromUnixMs: 1_000, EndUnixMs: 3_601_000, LeasePriceMicros: 2_000_000, ResalePriceMicros: 2_600_000, Currency: "USD", PremiumMicros: 1_200_000}
	hash := []byte("premium-hash")
	cs := &proto.PremiumCountersign{LeaseId: "L", PremiumHash: hash, Buyer: buyer}
	for _, c := range []struct {
		name      string
		self      []byte
		premium   int64
		role      Role
		owedToMe  int64
		wantError bool
	}{
		{"holder is owed a premium", holder, 1_200_000, RoleProvider, 1_200_000, false},
		{"buyer owes it", buyer, 1_200_000, RoleBuyer, -1_200_000, false},
		{"a discount: the holder owes the buyer", holder, -300_000, RoleBuyer, -300_000, false},
		{"a discount: the buyer is owed", buyer, -300_000, RoleProvider, 300_000, false},
		{"no party", other, 1_200_000, 0, 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := NewLedger(c.self)
			pp := gproto.Clone(p).(*proto.Premium)
			pp.PremiumMicros = c.premium
			added, err := l.AddPremium(pp, hash, cs)
			if c.wantError {
				if err == nil {
					t.Fatal("AddPremium = nil, want refused")
				}
				return
			}
			if err != nil || !added {
				t.Fatalf("AddPremium = %v, %v", added, err)
			}
			if again, err := l.AddPremium(pp, hash, cs); again || err != nil {
				t.Errorf("the same premium again = %v, %v; want nothing added", again, err)
			}
			peer := string(buyer)
			if string(c.self) == string(buyer) {
				peer = string(holder)
			}
			owed := l.Owed(peer)
			if len(owed) != 1 || owed[0].Micros != c.owedToMe {
				t.Errorf("owed %v, want %d", owed, c.owedToMe)
			}
			st := l.Statement(peer)
			if len(st.Leases) != 1 || !st.Leases[0].Premium || st.Leases[0].Role != c.role || st.Leases[0].LeaseID != "L2" {
				t.Errorf("statement %+v, want the premium on L2 as %v", st.Leases, c.role)
			}
		})
	}
	l := NewLedger(holder)
	if _, err := l.AddPremium(p, []byte("another hash"), cs); err == nil {
		t.Error("a countersignature of another premium was taken")
	}
}
