package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/client"
)

// verifyConcurrency bounds the providers `offers --verify` challenges at
// once; attestTimeout bounds each challenge there and is attest's default.
const (
	verifyConcurrency = 4
	attestTimeout     = 20 * time.Second
)

func cmdAttest(e *env, args []string) error {
	fs := flag.NewFlagSet("attest", flag.ContinueOnError)
	timeout := fs.Duration("timeout", attestTimeout, "give up after `duration`")
	if err := parse(e, fs, args, 1); err != nil {
		return err
	}
	p, err := peer.Decode(e.args[0])
	if err != nil {
		return fmt.Errorf("%w: provider %q: %v", errUsage, e.args[0], err)
	}
	if *timeout <= 0 {
		return fmt.Errorf("%w: --timeout must be positive", errUsage)
	}
	c, err := client.Open(e.repo)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	rep, err := c.Attest(ctx, p.String())
	if err != nil {
		return err
	}
	if e.json {
		return printJSON(e.stdout, rep)
	}
	printAttest(e.stdout, rep)
	return nil
}

// printAttest writes each GPU's checks, then the verdict.
func printAttest(w io.Writer, rep api.AttestReport) {
	fmt.Fprintf(w, "provider %s\nnonce    %s\ntime     %s\n", rep.Provider, rep.Nonce, rep.Time.Format(time.RFC3339))
	for _, g := range rep.GPUs {
		state := "NOT VERIFIED"
		if g.Verified {
			state = "verified"
		}
		fmt.Fprintf(w, "\n%s: %s\n", g.UUID, state)
		for _, c := range g.Checks {
			fmt.Fprintf(w, "  %s: %s — %s\n", c.Name, c.Outcome, c.Reason)
		}
	}
	verdict := "NOT VERIFIED"
	if rep.Verified {
		verdict = "VERIFIED"
	}
	fmt.Fprintf(w, "\nverdict: %s: %s\n", verdict, rep.Summary)
}

// verifiedOffer is an offer with the verdict of a challenge of its provider.
type verifiedOffer struct {
	api.OfferView
	Verified bool   `json:"verified"`
	Verdict  string `json:"verdict"`
}

// printVerified challenges every listed provider, at most verifyConcurrency
// at once and each within timeout, and prints the offers with the verdicts.
func printVerified(e *env, c *client.Client, offers []api.OfferView, timeout time.Duration) error {
	out := make([]verifiedOffer, len(offers))
	sem := make(chan struct{}, verifyConcurrency)
	var wg sync.WaitGroup
	for i, o := range offers {
		out[i].OfferView = o
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			out[i].Verified, out[i].Verdict = verifyProvider(c, o.Provider, timeout)
		}()
	}
	wg.Wait()
	if e.json {
		return printJSON(e.stdout, out)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PROVIDER\tREGION\tGPUS\tMEMORY/GPU\tPRICE/GPU-H\tATTESTATION\tVERIFIED")
	for _, o := range out {
		v := "no"
		if o.Verified {
			v = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s %s\t%s\t%s\n", short(o.Provider), o.Region, gpuSummary(o.GPUs), memSummary(o.GPUs), o.Price, o.Currency, o.Attestation, v)
	}
	tw.Flush()
	fmt.Fprintln(e.stdout)
	for _, o := range out {
		fmt.Fprintf(e.stdout, "%s: %s\n", short(o.Provider), o.Verdict)
	}
	return nil
}

// verifyProvider challenges one provider and says whether it verified, and why.
func verifyProvider(c *client.Client, provider string, timeout time.Duration) (bool, string) {
	p, err := peer.Decode(provider)
	if err != nil {
		return false, "bad provider ID: " + err.Error()
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	rep, err := c.Attest(ctx, p.String())
	switch {
	case errors.Is(err, api.ErrAttestFailed):
		reason := err.Error()
		if _, r, ok := strings.Cut(reason, provider+": "); ok {
			reason = r
		}
		return false, "FAILED: " + strings.TrimPrefix(reason, "p2p: ")
	case err != nil:
		return false, "not challenged: " + err.Error()
	}
	return rep.Verified, rep.Summary
}
