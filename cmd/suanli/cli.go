package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/client"
	"github.com/suanli/suanli/node/keystore"
	"github.com/suanli/suanli/p2p"
)

// errUsage marks a misuse of the command line: usage is printed, exit 2.
var errUsage = errors.New("usage")

type env struct {
	// stdout and stderr show remote strings safely (termSafe); raw is
	// the unfiltered pair, for `logs --raw`.
	stdout, stderr io.Writer
	rawOut, rawErr io.Writer
	repo           string
	json           bool
	args           []string // positional arguments of the command, after parse
}

type command struct {
	name, args, summary string
	run                 func(e *env, args []string) error
}

var commands []command

func init() {
	commands = []command{
		{"init", "", "create the repo: identity key and config", cmdInit},
		{"daemon", "[flags]", "run the node: provider with GPUs, buyer always", cmdDaemon},
		{"id", "", "peer ID and listen addresses", cmdID},
		{"gpus", "[--gpu-sim MODEL]", "the local GPU inventory that would be offered", cmdGPUs},
		{"offers", "[filters]", "search the network for GPU offers", cmdOffers},
		{"peers", "", "connected peers", cmdPeers},
		{"ask", "--gpu MARKET --count N --price DECIMAL [flags]", "offer GPU time on the order book (providers)", cmdAsk},
		{"bid", "--gpu MARKET --count N --price DECIMAL --duration D [flags]", "bid for GPU time; --wait to follow it", cmdBid},
		{"book", "MARKET", "depth ladder, spread, spot price and index", cmdBook},
		{"orders", "", "this node's orders", cmdOrders},
		{"cancel", "ORDER-ID", "withdraw a resting order", cmdCancel},
		{"trades", "MARKET", "recent trades in a market", cmdTrades},
		{"leases", "", "leases this node is party to", cmdLeases},
		{"lease", "show|close ID", "one lease; close ends it early", cmdLease},
		{"logs", "LEASE [-f]", "output of a lease's command (buyer)", cmdLogs},
		{"receipts", "LEASE | verify LEASE|--file F | export LEASE", "a lease's receipt chain", cmdReceipts},
		{"settle", "[--peer P] [--csv] | ack --peer P --amount X", "what is owed, per peer and lease; acknowledge payments", cmdSettle},
		{"evidence", "[--peer P] | export ID | verify --file F", "signed misbehaviour kept: equivocating receipts, refused fills", cmdEvidence},
		{"attest", "PEER [--timeout D]", "challenge a provider to prove its GPUs (confidential computing)", cmdAttest},
		{"devnet", "[--providers N] [--buyers M] [--keep]", "run a whole local market on simulated GPUs", cmdDevnet},
		{"dashboard", "[--read-only | --revoke-read-only]", "print the web dashboard's URL with a login token", cmdDashboard},
		{"status", "", "one screen: peers, markets, offer, open orders, running leases, what is owed", cmdStatus},
		{"config", "show [KEY] | set KEY VALUE...", "show or change the repo's config, validated", cmdConfig},
		{"completion", "bash|zsh|fish", "print a shell completion script", cmdCompletion},
		{"simnet", "[--nodes N] [--regions R] [--json]", "simulate a many-region network on mocknet, measured against raw libp2p", cmdSimnet},
		{"version", "", "print the version", cmdVersion},
	}
}

const version = "suanli 0.1.0"

func cmdVersion(e *env, args []string) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	if err := parse(e, fs, args, 0); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, version)
	return nil
}

func usage(w io.Writer) {
	fmt.Fprintf(w, `suanli: a peer-to-peer market for GPU time

Usage: suanli [--repo DIR] [--json] COMMAND [flags]

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, `
Global flags (before or after the command):
  --repo DIR   node repo (default $SUANLI_REPO or ~/.suanli)
  --json       machine-readable output

Run 'suanli COMMAND -h' for a command's flags.
`)
}

func run(args []string, stdout, stderr io.Writer) int {
	out, errw := newTermSafe(stdout, false), newTermSafe(stderr, false)
	defer out.Flush()
	defer errw.Flush()
	e := &env{stdout: out, stderr: errw, rawOut: stdout, rawErr: stderr}
	stdout, stderr = out, errw
	global := flag.NewFlagSet("suanli", flag.ContinueOnError)
	global.SetOutput(io.Discard)
	addGlobal(global, e)
	if err := global.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return 0
		}
		fmt.Fprintf(stderr, "suanli: %v\n\n", err)
		usage(stderr)
		return 2
	}
	rest := global.Args()
	if len(rest) == 0 {
		usage(stderr)
		return 2
	}
	name := rest[0]
	if name == "help" {
		if len(rest) == 1 {
			usage(stdout)
			return 0
		}
		// help CMD [SUB] is CMD [SUB] -h.
		name, rest = rest[1], append(append([]string{rest[1]}, rest[2:]...), "-h")
	}
	if name == "__complete" { // for the completion scripts (ops.go)
		cmdComplete(e, rest[1:])
		return 0
	}
	for _, c := range commands {
		if c.name != name {
			continue
		}
		err := c.run(e, rest[1:])
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errUsage):
			fmt.Fprintf(stderr, "suanli %s: %v\n", name, strings.TrimPrefix(err.Error(), "usage: "))
			fmt.Fprintf(stderr, "usage: suanli %s %s (see 'suanli %s -h')\n", name, c.args, name)
			return 2
		default:
			fmt.Fprintf(stderr, "suanli %s: %v\n", name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "suanli: unknown command %q\n\n", name)
	usage(stderr)
	return 2
}

func addGlobal(fs *flag.FlagSet, e *env) {
	def := os.Getenv("SUANLI_REPO")
	if def == "" {
		if home, err := os.UserHomeDir(); err == nil {
			def = filepath.Join(home, ".suanli")
		}
	}
	if e.repo == "" {
		e.repo = def
	}
	fs.StringVar(&e.repo, "repo", e.repo, "node repo `dir`")
	fs.BoolVar(&e.json, "json", e.json, "machine-readable output")
}

// parse parses a command's flags (the global ones too) and checks the
// number of positional arguments.
func parse(e *env, fs *flag.FlagSet, args []string, positional int) error {
	addGlobal(fs, e)
	// A misuse is one line (run prints it with the command's synopsis);
	// the flags' list is for -h.
	fs.SetOutput(io.Discard)
	// Flags may come before or after positional arguments (book MARKET
	// --json); everything after "--" is positional.
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.SetOutput(e.stderr)
				fs.Usage()
				return err
			}
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		rest := fs.Args()
		consumed := args[:len(args)-len(rest)]
		if len(consumed) > 0 && consumed[len(consumed)-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		if len(rest) == 0 {
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	if len(pos) != positional {
		return fmt.Errorf("%w: want %d argument(s), got %d: %q", errUsage, positional, len(pos), pos)
	}
	e.args = pos
	return nil
}

// optInt64 is a whole-number flag that may be left unset, so -h shows the
// default its help text states, not a sentinel.
type optInt64 struct {
	v   int64
	set bool
}

func (o *optInt64) String() string {
	if o == nil || !o.set {
		return ""
	}
	return strconv.FormatInt(o.v, 10)
}

func (o *optInt64) Set(s string) error {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return errors.New("want a whole number")
	}
	o.v, o.set = v, true
	return nil
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

func passphrase(file string) ([]byte, error) {
	return keystore.Passphrase("SUANLI_PASSPHRASE", file)
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func cmdInit(e *env, args []string) error {
	fs := flag.NewFlagSet("init", flag.ContinueOnError)
	passFile := fs.String("passphrase-file", "", "encrypt the key with the passphrase in `file` (or set SUANLI_PASSPHRASE)")
	stampBits := fs.Int("stamp-bits", p2p.DefaultStampBits, "grind the identity's maker stamp to this many leading zero `bits` (0: let the daemon grind it)")
	if err := parse(e, fs, args, 0); err != nil {
		return err
	}
	pass, err := passphrase(*passFile)
	if err != nil {
		return err
	}
	key, err := node.InitRepo(e.repo, node.DefaultConfig(), pass)
	if err != nil {
		return err
	}
	id, _ := peer.IDFromPrivateKey(key)
	if *stampBits > 0 {
		// Once per identity, so the daemon's orders are stamped from its
		// first start (it grinds in the background when there is none).
		if _, err := node.GrindStamp(context.Background(), e.repo, id, *stampBits); err != nil {
			return err
		}
	}
	if e.json {
		return printJSON(e.stdout, map[string]any{"id": id.String(), "repo": e.repo, "encrypted": len(pass) > 0})
	}
	fmt.Fprintf(e.stdout, "initialized repo %s\npeer ID %s\n", e.repo, id)
	if len(pass) == 0 {
		fmt.Fprintln(e.stdout, "the identity key is not encrypted; set SUANLI_PASSPHRASE or --passphrase-file to encrypt it")
	}
	return nil
}

func cmdDaemon(e *env, args []string) error {
	fs := flag.NewFlagSet("daemon", flag.ContinueOnError)
	var listen, boot listFlag
	fs.Var(&listen, "listen", "listen `multiaddr` (repeatable; default from config: loopback)")
	fs.Var(&boot, "bootstrap", "bootstrap peer `multiaddr` ending in /p2p/<id> (repeatable)")
	api := fs.String("api", "", "local API `host:port` or unix:/path (default from config: 127.0.0.1:0)")
	sim := fs.String("gpu-sim", "", "simulate a `model`: dgxa100, dgxb200, dgxh100, dgxh200")
	seed := fs.Int64("gpu-seed", 1, "simulated telemetry `seed`")
	noGPU := fs.Bool("no-gpu", false, "do not probe NVML: buyer only")
	region := fs.String("region", "", "provider region `code`, e.g. CN-GZ (default from config)")
	price := fs.String("price", "", "on-demand price per GPU-hour, a `decimal` (default from config)")
	currency := fs.String("currency", "", "price `currency` (default from config: USD)")
	ttl := fs.Duration("offer-ttl", time.Hour, "offer lifetime; republished at a third of it")
	passFile := fs.String("passphrase-file", "", "passphrase `file` for an encrypted key")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	billing := fs.Duration("billing-interval", 0, "meter leases and send receipts this often (default 1m)")
	var xf execFlags
	xf.register(fs)
	var sf slurmFlags
	sf.register(fs)
	creditLimit := fs.String("credit-limit", "", "most a buyer may owe unpaid, a `decimal` in the price currency, or none (default from config: "+node.DefaultCreditLimit+")")
	stampBits := fs.Int("stamp-bits", p2p.DefaultStampBits, "work of the maker stamp this node grinds (once, kept in the repo) and asks of other makers, in leading zero `bits`; the network's setting: sync and reconciliation carry no weaker stamp's orders")
	logCap := fs.Int64("log-cap", node.DefaultLogCap>>20, "keep at most `MiB` of each lease's workload output (the newest)")
	creditNew := fs.String("credit-new", "", "credit of a buyer with no paid history, a `decimal` in the price currency, growing with its payments up to --credit-limit (default from config: "+node.DefaultCreditNew+")")
	if err := parse(e, fs, args, 0); err != nil {
		return err
	}
	if *logCap < 1 || *logCap > 1<<20 {
		return fmt.Errorf("%w: --log-cap %d: want 1 to 1048576 MiB", errUsage, *logCap)
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("%w: --log-level: %v", errUsage, err)
	}
	if *sim != "" && *noGPU {
		return fmt.Errorf("%w: --gpu-sim and --no-gpu conflict", errUsage)
	}
	pass, err := passphrase(*passFile)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: lvl}))
	opts := []node.Option{node.WithRepo(e.repo), node.WithAutoInit(), node.WithPassphrase(pass), node.WithLogger(log), node.WithOfferTTL(*ttl)}
	if len(listen) > 0 {
		opts = append(opts, node.WithListen(listen...))
	}
	if len(boot) > 0 {
		opts = append(opts, node.WithBootstrap(boot...))
	}
	if *api != "" {
		opts = append(opts, node.WithAPI(*api))
	}
	if *sim != "" {
		opts = append(opts, node.WithGPUSim(*sim, *seed))
	}
	if *noGPU {
		opts = append(opts, node.WithoutGPU())
	}
	if *billing != 0 {
		opts = append(opts, node.WithBillingInterval(*billing))
	}
	if *creditLimit != "" {
		opts = append(opts, node.WithCreditLimit(*creditLimit, *currency))
	}
	opts = append(opts, node.WithLogCap(*logCap<<20), node.WithStampBits(*stampBits))
	if *creditNew != "" {
		opts = append(opts, node.WithCreditNew(*creditNew))
	}
	xopts, err := xf.options(*sim != "")
	if err != nil {
		return err
	}
	opts = append(opts, xopts...)
	sopts, err := sf.options(*sim != "" || *noGPU)
	if err != nil {
		return err
	}
	opts = append(opts, sopts...)
	if *region != "" {
		opts = append(opts, node.WithRegion(*region))
	}
	if *price != "" || *currency != "" {
		cfg, err := node.LoadConfig(e.repo)
		if err != nil && !errors.Is(err, node.ErrNotInitialized) {
			return err
		}
		p, c := *price, *currency
		if p == "" {
			p = cmpOr(cfg.Price, "2.50")
		}
		if c == "" {
			c = cmpOr(cfg.Currency, "USD")
		}
		opts = append(opts, node.WithPrice(p, c))
	}
	ctx, stop := signalContext()
	defer stop()
	n, err := node.New(opts...)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "suanli daemon %s\n", n.PeerID())
	for _, a := range n.Addrs() {
		fmt.Fprintf(e.stdout, "listening on %s\n", a)
	}
	fmt.Fprintf(e.stdout, "API on %s\n", n.APIAddr())
	if !n.IsProvider() {
		info, _ := n.ID(ctx)
		fmt.Fprintf(e.stdout, "no GPUs to offer (%s): running as a buyer\n", info.NoGPUReason)
	}
	<-ctx.Done()
	fmt.Fprintln(e.stdout, "shutting down")
	return n.Close()
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func cmdID(e *env, args []string) error {
	fs := flag.NewFlagSet("id", flag.ContinueOnError)
	passFile := fs.String("passphrase-file", "", "passphrase `file` for an encrypted key (when no daemon runs)")
	if err := parse(e, fs, args, 0); err != nil {
		return err
	}
	var info api.IDInfo
	c, err := client.Open(e.repo)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if info, err = c.ID(ctx); err != nil {
			return err
		}
	} else if errors.Is(err, client.ErrNoDaemon) {
		// No daemon: the ID from the key, with no addresses.
		pass, err := passphrase(*passFile)
		if err != nil {
			return err
		}
		if !node.IsInitialized(e.repo) {
			return fmt.Errorf("%w at %s: run `suanli init`", node.ErrNotInitialized, e.repo)
		}
		key, err := node.LoadKey(e.repo, pass)
		if err != nil {
			return err
		}
		id, _ := peer.IDFromPrivateKey(key)
		info = api.IDInfo{ID: id.String(), Addrs: []string{}}
	} else {
		return err
	}
	if e.json {
		return printJSON(e.stdout, map[string]any{"id": info.ID, "addrs": info.Addrs})
	}
	fmt.Fprintln(e.stdout, info.ID)
	for _, a := range info.Addrs {
		fmt.Fprintln(e.stdout, a)
	}
	return nil
}

func cmdPeers(e *env, args []string) error {
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	if err := parse(e, fs, args, 0); err != nil {
		return err
	}
	c, err := client.Open(e.repo)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	peers, err := c.Peers(ctx)
	if err != nil {
		return err
	}
	sort.Slice(peers, func(i, j int) bool { return peers[i].ID < peers[j].ID })
	if e.json {
		return printJSON(e.stdout, peers)
	}
	for _, p := range peers {
		fmt.Fprintf(e.stdout, "%s %s\n", p.ID, strings.Join(p.Addrs, " "))
	}
	return nil
}
