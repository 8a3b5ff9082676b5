package node

import (
	"testing"

	"github.com/suanli/suanli/node/internal/credit"
)

// newCreditPolicy is the policy New makes of o and cfg, its price in
// priceCurrency.
func newCreditPolicy(o options, cfg Config, priceCurrency string) (*credit.Policy, error) {
	return credit.New(creditSettings(o, cfg, priceCurrency), credit.Config{})
}

func TestCreditPolicy(t *testing.T) {
	for _, c := range []struct {
		name     string
		opt      Option
		cfg      string
		priceCur string
		off      bool
		micros   int64
		currency string
		err      bool
	}{
		{name: "default", priceCur: "USD", micros: 10_000_000, currency: "USD"},
		{name: "default in the price currency", priceCur: "CNY", micros: 10_000_000, currency: "CNY"},
		{name: "config", cfg: "25.50", priceCur: "USD", micros: 25_500_000, currency: "USD"},
		{name: "option over config", opt: WithCreditLimit("3", "EUR"), cfg: "25", priceCur: "USD", micros: 3_000_000, currency: "EUR"},
		{name: "none in config", cfg: "none", priceCur: "USD", off: true},
		{name: "none as option", opt: WithCreditLimit("none", ""), cfg: "25", priceCur: "USD", off: true},
		{name: "zero: prepaid only", opt: WithCreditLimit("0", ""), priceCur: "USD", micros: 0, currency: "USD"},
		{name: "bad config", cfg: "lots", priceCur: "USD", err: true},
		{name: "negative config", cfg: "-1", priceCur: "USD", err: true},
	} {
		var o options
		if c.opt != nil {
			if err := c.opt(&o); err != nil {
				t.Fatalf("%s: option: %v", c.name, err)
			}
		}
		p, err := newCreditPolicy(o, Config{CreditLimit: c.cfg}, c.priceCur)
		if c.err {
			if err == nil {
				t.Errorf("%s: newCreditPolicy = %+v, want an error", c.name, p)
			}
			continue
		}
		if err != nil || p.Off() != c.off || !c.off && (p.Limit().Micros != c.micros || p.Limit().Currency != c.currency) {
			t.Errorf("%s: newCreditPolicy = %+v, %v; want off %v, %d %s", c.name, p, err, c.off, c.micros, c.currency)
		}
		if !c.off && (p.LimitIn(c.currency) != c.micros || p.LimitIn("XXX") != 0) {
			t.Errorf("%s: limitIn = %d (own), %d (other); want %d, 0", c.name, p.LimitIn(c.currency), p.LimitIn("XXX"), c.micros)
		}
	}
}

// TestCreditPolicyFirst: a new buyer's credit is 1 unit unless set, in the
// limit's currency, and a bad or negative one is refused.
func TestCreditPolicyFirst(t *testing.T) {
	for _, c := range []struct {
		name string
		opt  Option
		cfg  string
		want int64
		err  bool
	}{
		{name: "default", want: 1_000_000},
		{name: "config", cfg: "0.25", want: 250_000},
		{name: "option over config", opt: WithCreditNew("2"), cfg: "0.25", want: 2_000_000},
		{name: "zero: prepaid only until paid", opt: WithCreditNew("0"), want: 0},
		{name: "bad config", cfg: "lots", err: true},
		{name: "negative config", cfg: "-1", err: true},
	} {
		var o options
		if c.opt != nil {
			if err := c.opt(&o); err != nil {
				t.Fatalf("%s: option: %v", c.name, err)
			}
		}
		p, err := newCreditPolicy(o, Config{CreditNew: c.cfg}, "USD")
		if c.err != (err != nil) || err == nil && p.First() != c.want {
			t.Errorf("%s: newCreditPolicy = first %d, %v; want %d (error %v)", c.name, p.First(), err, c.want, c.err)
		}
	}
	for _, bad := range []string{"", "x", "-2"} {
		if err := WithCreditNew(bad)(&options{}); err == nil {
			t.Errorf("WithCreditNew(%q) = nil, want an error", bad)
		}
	}
}
