package main

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
)

// wantsResell reports whether ask's arguments name --resell.
func wantsResell(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && name == "resell" {
			return true
		}
	}
	return false
}

// cmdAskResell is `ask --resell LEASE --price X`: a resale ask selling the
// rest of a reserved lease's block, all its GPUs (see node/internal/resale).
func cmdAskResell(e *env, args []string) error {
	fs := flag.NewFlagSet("ask --resell", flag.ContinueOnError)
	var f orderFlags
	fs.StringVar(&f.req.Resell, "resell", "", "reserved `lease` ID to resell: the rest of its block, all its GPUs")
	fs.StringVar(&f.req.Price, "price", "", "price per GPU-hour, a `decimal` (required)")
	fs.StringVar(&f.req.Currency, "currency", "", "`currency` of --price (default the lease's)")
	fs.DurationVar(&f.expires, "expires", time.Hour, "rest on the book for `duration` (at most the block's end)")
	fs.StringVar(&f.req.ClientKey, "client-key", "", "idempotency `key`")
	fs.DurationVar(&f.timeout, "timeout", 30*time.Second, "give up after `duration`")
	if err := parse(e, fs, args, 0); err != nil {
		return err
	}
	switch {
	case f.req.Resell == "":
		return fmt.Errorf("%w: --resell LEASE is required", errUsage)
	case f.req.Price == "":
		return fmt.Errorf("%w: --price DECIMAL is required", errUsage)
	case f.expires <= 0 || f.expires > market.MaxOrderTTL:
		return fmt.Errorf("%w: --expires must be in (0, 24h]", errUsage)
	}
	if _, err := market.ParseMoney(f.req.Price, cmpOr(f.req.Currency, "USD")); err != nil {
		return fmt.Errorf("%w: --price: %v", errUsage, err)
	}
	f.req.Side, f.req.Expires = "ask", f.expires.String()
	return placeOrder(e, f, false)
}

// printResale shows a lease's resale under `lease show`.
func printResale(e *env, r *api.ResaleView) {
	if r == nil {
		return
	}
	switch r.Role {
	case "provider":
		fmt.Fprintf(e.stdout, "  resold by %s to %s from %s as lease %s\n", r.Holder, r.Buyer, r.From.Format(time.RFC3339), r.NewLease)
		return
	case "seller":
		fmt.Fprintf(e.stdout, "  resold to %s from %s as lease %s\n", r.Buyer, r.From.Format(time.RFC3339), r.NewLease)
	default:
		fmt.Fprintf(e.stdout, "  bought by resale from %s (lease %s), from %s\n", r.Holder, r.Lease, r.From.Format(time.RFC3339))
	}
	cs := "countersigned"
	if !r.Countersigned {
		cs = "not yet countersigned"
	}
	fmt.Fprintf(e.stdout, "  premium %s %s (%d GPUs × %s at %s over the lease's %s; positive: the buyer pays the holder), %s\n",
		r.Premium, r.Currency, r.GPUs, r.End.Sub(r.From), r.ResalePrice, r.LeasePrice, cs)
}
