package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/suanli/suanli/gpu"
	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/client"
	"github.com/suanli/suanli/node/devnet"
)

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func cmdGPUs(e *env, args []string) error {
	fs := flag.NewFlagSet("gpus", flag.ContinueOnError)
	sim := fs.String("gpu-sim", "", "simulate a `model`: "+strings.Join(gpu.SimModels(), ", "))
	seed := fs.Int64("gpu-seed", 1, "simulated telemetry `seed`")
	if err := parse(e, fs, args, 0); err != nil {
		return err
	}
	var b gpu.Backend
	var err error
	if *sim != "" {
		if !slices.Contains(gpu.SimModels(), *sim) {
			return fmt.Errorf("%w: --gpu-sim %q: want one of %s", errUsage, *sim, strings.Join(gpu.SimModels(), ", "))
		}
		b, err = gpu.OpenSim(*sim, *seed)
	} else {
		b, err = gpu.Open()
	}
	if err != nil {
		return err
	}
	defer b.Close()
	r, err := node.InventoryReport(b)
	if err != nil {
		return err
	}
	if e.json {
		return printJSON(e.stdout, r)
	}
	fmt.Fprintf(e.stdout, "backend %s, driver %s, CUDA %s, confidential computing %v, attestation %s\n",
		r.Backend, r.DriverVersion, r.CUDADriverVersion, r.ConfidentialComputing, r.Attestation)
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "IDX\tUUID\tNAME\tMARKET\tMEMORY\tCC\tUTIL\tTEMP\tPOWER")
	for _, g := range r.GPUs {
		util, temp, power := "-", "-", "-"
		if t := g.Telemetry; t != nil {
			util, temp, power = fmt.Sprintf("%d%%", t.UtilizationPercent), fmt.Sprintf("%dC", t.TemperatureC), fmt.Sprintf("%dW", t.PowerMilliwatts/1000)
		}
		cc := "-"
		if g.EvidenceReportSHA256 != "" {
			cc = "evidence"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", g.Index, g.UUID, g.Name, g.Market, gib(g.MemoryBytes), cc, util, temp, power)
	}
	return tw.Flush()
}

func gib(b uint64) string { return fmt.Sprintf("%d GiB", (b+(1<<29))>>30) }

func cmdOffers(e *env, args []string) error {
	fs := flag.NewFlagSet("offers", flag.ContinueOnError)
	var q api.OfferQuery
	fs.StringVar(&q.GPU, "gpu", "", "market key or model substring, e.g. h100")
	fs.IntVar(&q.MinGPUs, "min-gpus", 0, "at least `N` matching GPUs")
	fs.IntVar(&q.MinFreeGPUs, "min-free", 0, "at least `N` matching GPUs free (not leased) now")
	fs.Uint64Var(&q.MinVRAMGiB, "min-vram", 0, "at least `GIB` of memory per GPU")
	fs.StringVar(&q.Region, "region", "", "region `code` (CN-GZ), or a prefix ending in - (CN-)")
	fs.StringVar(&q.MaxPrice, "max-price", "", "highest on-demand price per GPU-hour, a `decimal`")
	fs.StringVar(&q.Currency, "currency", "USD", "`currency` of --max-price")
	fs.BoolVar(&q.CCAttested, "cc-attested", false, "only offers carrying confidential-computing evidence")
	fs.StringVar(&q.MinIsolation, "min-isolation", "", "only providers isolating tenants at least at `level`: process, container or container-userns")
	fs.Uint64Var(&q.MinVCPUsPerGPU, "min-vcpus-per-gpu", 0, "at least `N` vCPUs with each GPU")
	fs.Uint64Var(&q.MinRAMGiBPerGPU, "min-ram-per-gpu", 0, "at least `GIB` of RAM with each GPU")
	fs.StringVar(&q.Sort, "sort", "price", "sort by price, vram or gpus")
	fs.StringVar(&q.From, "from", "", "`source`: dht (providers' records), book (the offers behind the open asks of the --gpu market's book: no DHT lookups), or both when empty")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after `duration`")
	verify := fs.Bool("verify", false, "challenge each provider to attest its GPUs with a fresh nonce (VERIFIED column)")
	if err := parse(e, fs, args, 0); err != nil {
		return err
	}
	if q.MinGPUs < 0 {
		return fmt.Errorf("%w: --min-gpus must not be negative", errUsage)
	}
	if q.MinFreeGPUs < 0 {
		return fmt.Errorf("%w: --min-free must not be negative", errUsage)
	}
	if q.MaxPrice != "" {
		if _, err := market.ParseMoney(q.MaxPrice, q.Currency); err != nil {
			return fmt.Errorf("%w: --max-price: %v", errUsage, err)
		}
	}
	if err := market.SortOffers(nil, q.Sort); err != nil {
		return fmt.Errorf("%w: --sort: %v", errUsage, err)
	}
	switch q.From {
	case "", api.OffersFromDHT:
	case api.OffersFromBook:
		if !market.IsFullMarketKey(q.GPU) {
			return fmt.Errorf("%w: --from book needs --gpu to be a full market key, like nvidia-h100-sxm5-80gb", errUsage)
		}
	default:
		return fmt.Errorf("%w: --from %q: want dht or book", errUsage, q.From)
	}
	c, err := client.Open(e.repo)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	offers, err := c.Offers(ctx, q)
	if err != nil {
		return err
	}
	if *verify && len(offers) > 0 {
		return printVerified(e, c, offers, attestTimeout)
	}
	if e.json {
		return printJSON(e.stdout, offers)
	}
	if len(offers) == 0 {
		fmt.Fprintln(e.stdout, "no offers match")
		return nil
	}
	printOffers(e, offers)
	return nil
}

func printOffers(e *env, offers []api.OfferView) {
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PROVIDER\tREGION\tGPUS\tFREE\tMEMORY/GPU\tVCPU+RAM/GPU\tPRICE/GPU-H\tATTESTATION")
	for _, o := range offers {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s %s\t%s\n", short(o.Provider), o.Region, gpuSummary(o.GPUs)+schedulerSummary(o), freeSummary(o), memSummary(o.GPUs),
			perGPUSummary(o.PerGPU), priceSummary(o), o.Currency, o.Attestation)
	}
	tw.Flush()
}

// schedulerSummary says, for a cluster's offer, who places its leases and
// over how many of its nodes one lease may spread.
func schedulerSummary(o api.OfferView) string {
	if o.Scheduler == "" {
		return ""
	}
	nodes := map[string]bool{}
	for _, g := range o.GPUs {
		nodes[g.Node] = true
	}
	return fmt.Sprintf(" on %s (%s; a lease spans up to %d)", plural(len(nodes), "node"), o.Scheduler, o.MaxNodes)
}

func short(id string) string {
	if len(id) > 16 {
		return id[:6] + "…" + id[len(id)-8:]
	}
	return id
}

func gpuSummary(gs []api.GPUSummary) string {
	count := map[string]int{}
	for _, g := range gs {
		count[g.Market]++
	}
	var parts []string
	for m, c := range count {
		parts = append(parts, fmt.Sprintf("%dx %s", c, m))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// priceSummary is the on-demand price now, and the next one with its time
// when the provider prices by time of day.
func priceSummary(o api.OfferView) string {
	if o.PriceNow == "" {
		return o.Price
	}
	if o.NextPriceAt != nil {
		return fmt.Sprintf("%s (%s from %s)", o.PriceNow, o.NextPrice, o.NextPriceAt.Format("15:04Z"))
	}
	return o.PriceNow
}

func perGPUSummary(p api.PerGPUView) string {
	if p.MilliCPUs == 0 && p.RAMBytes == 0 {
		return "-"
	}
	return fmt.Sprintf("%s vCPU + %s", strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%d.%03d", p.MilliCPUs/1000, p.MilliCPUs%1000), "0"), "."), gib(p.RAMBytes))
}

func memSummary(gs []api.GPUSummary) string {
	if len(gs) == 0 {
		return "-"
	}
	return gib(gs[0].MemoryBytes)
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func cmdDevnet(e *env, args []string) error {
	fs := flag.NewFlagSet("devnet", flag.ContinueOnError)
	providers := fs.Int("providers", 5, "`N` providers on simulated DGX machines")
	buyers := fs.Int("buyers", 3, "`M` buyers")
	keep := fs.Bool("keep", false, "keep running until Ctrl-C")
	timeout := fs.Duration("timeout", 50*time.Second, "fail if the scenario takes longer than `duration`")
	logLevel := fs.String("log-level", "warn", "nodes' log level: debug, info, warn or error")
	if err := parse(e, fs, args, 0); err != nil {
		return err
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("%w: --log-level: %v", errUsage, err)
	}
	if *providers < 1 || *providers > 200 || *buyers < 1 || *buyers > 200 {
		return fmt.Errorf("%w: --providers and --buyers must be 1..200", errUsage)
	}
	ctx, stop := signalContext()
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	start := time.Now()
	fmt.Fprintf(e.stdout, "starting devnet: %d providers, %d buyers on 127.0.0.1\n", *providers, *buyers)
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: lvl}))
	net, err := devnet.Start(ctx, devnet.Config{Providers: *providers, Buyers: *buyers, Logger: log})
	if err != nil {
		return err
	}
	defer net.Close()
	for i, p := range net.Providers {
		m := net.Machines[i]
		fmt.Fprintf(e.stdout, "  provider %d %s: %s in %s at %s %s/GPU-h\n", i, short(p.PeerID().String()), m.Model, m.Region, m.Price, m.Currency)
	}
	if err := net.WaitPublished(ctx); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "all %d offers published to the DHT (%.1fs)\n", *providers, time.Since(start).Seconds())
	searches := []struct {
		label string
		q     api.OfferQuery
	}{
		{"every offer", api.OfferQuery{}},
		{"H100, 8 GPUs, under 2.60 USD", api.OfferQuery{GPU: "h100", MinGPUs: 8, MaxPrice: "2.60"}},
		{"at least 140 GiB per GPU", api.OfferQuery{MinVRAMGiB: 140, Sort: "vram"}},
		{"cheap west compute (CN-NM)", api.OfferQuery{Region: "CN-NM"}},
		{"confidential-computing evidence", api.OfferQuery{CCAttested: true}},
	}
	for i, b := range net.Buyers {
		s := searches[i%len(searches)]
		if _, err := devnet.WaitFound(ctx, b, api.OfferQuery{}, *providers); err != nil {
			return fmt.Errorf("buyer %d: %w", i, err)
		}
		offers, err := b.Offers(ctx, s.q)
		if err != nil {
			return fmt.Errorf("buyer %d: %w", i, err)
		}
		fmt.Fprintf(e.stdout, "\nbuyer %d %s searches %s: %d offer(s)\n", i, short(b.PeerID().String()), s.label, len(offers))
		if e.json {
			printJSON(e.stdout, offers)
		} else if len(offers) > 0 {
			printOffers(e, offers)
		}
	}
	fmt.Fprintf(e.stdout, "\nevery buyer found every offer (%.1fs); now the order book:\n", time.Since(start).Seconds())
	tr, err := net.Trade(ctx)
	if err != nil {
		return err
	}
	for _, a := range tr.Asks {
		fmt.Fprintf(e.stdout, "  ask %s: %s of %s at %s %s (spot)\n", short(a.ID), plural(int(a.Count), "GPU"), a.Market, a.Price, a.Currency)
	}
	for _, b := range tr.Bids {
		res := b.Status
		for _, f := range b.Fills {
			res += fmt.Sprintf(", %d at %s from %s (lease %s)", f.Count, f.Price, short(f.Provider), short(f.Lease))
		}
		fmt.Fprintf(e.stdout, "  bid %s: %s of %s at %s %s: %s\n", short(b.ID), plural(int(b.Count), "GPU"), b.Market, b.Price, b.Currency, res)
	}
	ntrades := 0
	for _, bk := range tr.Books {
		ts := tr.Trades[bk.Market]
		ntrades += len(ts)
		var prices []string
		for i := len(ts) - 1; i >= 0; i-- {
			prices = append(prices, ts[i].Price)
		}
		if e.json {
			printJSON(e.stdout, map[string]any{"book": bk, "trades": ts})
			continue
		}
		fmt.Fprintf(e.stdout, "\n%s: %d trade(s) at %s; spot %s, index %s, best bid %s, best ask %s\n",
			bk.Market, len(ts), strings.Join(prices, " → "), dashIfEmpty(bk.Spot), dashIfEmpty(bk.Index), dashIfEmpty(bk.BestBid), dashIfEmpty(bk.BestAsk))
	}
	fmt.Fprintf(e.stdout, "\nleases of %s run with receipts every second; settling when all have closed...\n", devnet.LeaseDuration)
	stmts, err := net.Settle(ctx)
	if err != nil {
		return err
	}
	for _, st := range stmts {
		if e.json {
			printJSON(e.stdout, st)
			continue
		}
		fmt.Fprintf(e.stdout, "\nbuyer %s ↔ provider %s\n", short(st.Buyer), short(st.Provider))
		for _, l := range st.BuyerView.Leases {
			fmt.Fprintf(e.stdout, "  lease %s: %s, %.1f GPU-s, %s %s\n", short(l.Lease), plural(int(l.Receipts), "receipt"), float64(l.GPUMillis)/1000, l.Amount, l.Currency)
		}
		for i, t := range st.BuyerView.Totals {
			agree := "provider's ledger agrees"
			if i >= len(st.ProviderView.Totals) || st.ProviderView.Totals[i].OwedMicros != -t.OwedMicros {
				agree = "PROVIDER'S LEDGER DIFFERS"
			}
			fmt.Fprintf(e.stdout, "  buyer owes %s %s (%s)\n", market.FormatMicros(-t.OwedMicros, t.Currency), t.Currency, agree)
		}
	}
	// The round trip's last step: each provider acknowledges exactly what
	// it is owed, and both ledgers come to 0.
	paid, err := net.Pay(ctx, stmts)
	if err != nil {
		return err
	}
	if !e.json {
		fmt.Fprintf(e.stdout, "\nproviders acknowledge payment of exactly what is owed:\n")
		for i, st := range stmts {
			for _, t := range st.ProviderView.Totals {
				fmt.Fprintf(e.stdout, "  %s → %s: paid %s %s; both ledgers now owe %s\n", short(st.Buyer), short(st.Provider),
					t.Owed, t.Currency, owedNow(paid[i], t.Currency))
			}
		}
	}
	fmt.Fprintf(e.stdout, "\ndevnet ok: %d providers, %d buyers, %d trades, %d settled pairs (%.1fs)\n", *providers, *buyers, ntrades, len(stmts), time.Since(start).Seconds())
	if *keep {
		fmt.Fprintln(e.stdout, "running until Ctrl-C; bootstrap with:")
		for _, a := range net.Providers[0].Addrs() {
			fmt.Fprintf(e.stdout, "  --bootstrap %s\n", a)
		}
		printDevnetDashboards(e, net)
		cancel()
		ctx, stop := signalContext()
		defer stop()
		<-ctx.Done()
	}
	if err := net.Close(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// freeSummary is how many of the matching GPUs are free now, and when the
// next leased ones free up: "6 (2 at 12-03 15:04Z)".
func freeSummary(o api.OfferView) string {
	s := fmt.Sprint(o.FreeGPUs)
	var next *api.ReleaseView
	for _, c := range o.Capacity {
		for i := range c.Releases {
			if r := &c.Releases[i]; next == nil || r.At.Before(next.At) {
				next = r
			}
		}
	}
	if next != nil {
		s += fmt.Sprintf(" (%d at %s)", next.Count, next.At.UTC().Format("01-02 15:04Z"))
	}
	return s
}

// owedNow is what a paid statement's two ledgers owe in currency, "0" when
// they agree on nothing owed.
func owedNow(st devnet.Statement, currency string) string {
	for _, v := range []api.SettlementView{st.BuyerView, st.ProviderView} {
		for _, t := range v.Totals {
			if t.Currency == currency && t.OwedMicros != 0 {
				return market.FormatMicros(t.OwedMicros, currency) + " " + currency + " (NOT SETTLED)"
			}
		}
	}
	return "0 " + currency
}
