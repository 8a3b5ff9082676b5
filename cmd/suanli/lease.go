package main

import (
	"context"
	"encoding/csv"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/client"
)

// Lease and settlement commands: leases, lease show|close, logs, receipts,
// settle.

// cmdExport writes what export returns for the one argument (a lease,
// a piece of evidence) to stdout, for a third party to verify offline.
func cmdExport(e *env, name string, args []string, export func(*client.Client, context.Context, string) ([]byte, error)) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	if err := parse(e, fs, args, 1); err != nil {
		return err
	}
	c, ctx, cancel, err := leaseClient(e)
	if err != nil {
		return err
	}
	defer cancel()
	b, err := export(c, ctx, e.args[0])
	if err != nil {
		return err
	}
	// The file's bytes as signed: a verifier must see exactly them.
	_, err = e.rawOut.Write(b)
	return err
}

func leaseClient(e *env) (*client.Client, context.Context, context.CancelFunc, error) {
	c, err := client.Open(e.repo)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	return c, ctx, cancel, nil
}

func cmdLeases(e *env, args []string) error {
	fs := flag.NewFlagSet("leases", flag.ContinueOnError)
	if err := parse(e, fs, args, 0); err != nil {
		return err
	}
	c, ctx, cancel, err := leaseClient(e)
	if err != nil {
		return err
	}
	defer cancel()
	ls, err := c.Leases(ctx)
	if err != nil {
		return err
	}
	if e.json {
		return printJSON(e.stdout, ls)
	}
	if len(ls) == 0 {
		fmt.Fprintln(e.stdout, "no leases")
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LEASE\tROLE\tSTATE\tREASON\tGPUS\tPRICE/GPU-H\tRECEIPTS\tBILLED")
	for _, l := range ls {
		reason := cmpOr(l.Reason, "-")
		if l.PreemptAt != nil && l.State != "closed" {
			reason = "preempt@" + l.PreemptAt.Local().Format("15:04:05")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s %s\t%d\t%s\n", l.ID, l.Role, l.State, reason, len(l.GPUs),
			l.Price, l.Currency, l.Countersigned, amountText(l.Cumulative, l.Currency))
	}
	return tw.Flush()
}

// amountText is an amount owed or billed as the ledger keeps it: to the
// micro-unit, always 6 decimals, with its currency, so a column lines up
// and `settle ack` can be given exactly that figure.
func amountText(decimal, currency string) string {
	m, err := market.ParseAmount(cmpOr(decimal, "0"), currency)
	if err != nil {
		return decimal + " " + currency
	}
	return fmt.Sprintf("%d.%06d %s", m.Micros/market.MicrosPerUnit, m.Micros%market.MicrosPerUnit, currency)
}

func cmdLease(e *env, args []string) error {
	if len(args) == 0 || (args[0] != "show" && args[0] != "close") {
		// Parse anyway, so -h helps and a bad flag is named.
		fs := flag.NewFlagSet("lease", flag.ContinueOnError)
		if err := parse(e, fs, args, 0); err != nil {
			return err
		}
		return fmt.Errorf("%w: want lease show ID or lease close ID", errUsage)
	}
	sub := args[0]
	fs := flag.NewFlagSet("lease "+sub, flag.ContinueOnError)
	if err := parse(e, fs, args[1:], 1); err != nil {
		return err
	}
	c, ctx, cancel, err := leaseClient(e)
	if err != nil {
		return err
	}
	defer cancel()
	var l api.LeaseView
	if sub == "show" {
		l, err = c.Lease(ctx, e.args[0])
	} else {
		l, err = c.CloseLease(ctx, e.args[0])
	}
	if err != nil {
		return err
	}
	if e.json {
		return printJSON(e.stdout, l)
	}
	printLease(e, l)
	return nil
}

func printLease(e *env, l api.LeaseView) {
	fmt.Fprintf(e.stdout, "lease %s (%s)\n  provider %s\n  buyer    %s\n", l.ID, l.Role, l.Provider, l.Buyer)
	fmt.Fprintf(e.stdout, "  %s of %s at %s %s/GPU-h (%s), billed every %s\n", plural(len(l.GPUs), "GPU"), l.Market, l.Price, l.Currency, l.LeaseType, l.Interval)
	fmt.Fprintf(e.stdout, "  %s → %s\n  state %s %s\n", l.Start.Format(time.RFC3339), l.End.Format(time.RFC3339), l.State, l.Reason)
	fmt.Fprintf(e.stdout, "  receipts %d, countersigned %d, owed %s %s\n", l.Receipts, l.Countersigned, l.Cumulative, l.Currency)
	if l.Executor != "" {
		fmt.Fprintf(e.stdout, "  executor %s %s\n", l.Executor, strings.Join(l.Exec, " "))
	}
	printWorkload(e, l)
	printResale(e, l.Resale) // resale.go
	for _, g := range l.GPUs {
		fmt.Fprintf(e.stdout, "  gpu %s\n", g)
	}
}

func cmdLogs(e *env, args []string) error {
	fs := flag.NewFlagSet("logs", flag.ContinueOnError)
	follow := fs.Bool("f", false, "follow: keep printing output until the command ends")
	raw := fs.Bool("raw", false, "print the output's bytes as they are (by default escape sequences are shown, not obeyed)")
	if err := parse(e, fs, args, 1); err != nil {
		return err
	}
	// The output comes from the provider: shown, not obeyed, unless --raw
	// (for a file or a pipe). Carriage returns pass (progress bars).
	stdout, stderr := e.rawOut, e.rawErr
	if !*raw {
		o, r := newTermSafe(e.rawOut, true), newTermSafe(e.rawErr, true)
		defer o.Flush()
		defer r.Flush()
		stdout, stderr = o, r
	}
	c, err := client.Open(e.repo)
	if err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	var after uint64
	for {
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		v, err := c.Logs(qctx, e.args[0], after)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if v.Dropped > 0 {
			fmt.Fprintf(e.stderr, "[%s of earlier output dropped: the node keeps the newest (daemon --log-cap)]\n", plural(int(v.Dropped), "chunk"))
		}
		for _, ch := range v.Chunks {
			w := stdout
			if ch.Stream == "stderr" {
				w = stderr
			}
			fmt.Fprint(w, ch.Data)
		}
		after = v.Next
		if v.More {
			continue // the next page at once
		}
		if !*follow || v.Done {
			if v.Exit != nil && *follow {
				fmt.Fprintf(e.stderr, "[exit code %d %s%s]\n", v.Exit.Code, v.Exit.Signal, v.Exit.Error)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func cmdReceipts(e *env, args []string) error {
	if len(args) > 0 && args[0] == "verify" {
		return cmdReceiptsVerify(e, args[1:])
	}
	if len(args) > 0 && args[0] == "export" {
		return cmdExport(e, "receipts export", args[1:], (*client.Client).ExportReceipts)
	}
	fs := flag.NewFlagSet("receipts", flag.ContinueOnError)
	if err := parse(e, fs, args, 1); err != nil {
		return err
	}
	c, ctx, cancel, err := leaseClient(e)
	if err != nil {
		return err
	}
	defer cancel()
	rs, err := c.Receipts(ctx, e.args[0])
	if err != nil {
		return err
	}
	if e.json {
		return printJSON(e.stdout, rs)
	}
	fmt.Fprintf(e.stdout, "%4s %-20s %-20s %10s %12s %12s %-8s %-8s\n", "SEQ", "FROM", "TO", "GPU-MS", "AMOUNT", "CUMULATIVE", "PROVIDER", "BUYER")
	for _, r := range rs {
		fmt.Fprintf(e.stdout, "%4d %-20s %-20s %10d %12s %12s %-8s %-8s\n", r.Seq, r.WindowStart.Format(time.RFC3339), r.WindowEnd.Format(time.RFC3339),
			r.GPUMillis, r.Amount, r.Cumulative, r.ProviderSignature, r.BuyerSignature)
	}
	return nil
}

// cmdReceiptsVerify re-verifies a chain: from the daemon's storage, or,
// with --file, an exported chain offline, without a daemon.
func cmdReceiptsVerify(e *env, args []string) error {
	fs := flag.NewFlagSet("receipts verify", flag.ContinueOnError)
	file := fs.String("file", "", "verify an exported chain `file` offline")
	want := 1
	for _, a := range args {
		if a == "--file" || a == "-file" || strings.HasPrefix(a, "--file=") || strings.HasPrefix(a, "-file=") {
			want = 0
		}
	}
	if err := parse(e, fs, args, want); err != nil {
		return err
	}
	var rep api.ChainReport
	if *file != "" {
		b, err := os.ReadFile(*file)
		if err != nil {
			return err
		}
		if rep, err = node.VerifyExport(b); err != nil {
			return err
		}
	} else {
		c, ctx, cancel, err := leaseClient(e)
		if err != nil {
			return err
		}
		defer cancel()
		if rep, err = c.VerifyReceipts(ctx, e.args[0]); err != nil {
			return err
		}
	}
	if e.json {
		if err := printJSON(e.stdout, rep); err != nil {
			return err
		}
	} else if rep.Valid {
		fmt.Fprintf(e.stdout, "lease %s: %s, %d countersigned, valid; owed %s %s for %d GPU-ms\n",
			rep.Lease, plural(int(rep.Receipts), "receipt"), rep.Countersigned, rep.Owed, rep.Currency, rep.GPUMillis)
	}
	if !rep.Valid {
		return fmt.Errorf("lease %s: chain invalid: %s", rep.Lease, rep.Error)
	}
	return nil
}

func cmdSettle(e *env, args []string) error {
	if len(args) > 0 && args[0] == "ack" {
		return cmdSettleAck(e, args[1:])
	}
	fs := flag.NewFlagSet("settle", flag.ContinueOnError)
	peerID := fs.String("peer", "", "only the settlement with this `peer`")
	asCSV := fs.Bool("csv", false, "one CSV row per lease, for accounting")
	if err := parse(e, fs, args, 0); err != nil {
		return err
	}
	c, ctx, cancel, err := leaseClient(e)
	if err != nil {
		return err
	}
	defer cancel()
	st, err := c.Settle(ctx, *peerID)
	if err != nil {
		return err
	}
	switch {
	case e.json:
		return printJSON(e.stdout, st)
	case *asCSV:
		w := csv.NewWriter(e.stdout)
		w.Write([]string{"peer", "lease", "role", "currency", "receipts", "gpu_ms", "amount", "paid", "owed", "kind"})
		for _, s := range st {
			for _, l := range s.Leases {
				w.Write([]string{s.Peer, l.Lease, l.Role, l.Currency, strconv.FormatUint(l.Receipts, 10), strconv.FormatUint(l.GPUMillis, 10), l.Amount, l.Paid, l.Owed, l.Kind})
			}
		}
		w.Flush()
		return w.Error()
	}
	if len(st) == 0 {
		fmt.Fprintln(e.stdout, "nothing to settle")
	}
	for _, s := range st {
		fmt.Fprintf(e.stdout, "peer %s\n", s.Peer)
		for _, l := range s.Leases {
			if l.Kind == "resale premium" {
				who := "the peer owes this node"
				if l.Role == "buyer" {
					who = "this node owes the peer"
				}
				fmt.Fprintf(e.stdout, "  resale premium on lease %s (%s): %s, paid %s, owed %s\n", l.Lease, who,
					amountText(l.Amount, l.Currency), amountText(l.Paid, l.Currency), amountText(l.Owed, l.Currency))
				continue
			}
			fmt.Fprintf(e.stdout, "  lease %s (%s): %s, %d GPU-ms, billed %s, paid %s, owed %s\n", l.Lease, l.Role, plural(int(l.Receipts), "receipt"), l.GPUMillis,
				amountText(l.Amount, l.Currency), amountText(l.Paid, l.Currency), amountText(l.Owed, l.Currency))
		}
		for _, p := range s.Payments {
			fmt.Fprintf(e.stdout, "  payment %d (%s): %s %s %s\n", p.Seq, p.Role, p.Amount, p.Currency, p.Reference)
		}
		for _, t := range s.Totals {
			switch {
			case t.OwedMicros > 0:
				fmt.Fprintf(e.stdout, "  total %s: the peer owes this node %s\n", t.Currency, amountText(market.FormatMicros(t.OwedMicros, t.Currency), t.Currency))
			case t.OwedMicros < 0:
				fmt.Fprintf(e.stdout, "  total %s: this node owes the peer %s\n", t.Currency, amountText(market.FormatMicros(-t.OwedMicros, t.Currency), t.Currency))
			default:
				fmt.Fprintf(e.stdout, "  total %s: settled, nothing owed\n", t.Currency)
			}
		}
		for _, cr := range s.Credit {
			fmt.Fprintf(e.stdout, "  credit %s: %s unpaid of a %s limit, %s available\n", cr.Currency, cr.Unpaid, cr.Limit, cr.Available)
		}
	}
	return nil
}

func cmdSettleAck(e *env, args []string) error {
	fs := flag.NewFlagSet("settle ack", flag.ContinueOnError)
	peerID := fs.String("peer", "", "the buyer that paid (required)")
	amount := fs.String("amount", "", "the `decimal` amount received (required)")
	currency := fs.String("currency", "USD", "the amount's `currency`")
	ref := fs.String("reference", "", "the payment's `reference` in its payment system")
	if err := parse(e, fs, args, 0); err != nil {
		return err
	}
	if *peerID == "" || *amount == "" {
		return fmt.Errorf("%w: --peer and --amount are required", errUsage)
	}
	if _, err := market.ParseAmount(*amount, *currency); err != nil {
		return fmt.Errorf("%w: --amount: %v", errUsage, err)
	}
	c, ctx, cancel, err := leaseClient(e)
	if err != nil {
		return err
	}
	defer cancel()
	p, err := c.AckPayment(ctx, api.PaymentRequest{Peer: *peerID, Amount: *amount, Currency: *currency, Reference: *ref})
	if err != nil {
		return err
	}
	if e.json {
		return printJSON(e.stdout, p)
	}
	delivered := p.Delivered != nil && *p.Delivered
	fmt.Fprintf(e.stdout, "payment %d of %s %s acknowledged (delivered to the buyer: %v)\n", p.Seq, p.Amount, p.Currency, delivered)
	return nil
}

// followLeases shows a filled bid's leases starting, their receipts as
// they arrive, and how they close.
func followLeases(ctx context.Context, e *env, c *client.Client, o api.OrderView) error {
	var failed []string
	for _, t := range o.Fills {
		if t.Lease == "" {
			continue
		}
		shown, said, eps, noticed := 0, "", 0, false
		for {
			qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			l, err := c.Lease(qctx, t.Lease)
			var rs []api.ReceiptView
			if err == nil {
				rs, err = c.Receipts(qctx, t.Lease)
			}
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return stoppedFollowing(e, t.Lease)
				}
				return err
			}
			if now := leaseProgress(l, time.Now()); now != said {
				said = now
				fmt.Fprintf(e.stdout, "lease %s: %s\n", l.ID, now)
			}
			if l.PreemptAt != nil && !noticed {
				noticed = true
				fmt.Fprintf(e.stdout, "lease %s: preemption notice, ends at %s\n", l.ID, l.PreemptAt.Local().Format(time.DateTime))
			}
			for ; eps < len(l.Endpoints); eps++ {
				ep := l.Endpoints[eps]
				fmt.Fprintf(e.stdout, "port %d → %s:%d\n", ep.ContainerPort, ep.Host, ep.HostPort)
			}
			for ; shown < len(rs); shown++ {
				r := rs[shown]
				fmt.Fprintf(e.stdout, "receipt %d: %d GPU-ms, %s %s (total %s), countersigned: %s\n", r.Seq, r.GPUMillis, r.Amount, l.Currency, r.Cumulative, r.BuyerSignature)
			}
			done := l.State == "closed" && len(rs) > 0 && rs[len(rs)-1].WindowEnd.Equal(minTime(l.End, l.ClosedAt))
			if !done && l.ClosedAt != nil && time.Since(*l.ClosedAt) > 15*time.Second {
				fmt.Fprintf(e.stdout, "lease %s: no more receipts came\n", l.ID)
				done = true
			}
			if done {
				if l.Reason == "failed" || l.Exit != nil && (l.Exit.Code != 0 || l.Exit.Error != "") && l.Reason == "exited" {
					failed = append(failed, l.ID)
				}
				break
			}
			select {
			case <-ctx.Done():
				return stoppedFollowing(e, t.Lease)
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("lease %s failed (suanli lease show for the details)", strings.Join(failed, ", "))
	}
	return nil
}

// leaseProgress says in words where a lease stands at now: agreed but not
// yet started (a reserved block ahead, or GPUs freed by a preemption
// notice first), running, or closed with its reason, note and exit.
func leaseProgress(l api.LeaseView, now time.Time) string {
	switch {
	case l.State == "closed":
		s := "closed " + l.Reason
		if x := l.Exit; x != nil {
			switch {
			case x.OOMKilled:
				s += ", killed for want of memory"
			case x.Error != "" && strings.Contains(l.Note, x.Error):
				// the note says it
			case x.Error != "":
				s += ", " + x.Error
			case x.Signal != "":
				s += ", killed by " + x.Signal
			default:
				s += fmt.Sprintf(", exit code %d", x.Code)
			}
		}
		if l.Note != "" {
			s += ": " + l.Note
		}
		return s
	case l.Start.After(now):
		at := l.Start.Local().Format(time.DateTime)
		if l.LeaseType == "reserved" {
			return "agreed; the reserved block starts at " + at
		}
		return "agreed; starts at " + at + ", when a preemption notice to a spot lease ends"
	}
	return l.State
}

// stoppedFollowing is what Ctrl-C on `bid --wait` says: the lease goes on.
func stoppedFollowing(e *env, lease string) error {
	fmt.Fprintf(e.stdout, "stopped following; lease %s keeps running and billing until its end (suanli lease close %s ends it; suanli lease show %s follows it)\n", lease, lease, lease)
	return nil
}

func minTime(a time.Time, b *time.Time) time.Time {
	if b != nil && b.Before(a) {
		return b.Truncate(time.Millisecond)
	}
	return a
}

// plural is "1 chunk" or "3 chunks".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
