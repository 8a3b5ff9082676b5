package market

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/suanli/suanli/proto"
)

// MaxLedgerMicros bounds every total a Ledger keeps per counterparty and
// currency (about 2.3 × 10¹² units), so no sum or difference of totals can
// overflow.
const MaxLedgerMicros = 1 << 61

// MaxPaymentReferenceLen bounds a payment acknowledgement's reference.
const MaxPaymentReferenceLen = 128

// Reasons a Ledger refuses an entry. Each is returned wrapped with detail.
var (
	// ErrLedgerParty is returned when a receipt's lease or a payment is not
	// between the ledger's own node and another peer.
	ErrLedgerParty = errors.New("market: ledger entry does not involve this node")
	// ErrLedgerConflict is returned when an entry contradicts one recorded:
	// other terms for a known lease, a later receipt with a smaller
	// cumulative amount, or another payment under a recorded seq.
	ErrLedgerConflict = errors.New("market: ledger entry conflicts with one recorded")
	// ErrLedgerOverflow is returned when an entry would take a total past
	// MaxLedgerMicros.
	ErrLedgerOverflow = errors.New("market: ledger total out of range")
	// ErrPayment is returned when a payment acknowledgement is malformed.
	ErrPayment = errors.New("market: payment acknowledgement invalid")
)

// Role is the ledger's own node's side of a lease or payment.
type Role uint8

// Roles. The zero Role is invalid.
const (
	// RoleProvider: the node sold the GPU time; the peer owes it, and pays
	// it.
	RoleProvider Role = 1 + iota
	// RoleBuyer: the node bought the GPU time; it owes the peer, and pays
	// it.
	RoleBuyer
)

// String returns "provider" or "buyer".
func (r Role) String() string {
	switch r {
	case RoleProvider:
		return "provider"
	case RoleBuyer:
		return "buyer"
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// MarshalText implements encoding.TextMarshaler.
func (r Role) MarshalText() ([]byte, error) {
	if r != RoleProvider && r != RoleBuyer {
		return nil, fmt.Errorf("market: role %d", uint8(r))
	}
	return []byte(r.String()), nil
}

// Ledger is one node's settlement with every peer it traded with, built from
// countersigned receipts and acknowledged payments. What the buyer owes for
// a lease is its last countersigned cumulative amount; payments are per
// counterparty and currency, and a statement applies them to that peer's
// leases oldest first.
//
// Peers are named by their raw peer ID bytes as a string — string(peer.ID),
// as the wire messages carry them. Every listing is in a deterministic
// order. A Ledger is not safe for concurrent use.
type Ledger struct {
	self     string
	leases   map[string]*ledgerLease // by lease ID
	accounts map[string]*account     // by peer
}

type account struct {
	leases   []*ledgerLease
	payments map[paymentKey]*Payment
	totals   map[string]*Total // by currency
}

type paymentKey struct {
	role Role
	seq  uint64
}

type ledgerLease struct {
	id, provider, buyer, currency string
	premium                       bool // a resale's premium, not a lease's receipts
	price, startMs                int64
	peer                          string
	role                          Role

	seq        uint64 // last countersigned receipt
	hash       []byte
	gpuMillis  uint64
	cumulative int64
}

// NewLedger returns an empty ledger of the node whose raw peer ID is self.
func NewLedger(self []byte) *Ledger {
	return &Ledger{self: string(self), leases: map[string]*ledgerLease{}, accounts: map[string]*account{}}
}

func (l *Ledger) account(peer string) *account {
	a := l.accounts[peer]
	if a == nil {
		a = &account{payments: map[paymentKey]*Payment{}, totals: map[string]*Total{}}
		l.accounts[peer] = a
	}
	return a
}

// AddReceipt records the receipt r, whose envelope hashes to receiptHash,
// as countersigned by c, under the lease terms. The caller has verified r
// in its chain (VerifyNext or VerifyChain); AddReceipt checks c against r
// (VerifyCountersign) and that the node is the lease's provider or buyer.
//
// It is idempotent by lease and seq: a receipt at or before the lease's
// last recorded one changes nothing (added is false), and only a later one
// moves what the lease owes to its cumulative amount. The same seq with
// another hash is an *Evidence (ErrEquivocation).
func (l *Ledger) AddReceipt(terms *proto.Lease, r *proto.Receipt, receiptHash []byte, c *proto.Countersign) (added bool, err error) {
	if err := VerifyCountersign(terms, r, receiptHash, c); err != nil {
		return false, err
	}
	if !bytes.Equal(r.Provider, terms.Provider) {
		return false, fmt.Errorf("%w: receipt from a peer other than the lease's provider", ErrReceiptLease)
	}
	if r.Seq == 0 {
		return false, fmt.Errorf("%w: seq 0; receipts count from 1", ErrReceiptSeq)
	}
	if r.CumulativeMicros < 0 {
		return false, fmt.Errorf("%w: cumulative %d micros", ErrReceiptCumulative, r.CumulativeMicros)
	}
	ll := l.leases[terms.Id]
	if ll == nil {
		if ll, err = l.newLease(terms); err != nil {
			return false, err
		}
	} else if ll.provider != string(terms.Provider) || ll.buyer != string(terms.Buyer) ||
		ll.currency != terms.Currency || ll.price != terms.PriceMicros || ll.startMs != terms.StartUnixMs {
		return false, fmt.Errorf("%w: lease %q recorded with other terms", ErrLedgerConflict, terms.Id)
	}
	switch {
	case r.Seq == ll.seq && !bytes.Equal(receiptHash, ll.hash):
		return false, newEvidence(ll.id, r.Seq, r.Provider, receiptHash, ll.hash)
	case r.Seq <= ll.seq:
		return false, nil
	case r.CumulativeMicros < ll.cumulative:
		return false, fmt.Errorf("%w: lease %q seq %d owes %d micros, less than seq %d's %d", ErrLedgerConflict, ll.id, r.Seq, r.CumulativeMicros, ll.seq, ll.cumulative)
	}
	if err := l.add(ll.peer, ll.currency, ll.role, false, r.CumulativeMicros-ll.cumulative); err != nil {
		return false, err
	}
	a := l.accounts[ll.peer]
	if ll.seq == 0 {
		l.leases[ll.id] = ll
		a.leases = append(a.leases, ll)
	}
	ll.seq, ll.hash, ll.gpuMillis, ll.cumulative = r.Seq, append(ll.hash[:0], receiptHash...), r.CumulativeGpuMs, r.CumulativeMicros
	return true, nil
}

// newLease is the ledger's record of a lease first seen, not yet kept.
func (l *Ledger) newLease(terms *proto.Lease) (*ledgerLease, error) {
	if err := ValidateTerms(terms); err != nil {
		return nil, err
	}
	ll := &ledgerLease{
		id: terms.Id, provider: string(terms.Provider), buyer: string(terms.Buyer),
		currency: terms.Currency, price: terms.PriceMicros, startMs: terms.StartUnixMs,
	}
	switch l.self {
	case ll.provider:
		ll.peer, ll.role = ll.buyer, RoleProvider
	case ll.buyer:
		ll.peer, ll.role = ll.provider, RoleBuyer
	default:
		return nil, fmt.Errorf("%w: lease %q", ErrLedgerParty, terms.Id)
	}
	return ll, nil
}

// AddPremium records a resale's premium, p, whose sealed envelope hashes
// to premiumHash, as countersigned by its new buyer in c: what the new
// buyer owes the holder that resold it the lease (or, for a resale below
// the lease's price, what the holder owes the buyer). It is settled
// between the two as a lease's receipts are, by payment
// acknowledgements, and shows in the statement as an entry of its own
// (LeaseStatement.Premium). The caller has checked the envelopes' signers
// (the holder's premium, the buyer's countersignature). Idempotent by
// the new lease.
func (l *Ledger) AddPremium(p *proto.Premium, premiumHash []byte, c *proto.PremiumCountersign) (added bool, err error) {
	switch {
	case p == nil || c == nil:
		return false, fmt.Errorf("%w: premium or countersignature missing", ErrLedgerConflict)
	case c.LeaseId != p.LeaseId || !bytes.Equal(c.PremiumHash, premiumHash) || !bytes.Equal(c.Buyer, p.Buyer):
		return false, fmt.Errorf("%w: countersignature of another premium", ErrLedgerConflict)
	case len(p.Holder) == 0 || len(p.Buyer) == 0 || bytes.Equal(p.Holder, p.Buyer) || p.NewLeaseId == "":
		return false, fmt.Errorf("%w: premium parties", ErrLedgerConflict)
	case p.PremiumMicros < -MaxLedgerMicros || p.PremiumMicros > MaxLedgerMicros:
		return false, fmt.Errorf("%w: premium of %d micros", ErrLedgerOverflow, p.PremiumMicros)
	}
	if _, err := LookupCurrency(p.Currency); err != nil {
		return false, fmt.Errorf("%w: %v", ErrLedgerConflict, err)
	}
	key := "premium/" + p.NewLeaseId
	if ll := l.leases[key]; ll != nil {
		return false, nil
	}
	// Who is owed: the holder for a premium, the buyer for a discount.
	payee, payer, amount := string(p.Holder), string(p.Buyer), p.PremiumMicros
	if amount < 0 {
		payee, payer, amount = payer, payee, -amount
	}
	ll := &ledgerLease{id: p.NewLeaseId, provider: payee, buyer: payer, currency: p.Currency, startMs: p.FromUnixMs, premium: true}
	switch l.self {
	case payee:
		ll.peer, ll.role = payer, RoleProvider
	case payer:
		ll.peer, ll.role = payee, RoleBuyer
	default:
		return false, fmt.Errorf("%w: premium of lease %q", ErrLedgerParty, p.NewLeaseId)
	}
	if amount > 0 {
		if err := l.add(ll.peer, ll.currency, ll.role, false, amount); err != nil {
			return false, err
		}
	}
	ll.seq, ll.cumulative = 1, amount
	l.leases[key] = ll
	l.account(ll.peer).leases = append(l.account(ll.peer).leases, ll)
	return true, nil
}

// AddPayment records the provider's acknowledgement that the buyer paid it.
// It is idempotent by provider, buyer and seq: the same acknowledgement
// again changes nothing (added is false); a different one under a recorded
// seq is ErrLedgerConflict.
func (l *Ledger) AddPayment(ack *proto.PaymentAck) (added bool, err error) {
	switch {
	case ack == nil:
		return false, fmt.Errorf("%w: missing", ErrPayment)
	case len(ack.Provider) == 0 || len(ack.Buyer) == 0 || bytes.Equal(ack.Provider, ack.Buyer):
		return false, fmt.Errorf("%w: provider and buyer must be two peers", ErrPayment)
	case ack.AmountMicros <= 0 || ack.AmountMicros > MaxLedgerMicros:
		return false, fmt.Errorf("%w: amount %d micros", ErrPayment, ack.AmountMicros)
	case ack.Seq == 0:
		return false, fmt.Errorf("%w: seq 0; acknowledgements count from 1", ErrPayment)
	case len(ack.Reference) > MaxPaymentReferenceLen:
		return false, fmt.Errorf("%w: reference longer than %d bytes", ErrPayment, MaxPaymentReferenceLen)
	}
	if _, err := LookupCurrency(ack.Currency); err != nil {
		return false, fmt.Errorf("%w: %w", ErrPayment, err)
	}
	var peer string
	var role Role
	switch l.self {
	case string(ack.Provider):
		peer, role = string(ack.Buyer), RoleProvider
	case string(ack.Buyer):
		peer, role = string(ack.Provider), RoleBuyer
	default:
		return false, fmt.Errorf("%w: payment %d", ErrLedgerParty, ack.Seq)
	}
	p := &Payment{
		Role: role, Seq: ack.Seq,
		Amount:    Money{Micros: ack.AmountMicros, Currency: ack.Currency},
		Created:   time.UnixMilli(ack.CreatedUnixMs).UTC(),
		Reference: ack.Reference,
	}
	key := paymentKey{role, ack.Seq}
	if a := l.accounts[peer]; a != nil {
		if old := a.payments[key]; old != nil {
			if old.Amount != p.Amount || !old.Created.Equal(p.Created) || old.Reference != p.Reference {
				return false, fmt.Errorf("%w: another payment %d recorded", ErrLedgerConflict, ack.Seq)
			}
			return false, nil
		}
	}
	if err := l.add(peer, ack.Currency, role, true, ack.AmountMicros); err != nil {
		return false, err
	}
	l.accounts[peer].payments[key] = p
	return true, nil
}

// add adds delta (≥ 0) to one of the totals with peer in currency: the
// charges (paid false) or payments (paid true) in the role's direction. It
// changes nothing and returns ErrLedgerOverflow when the total would pass
// MaxLedgerMicros.
func (l *Ledger) add(peer, currency string, role Role, paid bool, delta int64) error {
	var t *Total
	if a := l.accounts[peer]; a != nil {
		t = a.totals[currency]
	}
	if t == nil {
		t = &Total{Currency: currency}
	}
	var field *int64
	switch {
	case role == RoleProvider && !paid:
		field = &t.Receivable
	case role == RoleProvider:
		field = &t.Received
	case !paid:
		field = &t.Payable
	default:
		field = &t.Paid
	}
	if *field > MaxLedgerMicros-delta {
		return fmt.Errorf("%w: %s totals with %s", ErrLedgerOverflow, currency, shortPeer(peer))
	}
	*field += delta
	l.account(peer).totals[currency] = t
	return nil
}

// Peers lists every peer the ledger holds entries with, in byte order.
func (l *Ledger) Peers() []string {
	peers := make([]string, 0, len(l.accounts))
	for p := range l.accounts {
		peers = append(peers, p)
	}
	slices.Sort(peers)
	return peers
}

// Owed is what peer owes the node, net, per currency in code order: what it
// countersigned for leases the node provided less what it paid, minus what
// the node countersigned for leases the peer provided less what the node
// paid. Negative: the node owes the peer. Currencies that net to zero are
// left out.
func (l *Ledger) Owed(peer string) []Money {
	var owed []Money
	for _, t := range l.totals(peer) {
		if t.Owed != 0 {
			owed = append(owed, Money{Micros: t.Owed, Currency: t.Currency})
		}
	}
	return owed
}

func (l *Ledger) totals(peer string) []Total {
	a := l.accounts[peer]
	if a == nil {
		return nil
	}
	totals := make([]Total, 0, len(a.totals))
	for _, t := range a.totals {
		t := *t
		t.Owed = (t.Receivable - t.Received) - (t.Payable - t.Paid)
		totals = append(totals, t)
	}
	slices.SortFunc(totals, func(x, y Total) int { return cmp.Compare(x.Currency, y.Currency) })
	return totals
}

// Total is the node's settlement with one peer in one currency. Charges are
// countersigned cumulative amounts.
type Total struct {
	Currency   string
	Receivable int64 // charged to the peer, for leases the node provided
	Received   int64 // paid by the peer to the node
	Payable    int64 // charged to the node, for leases the peer provided
	Paid       int64 // paid by the node to the peer
	// Owed is (Receivable − Received) − (Payable − Paid): what the peer
	// owes the node; negative when the node owes the peer.
	Owed int64
}

// Payment is an acknowledged payment in a statement.
type Payment struct {
	// Role is the node's: RoleProvider when the peer paid the node,
	// RoleBuyer when the node paid the peer.
	Role      Role
	Seq       uint64
	Amount    Money
	Created   time.Time
	Reference string
}

// LeaseStatement is one lease in a statement.
type LeaseStatement struct {
	LeaseID  string
	Role     Role // the node's side of the lease
	Currency string
	Start    time.Time
	// Receipts is the seq of the last countersigned receipt.
	Receipts uint64
	// GPUMillis is the GPU time it billed, cumulative.
	GPUMillis uint64
	// Countersigned is its cumulative amount: what the lease costs so far.
	Countersigned int64
	// Premium marks a resale's premium rather than a lease: LeaseID is
	// the lease the buyer bought by resale, Role the node's side of the
	// premium (provider: the node is owed it), Countersigned its amount.
	Premium bool
	// Paid is the part of the payments in the lease's direction and
	// currency applied to it, oldest lease first; Owed is the rest.
	Paid, Owed int64
}

// Statement is the node's settlement with one peer.
type Statement struct {
	Peer string
	// Leases in start order, then by ID.
	Leases []LeaseStatement
	// Payments in creation order, then by role and seq.
	Payments []Payment
	// Totals per currency, in code order. Payments beyond the leases
	// they could apply to are a credit: they show in Totals only.
	Totals []Total
}

// Statement lists the node's leases with peer, their payments and totals.
func (l *Ledger) Statement(peer string) Statement {
	s := Statement{Peer: peer, Totals: l.totals(peer)}
	a := l.accounts[peer]
	if a == nil {
		return s
	}
	for _, p := range a.payments {
		s.Payments = append(s.Payments, *p)
	}
	slices.SortFunc(s.Payments, func(x, y Payment) int {
		return cmp.Or(x.Created.Compare(y.Created), cmp.Compare(x.Role, y.Role), cmp.Compare(x.Seq, y.Seq))
	})
	type pool struct {
		role     Role
		currency string
	}
	pools := map[pool]int64{}
	for _, t := range s.Totals {
		pools[pool{RoleProvider, t.Currency}] = t.Received
		pools[pool{RoleBuyer, t.Currency}] = t.Paid
	}
	leases := slices.Clone(a.leases)
	slices.SortFunc(leases, func(x, y *ledgerLease) int {
		return cmp.Or(cmp.Compare(x.startMs, y.startMs), cmp.Compare(x.id, y.id))
	})
	for _, ll := range leases {
		k := pool{ll.role, ll.currency}
		paid := min(pools[k], ll.cumulative)
		pools[k] -= paid
		s.Leases = append(s.Leases, LeaseStatement{
			LeaseID: ll.id, Role: ll.role, Currency: ll.currency,
			Start:    time.UnixMilli(ll.startMs).UTC(),
			Receipts: ll.seq, GPUMillis: ll.gpuMillis,
			Countersigned: ll.cumulative, Paid: paid, Owed: ll.cumulative - paid, Premium: ll.premium,
		})
	}
	return s
}

// shortPeer is a printable prefix of a raw peer ID, for messages.
func shortPeer(p string) string {
	if len(p) > 8 {
		p = p[len(p)-8:]
	}
	return fmt.Sprintf("peer …%x", p)
}
