package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/client"
)

// cmdEvidence lists the signed misbehaviour this node keeps, exports one
// piece for a third party, or verifies an exported piece offline.
func cmdEvidence(e *env, args []string) error {
	if len(args) > 0 && args[0] == "verify" {
		fs := flag.NewFlagSet("evidence verify", flag.ContinueOnError)
		file := fs.String("file", "", "exported evidence `file` (required)")
		if err := parse(e, fs, args[1:], 0); err != nil {
			return err
		}
		if *file == "" {
			return fmt.Errorf("%w: evidence verify needs --file F", errUsage)
		}
		b, err := os.ReadFile(*file)
		if err != nil {
			return err
		}
		rep, err := node.VerifyEvidence(b)
		if err != nil {
			return err
		}
		if e.json {
			return printJSON(e.stdout, rep)
		}
		fmt.Fprintf(e.stdout, "valid %s evidence: %s\n", rep.Kind, rep.Proves)
		return nil
	}
	if len(args) > 0 && args[0] == "export" {
		return cmdExport(e, "evidence export", args[1:], (*client.Client).ExportEvidence)
	}
	fs := flag.NewFlagSet("evidence", flag.ContinueOnError)
	who := fs.String("peer", "", "only evidence signed by this `peer`")
	if err := parse(e, fs, args, 0); err != nil {
		return err
	}
	c, ctx, cancel, err := leaseClient(e)
	if err != nil {
		return err
	}
	defer cancel()
	evs, err := c.Evidence(ctx, *who)
	if err != nil {
		return err
	}
	if e.json {
		return printJSON(e.stdout, evs)
	}
	if len(evs) == 0 {
		fmt.Fprintln(e.stdout, "no evidence")
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tPEERS\tAT\tREASON")
	for _, v := range evs {
		var ps []string
		for _, p := range v.Peers {
			ps = append(ps, short(p))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", v.ID, v.Kind, strings.Join(ps, ","), v.At.Format(time.RFC3339), v.Reason)
	}
	return tw.Flush()
}
