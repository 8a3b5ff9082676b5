// Package credit is a provider's credit policy: the most any one buyer
// may owe it unpaid.
//
// A buyer's credit (market.Credit) is what it countersigned and was
// billed, plus the billing windows in progress, less what the provider
// acknowledged it paid (`settle ack`; a payment before any lease is a
// prepayment). A take whose first window would pass the limit is refused
// with the reason; a running lease whose next window no longer fits ends
// as unpaid at the end of the last window billed. The limit is earned: a
// buyer with no paid history gets the first credit, growing with what it
// paid, up to the credit limit (market.GrantedCredit), so a buyer that
// never pays gains nothing by making new keys. The rules are market's;
// this package feeds them from the store and the running leases.
//
// [Policy] owns the settings and a cache of each buyer's acknowledged
// payments (reading them from the store verifies every acknowledgement's
// signature, and the billing step asks several times a second). Its one
// lock guards the cache; it is a leaf, released before the leases are
// visited (Config.Leases), so a caller may hold the books or trade locks
// but none of the leases' own.
package credit

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// DefaultLimit is a provider's credit limit per buyer when no setting
// gives one: 10 units of the provider's currency.
const DefaultLimit = "10"

// DefaultNew is the credit a buyer with no paid history gets when no
// setting gives it: 1 unit of the limit's currency (never more than the
// limit).
const DefaultNew = "1"

// Settings are the policy as configured.
type Settings struct {
	// Limit is a decimal in Currency, or "none" for no limit ("":
	// DefaultLimit).
	Limit    string
	Currency string
	// New is a new buyer's credit, a decimal in Currency ("": DefaultNew).
	New string
}

// Payments reads the payment acknowledgements provider gave buyer, each
// a sealed proto.PaymentAck. *store.Store implements it.
type Payments interface {
	PaymentsBetween(provider, buyer peer.ID, fn func(seq uint64, env []byte) error) error
}

// Config is a Policy's dependencies.
type Config struct {
	Self     peer.ID // the provider
	Payments Payments
	// Leases calls add with every running lease this node provides to
	// buyer in currency, but the one with ID except, each under that
	// lease's own lock; it stops at add's first error.
	Leases func(buyer peer.ID, currency, except string, add func(*market.Lease) error) error
	// Reject counts a refusal by kind and reason (optional).
	Reject func(kind, reason string)
	Log    *slog.Logger
}

// Policy is a provider's credit limit. Its methods are safe for
// concurrent use.
type Policy struct {
	cfg   Config
	off   bool
	limit market.Money
	first int64 // a new buyer's credit, in the limit's currency

	mu      sync.Mutex
	byBuyer map[peer.ID]*market.Ledger // acknowledged payments, per buyer
}

// ParseLimit checks a credit limit setting: a decimal, or "none".
func ParseLimit(decimal, currency string) error {
	if decimal == "" {
		return fmt.Errorf("node: empty credit limit (want a decimal or none)")
	}
	if decimal == "none" {
		return nil
	}
	if currency == "" {
		currency = "USD"
	}
	if _, err := market.ParseMoney(decimal, currency); err != nil {
		return fmt.Errorf("node: credit limit: %w", err)
	}
	return nil
}

// ParseNew checks a new buyer's credit setting: a non-negative decimal.
func ParseNew(decimal string) error {
	if m, err := market.ParseMoney(decimal, "USD"); err != nil || m.Micros < 0 {
		return fmt.Errorf("node: first credit %q: want a non-negative decimal", decimal)
	}
	return nil
}

// New makes the policy s describes.
func New(s Settings, cfg Config) (*Policy, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	p := &Policy{cfg: cfg, byBuyer: map[peer.ID]*market.Ledger{}}
	lim := s.Limit
	if lim == "" {
		lim = DefaultLimit
	}
	if lim == "none" {
		p.off = true
		return p, nil
	}
	m, err := market.ParseMoney(lim, s.Currency)
	if err != nil {
		return nil, fmt.Errorf("node: credit limit %q: %w", lim, err)
	}
	if m.Micros < 0 {
		return nil, fmt.Errorf("node: negative credit limit %q", lim)
	}
	fs := s.New
	if fs == "" {
		fs = DefaultNew
	}
	first, err := market.ParseMoney(fs, m.Currency)
	if err != nil || first.Micros < 0 {
		return nil, fmt.Errorf("node: first credit %q: want a non-negative decimal", fs)
	}
	p.limit, p.first = m, first.Micros
	return p, nil
}

// Off reports whether there is no limit.
func (p *Policy) Off() bool { return p.off }

// Limit is the limit and its currency (zero when Off).
func (p *Policy) Limit() market.Money { return p.limit }

// First is a new buyer's credit in the limit's currency.
func (p *Policy) First() int64 { return p.first }

// LimitIn is the limit for leases in currency: none (0) in any other
// currency than the limit's.
func (p *Policy) LimitIn(currency string) int64 {
	if p.limit.Currency == currency {
		return p.limit.Micros
	}
	return 0
}

// Of is buyer's credit with this provider in currency at now: the
// payments it acknowledged (the ledger's) and every lease it provides to
// buyer but except (a lease ID, or ""). The caller holds none of the
// leases' locks.
func (p *Policy) Of(buyer peer.ID, currency string, now time.Time, except string) (market.Credit, error) {
	l, err := p.paymentsOf(buyer)
	if err != nil {
		return market.Credit{}, err
	}
	// No credit in another currency than the limit's: only prepayment.
	c := l.LedgerCredit(string(buyer), currency, 0)
	if currency == p.limit.Currency {
		c.Limit = market.GrantedCredit(p.first, p.limit.Micros, c.Paid)
	}
	err = p.cfg.Leases(buyer, currency, except, func(ml *market.Lease) error { return c.AddLease(ml, now) })
	if err != nil {
		return market.Credit{}, err
	}
	return c, nil
}

// paymentsOf is the ledger of the payments this provider acknowledged
// buyer, from the cache or the store.
func (p *Policy) paymentsOf(buyer peer.ID) (*market.Ledger, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l, ok := p.byBuyer[buyer]; ok {
		return l, nil
	}
	l := market.NewLedger([]byte(p.cfg.Self))
	err := p.cfg.Payments.PaymentsBetween(p.cfg.Self, buyer, func(_ uint64, v []byte) error {
		ack, _, err := p2p.Open[*proto.PaymentAck](v, proto.MaxReceiptSize)
		if err != nil {
			return err
		}
		_, err = l.AddPayment(ack)
		return err
	})
	if err != nil {
		return nil, err
	}
	if !p.off {
		p.byBuyer[buyer] = l
	}
	return l, nil
}

func (p *Policy) reject(kind string) {
	if p.cfg.Reject != nil {
		p.cfg.Reject(kind, "credit-limit")
	}
}

// Check refuses a lease on terms to its buyer when the lease's first
// billing window would pass the buyer's credit limit. It is counted, as
// every refusal is.
func (p *Policy) Check(terms *proto.Lease, now time.Time) error {
	if p.off {
		return nil
	}
	first, err := market.FirstWindow(terms)
	if err != nil {
		return err
	}
	c, err := p.Of(peer.ID(terms.Buyer), terms.Currency, now, "")
	if err != nil {
		return err
	}
	if err := c.Check(first); err != nil {
		p.reject("take")
		return err
	}
	return nil
}

// CheckBid is Check for the resting bid bidID of buyer this provider is
// about to take: count GPUs for d at price, billed every intervalS
// seconds.
func (p *Policy) CheckBid(bidID, buyer string, count uint32, price int64, currency string, d time.Duration, intervalS int64, now time.Time) error {
	b, err := peer.Decode(buyer)
	if err != nil {
		return err
	}
	terms := &proto.Lease{Id: bidID, Buyer: []byte(b), Gpus: make([]string, count), PriceMicros: price, Currency: currency,
		DurationS: int64(d / time.Second), BillingIntervalS: intervalS, StartUnixMs: now.UnixMilli()}
	return p.Check(terms, now)
}

// Others is, for the provider's billing step of the lease id, its buyer's
// credit without that lease; ok is false when there is no limit (or it
// could not be read: the step then bills as if there were none, and the
// policy says so).
func (p *Policy) Others(id string, buyer peer.ID, currency string, now time.Time) (c market.Credit, ok bool) {
	if p.off {
		return c, false
	}
	c, err := p.Of(buyer, currency, now, id)
	if err != nil {
		p.cfg.Log.Warn("credit check failed", "lease", id, "err", err)
		return c, false
	}
	return c, true
}

// Over reports whether the buyer of ml, a running lease, is past its
// credit limit at now, with others its credit without ml (Others), and
// the note to close the lease with; never when limited is false. The
// billing step then ends the lease as unpaid at the end of its last
// window billed: the next window no longer fits, and no receipt passes
// the limit. The caller holds the lease's lock.
func (p *Policy) Over(others market.Credit, limited bool, ml *market.Lease, now time.Time) (string, bool) {
	if !limited || ml.State != market.LeaseRunning {
		return "", false
	}
	c := others
	if err := c.AddLease(ml, now); err != nil || !c.Over() {
		return "", false
	}
	p.reject("lease")
	return strings.TrimPrefix(c.OverError().Error(), "market: "), true
}

// Views are buyer's credit in its leases' currencies and the limit's, at
// now.
func (p *Policy) Views(buyer peer.ID, currencies []string, now time.Time) []api.CreditView {
	if p.off {
		return nil
	}
	var out []api.CreditView
	seen := map[string]bool{}
	for _, cur := range append([]string{p.limit.Currency}, currencies...) {
		if seen[cur] {
			continue
		}
		seen[cur] = true
		c, err := p.Of(buyer, cur, now, "")
		if err != nil {
			continue
		}
		f := func(m int64) string { return market.FormatMicros(m, cur) }
		out = append(out, api.CreditView{Currency: cur, Limit: f(c.Limit), Unpaid: f(c.Unpaid()), Available: f(c.Available()), AvailableMicros: c.Available()})
	}
	return out
}

// Paid is told a payment of buyer was acknowledged: it forgets the
// buyer's cached payments, so the next reading counts it.
func (p *Policy) Paid(buyer peer.ID) {
	p.mu.Lock()
	delete(p.byBuyer, buyer)
	p.mu.Unlock()
}
