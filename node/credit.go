package node

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// Credit limits. A provider bounds what any one buyer may owe it unpaid
// (market.Credit): what the buyer countersigned and was billed, plus the
// billing windows in progress, less what the provider acknowledged it paid
// (`settle ack`; a payment before any lease is a prepayment). A take whose
// first window would pass the limit is rejected with the reason; a running
// lease whose next window no longer fits ends as unpaid at the end of the
// last window billed. The limit is earned: a buyer with no paid history
// gets the first credit (WithCreditNew), growing with what it paid, up to
// the credit limit (market.GrantedCredit), so a buyer that never pays
// gains nothing by making new keys. The rules are market's; this file
// feeds them.

// DefaultCreditLimit is a provider's credit limit per buyer when neither
// an option nor config.json sets one: 10 units of the provider's currency.
const DefaultCreditLimit = "10"

// DefaultCreditNew is the credit a buyer with no paid history gets when
// neither an option nor config.json sets it: 1 unit of the limit's
// currency (never more than the limit).
const DefaultCreditNew = "1"

// WithCreditNew sets the credit a buyer with no paid history starts with,
// a decimal in the credit limit's currency; each payment the provider
// acknowledges raises it by as much, up to the credit limit.
func WithCreditNew(decimal string) Option {
	return func(o *options) error {
		if m, err := market.ParseMoney(decimal, "USD"); err != nil || m.Micros < 0 {
			return fmt.Errorf("node: first credit %q: want a non-negative decimal", decimal)
		}
		o.creditNew = decimal
		return nil
	}
}

// WithCreditLimit sets the most a buyer may owe this provider unpaid: a
// decimal in currency (empty: the node's price currency), or "none" for no
// limit. Leases in any other currency get no credit: only what the buyer
// prepaid in it.
func WithCreditLimit(decimal, currency string) Option {
	return func(o *options) error {
		if decimal == "" {
			return fmt.Errorf("node: empty credit limit (want a decimal or none)")
		}
		if decimal != "none" {
			if _, err := market.ParseMoney(decimal, cmpOr(currency, "USD")); err != nil {
				return fmt.Errorf("node: credit limit: %w", err)
			}
		}
		o.creditLimit, o.creditCurrency = decimal, currency
		return nil
	}
}

// creditPolicy is the provider's credit limit.
type creditPolicy struct {
	off   bool
	limit market.Money
	first int64 // a new buyer's credit, in the limit's currency
	paid  *paidCache
}

// paidCache holds, per buyer, the ledger of the payments this provider
// acknowledged it: the billing step asks for it several times a second,
// and reading it from the store verifies every acknowledgement's
// signature. AckPayment drops a buyer's entry (creditFreed).
type paidCache struct {
	mu      sync.Mutex
	byBuyer map[peer.ID]*market.Ledger
}

func newCreditPolicy(o options, cfg Config, priceCurrency string) (creditPolicy, error) {
	s := cmpOr(o.creditLimit, cfg.CreditLimit, DefaultCreditLimit)
	if s == "none" {
		return creditPolicy{off: true, paid: &paidCache{}}, nil
	}
	m, err := market.ParseMoney(s, cmpOr(o.creditCurrency, priceCurrency))
	if err != nil {
		return creditPolicy{}, fmt.Errorf("node: credit limit %q: %w", s, err)
	}
	if m.Micros < 0 {
		return creditPolicy{}, fmt.Errorf("node: negative credit limit %q", s)
	}
	fs := cmpOr(o.creditNew, cfg.CreditNew, DefaultCreditNew)
	first, err := market.ParseMoney(fs, m.Currency)
	if err != nil || first.Micros < 0 {
		return creditPolicy{}, fmt.Errorf("node: first credit %q: want a non-negative decimal", fs)
	}
	return creditPolicy{limit: m, first: first.Micros, paid: &paidCache{byBuyer: map[peer.ID]*market.Ledger{}}}, nil
}

// limitIn is the limit for leases in currency.
func (p creditPolicy) limitIn(currency string) int64 {
	if p.limit.Currency == currency {
		return p.limit.Micros
	}
	return 0
}

// creditOf is buyer's credit with this provider in currency at now: the
// payments it acknowledged (the ledger's) and every lease it provided to
// buyer but except, from memory. It locks each of those leases in turn:
// the caller holds none of them.
func (n *Node) creditOf(buyer peer.ID, currency string, now time.Time, except *leaseRun) (market.Credit, error) {
	l, err := n.paymentsOf(buyer)
	if err != nil {
		return market.Credit{}, err
	}
	// No credit in another currency than the limit's: only prepayment.
	c := l.LedgerCredit(string(buyer), currency, 0)
	if currency == n.credit.limit.Currency {
		c.Limit = market.GrantedCredit(n.credit.first, n.credit.limit.Micros, c.Paid)
	}
	n.leases.mu.Lock()
	runs := make([]*leaseRun, 0, len(n.leases.runs))
	for _, r := range n.leases.runs {
		if r != except && r.rec.Role == market.RoleProvider && r.peer == buyer && r.terms.Currency == currency {
			runs = append(runs, r)
		}
	}
	n.leases.mu.Unlock()
	for _, r := range runs {
		r.mu.Lock()
		err := c.AddLease(r.ml, now)
		r.mu.Unlock()
		if err != nil {
			return market.Credit{}, err
		}
	}
	return c, nil
}

// paymentsOf is the ledger of the payments this provider acknowledged
// buyer, from the cache or the store.
func (n *Node) paymentsOf(buyer peer.ID) (*market.Ledger, error) {
	pc := n.credit.paid
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if l, ok := pc.byBuyer[buyer]; ok {
		return l, nil
	}
	l := market.NewLedger([]byte(n.host.ID()))
	err := n.store.PaymentsBetween(n.host.ID(), buyer, func(_ uint64, v []byte) error {
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
	if pc.byBuyer != nil {
		pc.byBuyer[buyer] = l
	}
	return l, nil
}

// checkCredit refuses a lease on terms to its buyer when the lease's first
// billing window would pass the buyer's credit limit. It is counted, as
// every refusal is.
func (n *Node) checkCredit(terms *proto.Lease, now time.Time) error {
	if n.credit.off {
		return nil
	}
	first, err := market.FirstWindow(terms)
	if err != nil {
		return err
	}
	c, err := n.creditOf(peer.ID(terms.Buyer), terms.Currency, now, nil)
	if err != nil {
		return err
	}
	if err := c.Check(first); err != nil {
		n.metrics.rejects.WithLabelValues("take", "credit-limit").Inc()
		return err
	}
	return nil
}

// checkBidCredit is checkCredit for the resting bid bidID of buyer this
// provider is about to take: count GPUs for d at price, billed as the
// offer says.
func (n *Node) checkBidCredit(bidID, buyer string, count uint32, price int64, currency string, d time.Duration) error {
	b, err := peer.Decode(buyer)
	if err != nil {
		return err
	}
	interval := int64(n.billingInterval / time.Second)
	if t := n.Published().GetTerms().GetBillingIncrementS(); t > 0 {
		interval = t
	}
	now := n.now()
	terms := &proto.Lease{Id: bidID, Buyer: []byte(b), Gpus: make([]string, count), PriceMicros: price, Currency: currency,
		DurationS: int64(d / time.Second), BillingIntervalS: interval, StartUnixMs: now.UnixMilli()}
	return n.checkCredit(terms, now)
}

// creditOthers is, for the provider's billing step of r, its buyer's
// credit without r; ok is false when there is no limit (or it could not be
// read: the step then bills as if there were none, and says so).
func (n *Node) creditOthers(r *leaseRun, now time.Time) (c market.Credit, ok bool) {
	if n.credit.off || r.rec.Role != market.RoleProvider {
		return c, false
	}
	c, err := n.creditOf(r.peer, r.terms.Currency, now, r)
	if err != nil {
		n.log.Warn("credit check failed", "lease", r.id, "err", err)
		return c, false
	}
	return c, true
}

// overCreditLocked reports whether the buyer of r, a running lease, is past
// its credit limit at now, with others its credit without r (creditOthers),
// and the note to close r with; never when limited is false. The billing step then ends r as unpaid at
// the end of its last window billed: the next window no longer fits, and
// no receipt passes the limit. Holds r.mu.
func (n *Node) overCreditLocked(others market.Credit, limited bool, r *leaseRun, now time.Time) (string, bool) {
	if !limited || r.ml.State != market.LeaseRunning {
		return "", false
	}
	c := others
	if err := c.AddLease(r.ml, now); err != nil || !c.Over() {
		return "", false
	}
	n.metrics.rejects.WithLabelValues("lease", "credit-limit").Inc()
	return strings.TrimPrefix(c.OverError().Error(), "market: "), true
}

// billedTo is where r's receipts end: its last window billed, or its start.
// Holds r.mu.
func (r *leaseRun) billedTo() time.Time {
	return time.UnixMilli(max(r.ml.Chain.WindowEndUnixMs, r.terms.StartUnixMs))
}

// creditViews are buyer's credit in its leases' currencies and the limit's.
func (n *Node) creditViews(buyer peer.ID, currencies []string) []api.CreditView {
	if n.credit.off || n.gpus == nil {
		return nil
	}
	var out []api.CreditView
	seen := map[string]bool{}
	for _, cur := range append([]string{n.credit.limit.Currency}, currencies...) {
		if seen[cur] {
			continue
		}
		seen[cur] = true
		c, err := n.creditOf(buyer, cur, n.now(), nil)
		if err != nil {
			continue
		}
		f := func(m int64) string { return market.FormatMicros(m, cur) }
		out = append(out, api.CreditView{Currency: cur, Limit: f(c.Limit), Unpaid: f(c.Unpaid()), Available: f(c.Available()), AvailableMicros: c.Available()})
	}
	return out
}

// creditFreed is told a payment of buyer was acknowledged: it forgets the
// buyer's cached payments and retries this provider's resting orders in
// its markets, so an ask crossing a bid it refused to take while the buyer
// was over its limit trades now.
func (n *Node) creditFreed(buyer peer.ID) {
	pc := n.credit.paid
	pc.mu.Lock()
	delete(pc.byBuyer, buyer)
	pc.mu.Unlock()
	seen := map[string]bool{}
	for _, g := range n.Published().GetGpus() {
		if !seen[g.Market] {
			seen[g.Market] = true
			n.kickMarket(g.Market)
		}
	}
}
