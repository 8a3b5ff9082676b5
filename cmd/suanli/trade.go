package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/client"
)

// orderFlags are the flags ask and bid share.
type orderFlags struct {
	req     api.OrderRequest
	expires time.Duration
	timeout time.Duration
}

func (f *orderFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.req.Market, "gpu", "", "`market` key, e.g. nvidia-h100-sxm5-80gb (required)")
	fs.Func("count", "number of GPUs (required)", func(s string) error {
		var n uint32
		_, err := fmt.Sscanf(s, "%d", &n)
		if err != nil || n == 0 || fmt.Sprint(n) != s {
			return fmt.Errorf("want a positive whole number of GPUs")
		}
		f.req.Count = n
		return nil
	})
	fs.StringVar(&f.req.Price, "price", "", "price per GPU-hour, a `decimal` (required)")
	fs.StringVar(&f.req.Currency, "currency", "USD", "`currency` of --price")
	fs.StringVar(&f.req.LeaseType, "type", "spot", "lease type: spot, on-demand or reserved")
	fs.StringVar(&f.req.Start, "start", "", "reserved: a forward block's `start`, RFC 3339 or +DURATION from now (default now)")
	fs.DurationVar(&f.expires, "expires", time.Hour, "rest on the book for `duration` (at most 24h)")
	fs.StringVar(&f.req.ClientKey, "client-key", "", "idempotency `key`: retrying with the same key never places two orders")
	fs.DurationVar(&f.timeout, "timeout", 30*time.Second, "give up after `duration`")
}

// check validates what can be checked without a daemon, so misuse exits 2.
func (f *orderFlags) check() error {
	f.req.Market = strings.ToLower(f.req.Market)
	switch {
	case f.req.Market == "":
		return fmt.Errorf("%w: --gpu MARKET is required", errUsage)
	case !market.ValidMarketKey(f.req.Market):
		return fmt.Errorf("%w: --gpu %q is not a market key like nvidia-h100-sxm5-80gb", errUsage, f.req.Market)
	case f.req.Count == 0:
		return fmt.Errorf("%w: --count N is required", errUsage)
	case f.req.Price == "" && !(f.req.Side == "ask" && f.req.LeaseType == "reserved"):
		return fmt.Errorf("%w: --price DECIMAL is required (a reserved ask without it takes the offer's discounted price)", errUsage)
	case f.req.Start != "" && f.req.LeaseType != "reserved":
		return fmt.Errorf("%w: --start is for --type reserved", errUsage)
	}
	if f.req.Price != "" {
		m, err := market.ParseMoney(f.req.Price, f.req.Currency)
		if err != nil {
			return fmt.Errorf("%w: --price: %v", errUsage, err)
		}
		if m.Micros <= 0 || m.Micros > market.MaxPriceMicros {
			return fmt.Errorf("%w: --price %s: want more than 0 and at most %s %s per GPU-hour", errUsage,
				f.req.Price, market.FormatMicros(market.MaxPriceMicros, m.Currency), m.Currency)
		}
	}
	if _, err := market.ParseLeaseType(f.req.LeaseType); err != nil {
		return fmt.Errorf("%w: --type: %v", errUsage, err)
	}
	if f.expires <= 0 || f.expires > market.MaxOrderTTL {
		return fmt.Errorf("%w: --expires must be in (0, 24h]", errUsage)
	}
	f.req.Expires = f.expires.String()
	return nil
}

func cmdAsk(e *env, args []string) error {
	if wantsResell(args) {
		return cmdAskResell(e, args) // resale.go
	}
	fs := flag.NewFlagSet("ask", flag.ContinueOnError)
	var f orderFlags
	f.register(fs)
	minD := fs.Duration("min-duration", time.Minute, "shortest lease to sign")
	maxD := fs.Duration("max-duration", 30*24*time.Hour, "longest lease to sign")
	fs.BoolVar(&f.req.Replenish, "replenish", false, "standing ask: put GPUs freed at the end of its leases back on the book")
	fs.String("resell", "", "sell the rest of a reserved `lease` instead: ask --resell LEASE --price X (see 'suanli ask --resell x -h')")
	if err := parse(e, fs, args, 0); err != nil {
		return err
	}
	f.req.Side = "ask"
	if err := f.check(); err != nil {
		return err
	}
	if *minD <= 0 || *maxD < *minD {
		return fmt.Errorf("%w: want 0 < --min-duration <= --max-duration", errUsage)
	}
	f.req.Side, f.req.MinDuration, f.req.MaxDuration = "ask", minD.String(), maxD.String()
	return placeOrder(e, f, false)
}

func cmdBid(e *env, args []string) error {
	fs := flag.NewFlagSet("bid", flag.ContinueOnError)
	var f orderFlags
	f.register(fs)
	dur := fs.Duration("duration", 0, "lease `duration` wanted (required)")
	var regions listFlag
	fs.Var(&regions, "region", "acceptable region `code` or prefix ending in - (repeatable)")
	cc := fs.Bool("cc-attested", false, "only providers whose confidential-computing evidence this node verified with a fresh nonce")
	minVRAM := fs.Uint64("min-vram", 0, "at least `GIB` of memory per GPU")
	ioc := fs.Bool("ioc", false, "immediate or cancel: take what crosses now, rest nothing")
	postOnly := fs.Bool("post-only", false, "only rest; refuse if it would trade now")
	aon := fs.Bool("all-or-none", false, "fill the whole count at once or not at all")
	wait := fs.Bool("wait", false, "wait and show progress: resting → matched → lease → receipts")
	var wf workloadFlags
	wf.register(fs)
	requeue := fs.Bool("requeue", false, "spot: when the lease is preempted, put the bid back on the book for the rest of its duration")
	var command []string
	if i := slices.Index(args, "--"); i >= 0 {
		command, args = args[i+1:], args[:i]
	}
	if err := parse(e, fs, args, 0); err != nil {
		return err
	}
	if err := wf.apply(&f.req, command); err != nil {
		return err
	}
	f.req.Requeue = *requeue
	if err := f.check(); err != nil {
		return err
	}
	if *dur <= 0 {
		return fmt.Errorf("%w: --duration D is required", errUsage)
	}
	if *ioc && *postOnly {
		return fmt.Errorf("%w: --ioc and --post-only conflict", errUsage)
	}
	for _, r := range regions {
		if !market.ValidRegion(strings.TrimSuffix(r, "-")) && !market.ValidRegion(r) {
			return fmt.Errorf("%w: --region %q: want a code like CN-GZ or a prefix like CN-", errUsage, r)
		}
	}
	f.req.Side, f.req.Duration = "bid", dur.String()
	f.req.Regions, f.req.MinVRAMGiB, f.req.IOC, f.req.PostOnly, f.req.AllOrNone = regions, *minVRAM, *ioc, *postOnly, *aon
	if *cc {
		f.req.MinAttestation = market.AttestCCVerified
	}
	return placeOrder(e, f, *wait)
}

func placeOrder(e *env, f orderFlags, wait bool) error {
	c, err := client.Open(e.repo)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	if f.req.Resell == "" {
		typed := f.req.Market
		if f.req.Market, err = resolveMarket(ctx, c, typed); err != nil {
			return err
		}
		if f.req.Market != typed && !e.json {
			fmt.Fprintf(e.stderr, "market %s (from %q)\n", f.req.Market, typed)
		}
	}
	o, err := c.PlaceOrder(ctx, f.req)
	if err != nil {
		return err
	}
	if !wait {
		if e.json {
			return printJSON(e.stdout, o)
		}
		printOrder(e, o)
		return nil
	}
	// --wait: show each change until the order is done.
	ctx, stop := signalContext()
	defer stop()
	shown := 0
	status := ""
	for {
		if o.Status != status {
			status = o.Status
			if !e.json {
				fmt.Fprintf(e.stdout, "%s %s: %s\n", o.Side, o.ID, orderProgress(o))
				if o.Status == "resting" {
					printPassedOver(e, o)
				}
			}
		}
		for ; shown < len(o.Fills); shown++ {
			t := o.Fills[shown]
			if !e.json {
				fmt.Fprintf(e.stdout, "matched with %s: %s at %s %s/GPU-h (%s)\nlease %s on %s\n",
					counterparty(o, t), plural(int(t.Count), "GPU"), t.Price, t.Currency, t.LeaseType, t.Lease, strings.Join(t.GPUs, ", "))
			}
		}
		if o.Status != "resting" && o.Status != "taking" {
			if e.json {
				return printJSON(e.stdout, o)
			}
			if o.Side == "bid" {
				return followLeases(ctx, e, c, o)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			if e.json {
				return printJSON(e.stdout, o)
			}
			fmt.Fprintf(e.stdout, "stopped waiting; the order keeps resting (suanli cancel %s to withdraw it)\n", o.ID)
			return nil
		case <-time.After(250 * time.Millisecond):
		}
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		next, err := c.Order(qctx, o.ID)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				continue
			}
			return err
		}
		o = next
	}
}

func counterparty(o api.OrderView, t api.TradeView) string {
	if o.Side == "bid" {
		return "provider " + t.Provider
	}
	return "buyer " + t.Buyer
}

// orderProgress says where an order stands in words: resting with what is
// left, or done with what it filled (an IOC order that crossed nothing
// says so).
func orderProgress(o api.OrderView) string {
	filled := o.Filled()
	switch o.Status {
	case "resting", "taking":
		return fmt.Sprintf("%s, %d of %s left", o.Status, o.Remaining, plural(int(o.Count), "GPU"))
	case "done", "filled":
		if filled == 0 {
			return "done: nothing crossed it, so nothing filled (an IOC order does not rest)"
		}
		if filled < o.Count {
			return fmt.Sprintf("done: filled %d of %s; the rest did not rest (IOC)", filled, plural(int(o.Count), "GPU"))
		}
		return fmt.Sprintf("filled: all %s", plural(int(o.Count), "GPU"))
	}
	return fmt.Sprintf("%s, filled %d of %s", o.Status, filled, plural(int(o.Count), "GPU"))
}

func printOrder(e *env, o api.OrderView) {
	fmt.Fprintf(e.stdout, "%s %s\n%s %s of %s at %s %s/GPU-h (%s): %s\n",
		o.Side, o.ID, o.Side, plural(int(o.Count), "GPU"), o.Market, o.Price, o.Currency, o.LeaseType, orderProgress(o))
	if o.Standing != "" {
		fmt.Fprintf(e.stdout, "  standing ask %s: freed GPUs go back on the book\n", short(o.Standing))
	}
	if o.Error != "" {
		fmt.Fprintf(e.stdout, "  last take refused: %s\n", o.Error)
	}
	for _, t := range o.Fills {
		fmt.Fprintf(e.stdout, "  filled %d at %s %s with %s, lease %s\n", t.Count, t.Price, t.Currency, counterparty(o, t), t.Lease)
	}
	printPassedOver(e, o)
}

// printPassedOver says why visible orders at or better than o's price
// were not taken.
func printPassedOver(e *env, o api.OrderView) {
	other := "asks at or under"
	if o.Side == "ask" {
		other = "bids at or over"
	}
	for _, p := range o.PassedOver {
		fmt.Fprintf(e.stdout, "  passed over %d %s your price (%s), %s: %s\n", p.Orders, other, plural(int(p.GPUs), "GPU"), p.Reason, p.Detail)
	}
}

func cmdOrders(e *env, args []string) error {
	fs := flag.NewFlagSet("orders", flag.ContinueOnError)
	if err := parse(e, fs, args, 0); err != nil {
		return err
	}
	c, err := client.Open(e.repo)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	orders, err := c.Orders(ctx)
	if err != nil {
		return err
	}
	if e.json {
		return printJSON(e.stdout, orders)
	}
	if len(orders) == 0 {
		fmt.Fprintln(e.stdout, "no orders")
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSIDE\tMARKET\tCOUNT\tLEFT\tPRICE/GPU-H\tTYPE\tSTATUS\tEXPIRES")
	for _, o := range orders {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s %s\t%s\t%s\t%s\n", o.ID, o.Side, o.Market, o.Count, o.Remaining,
			o.Price, o.Currency, o.LeaseType, o.Status, o.Expires.Local().Format(time.DateTime))
	}
	return tw.Flush()
}

// resoldBy names a trade's provider, and for a resale the holder that
// resold its reserved time.
func resoldBy(t api.TradeView) string {
	if t.Reseller == "" {
		return short(t.Provider)
	}
	return short(t.Provider) + " (resold by " + short(t.Reseller) + ")"
}

func cmdCancel(e *env, args []string) error {
	fs := flag.NewFlagSet("cancel", flag.ContinueOnError)
	if err := parse(e, fs, args, 1); err != nil {
		return err
	}
	c, err := client.Open(e.repo)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o, err := c.CancelOrder(ctx, e.args[0])
	if err != nil {
		return err
	}
	if e.json {
		return printJSON(e.stdout, o)
	}
	printOrder(e, o)
	return nil
}

func cmdBook(e *env, args []string) error {
	fs := flag.NewFlagSet("book", flag.ContinueOnError)
	cur := fs.String("currency", "USD", "`currency` of the book")
	depth := fs.Int("depth", 10, "price levels per side to show (0: all)")
	if err := parse(e, fs, args, 1); err != nil {
		return err
	}
	mkt := strings.ToLower(e.args[0])
	if !market.ValidMarketKey(mkt) {
		return fmt.Errorf("%w: %q is not a market key like nvidia-h100-sxm5-80gb", errUsage, mkt)
	}
	c, err := client.Open(e.repo)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if mkt, err = resolveMarket(ctx, c, mkt); err != nil {
		return err
	}
	b, err := c.Book(ctx, mkt, *cur)
	if err != nil {
		return err
	}
	if e.json {
		return printJSON(e.stdout, b)
	}
	fmt.Fprintf(e.stdout, "%s in %s per GPU-hour\n", b.Market, b.Currency)
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "BID GPUS\tBID\tASK\tASK GPUS\t")
	rows := max(len(b.Bids), len(b.Asks))
	if *depth > 0 {
		rows = min(rows, *depth)
	}
	for i := range rows {
		var bq, bp, ap, aq string
		if i < len(b.Bids) {
			bq, bp = fmt.Sprint(b.Bids[i].Count), b.Bids[i].Price
		}
		if i < len(b.Asks) {
			ap, aq = b.Asks[i].Price, fmt.Sprint(b.Asks[i].Count)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", bq, bp, ap, aq)
	}
	tw.Flush()
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	fmt.Fprintf(e.stdout, "spread %s  spot %s  index (1h) %s\n", dash(b.Spread), dash(b.Spot), dash(b.Index))
	if len(b.Blocks) > 0 {
		fmt.Fprintln(e.stdout, "reserved blocks ahead:")
		for _, x := range b.Blocks {
			span := "for " + x.Duration
			if x.Side == "ask" {
				span = "up to " + x.MaxDuration
			}
			fmt.Fprintf(e.stdout, "  %s %d GPUs at %s from %s %s\n", x.Side, x.Count, x.Price, x.Start.Format(time.RFC3339), span)
		}
	}
	return nil
}

func cmdTrades(e *env, args []string) error {
	fs := flag.NewFlagSet("trades", flag.ContinueOnError)
	if err := parse(e, fs, args, 1); err != nil {
		return err
	}
	mkt := strings.ToLower(e.args[0])
	if !market.ValidMarketKey(mkt) {
		return fmt.Errorf("%w: %q is not a market key like nvidia-h100-sxm5-80gb", errUsage, mkt)
	}
	c, err := client.Open(e.repo)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if mkt, err = resolveMarket(ctx, c, mkt); err != nil {
		return err
	}
	trades, err := c.Trades(ctx, mkt)
	if err != nil {
		return err
	}
	if e.json {
		return printJSON(e.stdout, trades)
	}
	if len(trades) == 0 {
		fmt.Fprintln(e.stdout, "no trades seen")
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tGPUS\tPRICE/GPU-H\tTYPE\tBUYER\tPROVIDER\tLEASE")
	for _, t := range trades {
		fmt.Fprintf(tw, "%s\t%d\t%s %s\t%s\t%s\t%s\t%s\n", t.Time.Local().Format(time.TimeOnly), t.Count, t.Price, t.Currency,
			t.LeaseType, short(t.Buyer), resoldBy(t), short(t.Lease))
	}
	return tw.Flush()
}
