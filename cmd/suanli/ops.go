package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/suanli/suanli/gpu"
	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/client"
	"github.com/suanli/suanli/node/devnet"
)

// The operator's commands: dashboard, status, config, completion.

func cmdDashboard(e *env, args []string) error {
	fs := flag.NewFlagSet("dashboard", flag.ContinueOnError)
	readOnly := fs.Bool("read-only", false, "issue a new read-only token (for a screen on the wall) and print its URL")
	revoke := fs.Bool("revoke-read-only", false, "revoke every read-only token, then exit")
	if err := parse(e, fs, args, 0); err != nil {
		return err
	}
	if *readOnly && *revoke {
		return fmt.Errorf("%w: --read-only and --revoke-read-only conflict", errUsage)
	}
	if *revoke {
		if err := node.RevokeReadOnlyTokens(e.repo); err != nil {
			return err
		}
		fmt.Fprintln(e.stdout, "read-only tokens revoked")
		return nil
	}
	u, err := node.DashboardURL(e.repo, *readOnly)
	if err != nil {
		return err
	}
	if e.json {
		return printJSON(e.stdout, map[string]any{"url": u, "read_only": *readOnly})
	}
	fmt.Fprintln(e.stdout, u)
	return nil
}

func cmdStatus(e *env, args []string) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	if err := parse(e, fs, args, 0); err != nil {
		return err
	}
	c, err := client.Open(e.repo)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.Status(ctx)
	if err != nil {
		return err
	}
	if e.json {
		return printJSON(e.stdout, st)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	role := "provider and buyer"
	if !st.Provider {
		role = "buyer: " + st.NoGPUReason
	}
	fmt.Fprintf(tw, "node\t%s\n", st.ID)
	fmt.Fprintf(tw, "role\t%s\n", role)
	fmt.Fprintf(tw, "peers\t%d\n", st.Peers)
	markets := "none"
	if len(st.Markets) > 0 {
		markets = strings.Join(st.Markets, ", ")
	}
	fmt.Fprintf(tw, "markets joined\t%d: %s\n", len(st.Markets), markets)
	if st.Offer != nil {
		fmt.Fprintf(tw, "offer published\tseq %d: %s in %s at %s %s/GPU-h, expires %s\n", st.Offer.Seq, plural(int(st.Offer.GPUs), "GPU"), st.Offer.Region,
			st.Offer.Price, st.Offer.Currency, st.Offer.Expires.Local().Format(time.DateTime))
	} else if st.Provider {
		fmt.Fprintf(tw, "offer published\tnot yet\n")
	} else {
		fmt.Fprintf(tw, "offer published\tnone (no GPUs)\n")
	}
	fmt.Fprintf(tw, "open orders\t%d (of %d)\n", st.OpenOrders, st.Orders)
	fmt.Fprintf(tw, "running leases\t%d (of %d)\n", st.RunningLeases, st.Leases)
	if iso := st.Isolation; iso != nil {
		fmt.Fprintf(tw, "isolation\t%s\n", iso.Level)
		for _, e := range iso.Executors {
			for _, s := range e.Enforced {
				fmt.Fprintf(tw, "  %s (%s)\tenforced: %s\n", e.Executor, e.Level, s)
			}
			for _, s := range e.NotEnforced {
				fmt.Fprintf(tw, "  %s (%s)\tNOT enforced: %s\n", e.Executor, e.Level, s)
			}
		}
	}
	if len(st.Owed) == 0 {
		fmt.Fprintf(tw, "owed\tnothing\n")
	}
	for _, o := range st.Owed {
		switch {
		case o.OwedMicros > 0:
			fmt.Fprintf(tw, "owed\tpeers owe this node %s %s\n", o.Owed, o.Currency)
		case o.OwedMicros < 0:
			fmt.Fprintf(tw, "owed\tthis node owes peers %s %s\n", strings.TrimPrefix(o.Owed, "-"), o.Currency)
		default:
			fmt.Fprintf(tw, "owed\tsettled in %s\n", o.Currency)
		}
	}
	return tw.Flush()
}

func cmdConfig(e *env, args []string) error {
	if len(args) == 0 || (args[0] != "show" && args[0] != "set") {
		fs := flag.NewFlagSet("config", flag.ContinueOnError)
		if err := parse(e, fs, args, 0); err != nil {
			return err
		}
		return fmt.Errorf("%w: want config show [KEY] or config set KEY VALUE...", errUsage)
	}
	sub := args[0]
	fs := flag.NewFlagSet("config "+sub, flag.ContinueOnError)
	addGlobal(fs, e)
	fs.SetOutput(e.stderr)
	// Values may start with "/" or "-": take flags only before the key.
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	rest := fs.Args()
	cfg, err := node.LoadConfig(e.repo)
	if err != nil {
		return err
	}
	if sub == "show" {
		if len(rest) > 1 {
			return fmt.Errorf("%w: config show takes at most one key", errUsage)
		}
		if len(rest) == 1 {
			vals, err := cfg.Get(rest[0])
			if err != nil {
				return fmt.Errorf("%w: %v", errUsage, err)
			}
			if e.json {
				return printJSON(e.stdout, vals)
			}
			for _, v := range vals {
				fmt.Fprintln(e.stdout, v)
			}
			return nil
		}
		if e.json {
			return printJSON(e.stdout, cfg)
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
		for _, k := range node.ConfigKeys {
			vals, _ := cfg.Get(k)
			fmt.Fprintf(tw, "%s\t%s\n", k, strings.Join(vals, " "))
		}
		if err := cfg.Validate(); err != nil {
			fmt.Fprintf(tw, "\nINVALID\t%v\n", err)
		}
		return tw.Flush()
	}
	if len(rest) == 0 {
		return fmt.Errorf("%w: config set KEY VALUE... (keys: %s)", errUsage, strings.Join(node.ConfigKeys, ", "))
	}
	if err := cfg.Set(rest[0], rest[1:]); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if err := node.SaveConfig(e.repo, cfg); err != nil {
		return err
	}
	vals, _ := cfg.Get(rest[0])
	fmt.Fprintf(e.stdout, "%s = %s\n", rest[0], strings.Join(vals, " "))
	if _, err := client.ReadEndpoint(e.repo); err == nil {
		fmt.Fprintln(e.stdout, "a daemon runs on this repo: restart it for the change to take effect")
	}
	return nil
}

// printDevnetDashboards prints where the devnet's first provider and
// buyer serve their dashboards, and the repos to point the CLI at.
func printDevnetDashboards(e *env, net *devnet.Net) {
	fmt.Fprintln(e.stdout, "dashboards (or `suanli --repo REPO dashboard`):")
	for _, nd := range []struct {
		role string
		n    *node.Node
	}{{"provider 0", net.Providers[0]}, {"buyer 0", net.Buyers[0]}} {
		u, err := node.DashboardURL(nd.n.Repo(), false)
		if err != nil {
			fmt.Fprintf(e.stdout, "  %s: %v\n", nd.role, err)
			continue
		}
		fmt.Fprintf(e.stdout, "  %s: %s\n    repo %s\n", nd.role, u, nd.n.Repo())
	}
}

// subcommands are the words some commands take first.
var subcommands = map[string][]string{
	"lease":      {"show", "close"},
	"receipts":   {"verify", "export"},
	"evidence":   {"export", "verify"},
	"settle":     {"ack"},
	"config":     {"show", "set"},
	"completion": {"bash", "zsh", "fish"},
}

// commandFlags lists a command's flags by asking it for its -h text, so
// completion never drifts from the flags the commands define.
func commandFlags(c command) []string {
	var buf bytes.Buffer
	e := &env{stdout: io.Discard, stderr: &buf}
	c.run(e, []string{"-h"})
	var out []string
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(l, "-") {
			continue
		}
		name := strings.TrimPrefix(l, "-")
		if i := strings.IndexAny(name, " \t"); i >= 0 {
			name = name[:i]
		}
		switch {
		case name == "" || strings.HasPrefix(name, "-"):
		case len(name) == 1:
			out = append(out, "-"+name)
		default:
			out = append(out, "--"+name)
		}
	}
	sort.Strings(out)
	return out
}

func cmdCompletion(e *env, args []string) error {
	fs := flag.NewFlagSet("completion", flag.ContinueOnError)
	if err := parse(e, fs, args, 1); err != nil {
		return err
	}
	var names []string
	flagsOf := map[string][]string{}
	for _, c := range commands {
		names = append(names, c.name)
		if c.name != "completion" {
			flagsOf[c.name] = commandFlags(c)
		}
	}
	switch e.args[0] {
	case "bash":
		return completionBash(e.stdout, names, flagsOf)
	case "zsh":
		return completionZsh(e.stdout, names, flagsOf)
	case "fish":
		return completionFish(e.stdout, names, flagsOf)
	}
	return fmt.Errorf("%w: shell %q: want bash, zsh or fish", errUsage, e.args[0])
}

func completionBash(w io.Writer, names []string, flagsOf map[string][]string) error {
	fmt.Fprintf(w, `# bash completion for suanli: source <(suanli completion bash)
_suanli() {
  local cur cmd i
  cur="${COMP_WORDS[COMP_CWORD]}"
  cmd=""
  for ((i = 1; i < COMP_CWORD; i++)); do
    case "${COMP_WORDS[i]}" in
      --repo) ((i++)) ;;
      -*) ;;
      *) cmd="${COMP_WORDS[i]}"; break ;;
    esac
  done
  if [[ -z "$cmd" ]]; then
    COMPREPLY=($(compgen -W "%s --repo --json" -- "$cur"))
    return
  fi
  local prev="${COMP_WORDS[COMP_CWORD-1]}"
  case "$prev" in
%s
  esac
  if [[ "$cur" != -* ]]; then
    local kind=""
    case "$cmd" in
%s
    esac
    if [[ -n "$kind" ]]; then
      COMPREPLY=($(compgen -W "$(suanli __complete "$kind" 2>/dev/null) $(_suanli_sub "$cmd")" -- "$cur"))
      return
    fi
  fi
  local words=""
  case "$cmd" in
`, strings.Join(names, " "), bashValueCases(), bashPositionalCases())
	for _, n := range names {
		words := append(append([]string{}, subcommands[n]...), flagsOf[n]...)
		fmt.Fprintf(w, "    %s) words=%q ;;\n", n, strings.Join(words, " "))
	}
	fmt.Fprintf(w, `  esac
  COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
_suanli_sub() {
  case "$1" in
%s
  esac
}
complete -o default -F _suanli suanli
`, bashSubCases())
	return nil
}

// Values completed after a flag: fixed lists in the script, and what the
// daemon knows (markets, leases, orders) from `suanli __complete KIND`.
var flagValues = []struct{ flag, fixed, kind string }{
	{"--gpu-sim", strings.Join(gpu.SimModels(), " "), ""},
	{"--type", "spot on-demand reserved", ""},
	{"--executor", "reserve process docker", ""},
	{"--log-level", "debug info warn error", ""},
	{"--sort", strings.Join(market.OfferSorts, " "), ""},
	{"--gpu", "", "markets"},
	{"--resell", "", "leases"},
}

// positionalKinds are what a command's first argument names.
var positionalKinds = map[string]string{
	"book": "markets", "trades": "markets", "logs": "leases", "lease": "leases",
	"receipts": "leases", "cancel": "orders", "order": "orders",
}

func bashValueCases() string {
	var b strings.Builder
	for _, v := range flagValues {
		if v.kind != "" {
			fmt.Fprintf(&b, "    %s) COMPREPLY=($(compgen -W \"$(suanli __complete %s 2>/dev/null)\" -- \"$cur\")); return ;;\n", v.flag, v.kind)
		} else {
			fmt.Fprintf(&b, "    %s) COMPREPLY=($(compgen -W %q -- \"$cur\")); return ;;\n", v.flag, v.fixed)
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

func bashPositionalCases() string {
	var b strings.Builder
	for _, c := range commands {
		if k, ok := positionalKinds[c.name]; ok {
			fmt.Fprintf(&b, "      %s) kind=%s ;;\n", c.name, k)
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

func bashSubCases() string {
	var b strings.Builder
	for _, c := range commands {
		if subs, ok := subcommands[c.name]; ok {
			fmt.Fprintf(&b, "    %s) echo %q ;;\n", c.name, strings.Join(subs, " "))
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// cmdComplete is the hidden `suanli __complete KIND`: the values a
// completion script offers, one a line, from the running daemon (markets
// joined or offered, lease IDs, open order IDs). Nothing when no daemon
// answers; it never fails loudly.
func cmdComplete(e *env, args []string) error {
	if len(args) != 1 {
		return nil
	}
	c, err := client.Open(e.repo)
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var out []string
	switch args[0] {
	case "markets":
		if ms, err := c.Markets(ctx); err == nil {
			for _, m := range ms {
				out = append(out, m.Market)
			}
		}
		if os, err := c.Offers(ctx, api.OfferQuery{}); err == nil {
			for _, o := range os {
				for _, g := range o.GPUs {
					out = append(out, g.Market)
				}
			}
		}
	case "leases":
		if ls, err := c.Leases(ctx); err == nil {
			for _, l := range ls {
				out = append(out, l.ID)
			}
		}
	case "orders":
		if os, err := c.Orders(ctx); err == nil {
			for _, o := range os {
				if o.Status == "resting" {
					out = append(out, o.ID)
				}
			}
		}
	}
	slices.Sort(out)
	for _, v := range slices.Compact(out) {
		fmt.Fprintln(e.stdout, v)
	}
	return nil
}

func completionZsh(w io.Writer, names []string, flagsOf map[string][]string) error {
	fmt.Fprintf(w, `#compdef suanli
# zsh completion for suanli: suanli completion zsh > "${fpath[1]}/_suanli"
_suanli() {
  local -a cmds
  cmds=(
`)
	for _, c := range commands {
		fmt.Fprintf(w, "    %q\n", c.name+":"+strings.ReplaceAll(c.summary, ":", `\:`))
	}
	fmt.Fprintf(w, `  )
  if (( CURRENT == 2 )); then
    _describe 'command' cmds
    return
  fi
  case "$words[CURRENT-1]" in
`)
	for _, v := range flagValues {
		if v.kind != "" {
			fmt.Fprintf(w, "    %s) compadd -- ${(f)\"$(suanli __complete %s 2>/dev/null)\"}; return ;;\n", v.flag, v.kind)
		} else {
			fmt.Fprintf(w, "    %s) compadd -- %s; return ;;\n", v.flag, v.fixed)
		}
	}
	fmt.Fprintf(w, `  esac
  case "$words[2]" in
`)
	for _, n := range names {
		ws := append(append([]string{}, subcommands[n]...), flagsOf[n]...)
		values := ""
		if k, ok := positionalKinds[n]; ok {
			values = fmt.Sprintf(` ${(f)"$(suanli __complete %s 2>/dev/null)"}`, k)
		}
		fmt.Fprintf(w, "    %s) compadd -- %s%s ;;\n", n, strings.Join(ws, " "), values)
	}
	fmt.Fprintf(w, `  esac
}
compdef _suanli suanli
`)
	return nil
}

func completionFish(w io.Writer, names []string, flagsOf map[string][]string) error {
	fmt.Fprintf(w, "# fish completion for suanli: suanli completion fish > ~/.config/fish/completions/suanli.fish\n")
	fmt.Fprintf(w, "complete -c suanli -f\n")
	fmt.Fprintf(w, "complete -c suanli -l repo -r -d 'node repo dir'\ncomplete -c suanli -l json -d 'machine-readable output'\n")
	for _, c := range commands {
		fmt.Fprintf(w, "complete -c suanli -n '__fish_use_subcommand' -a %s -d %s\n", c.name, fishQuote(c.summary))
	}
	for _, n := range names {
		for _, s := range subcommands[n] {
			fmt.Fprintf(w, "complete -c suanli -n '__fish_seen_subcommand_from %s' -a %s\n", n, s)
		}
		if k, ok := positionalKinds[n]; ok {
			fmt.Fprintf(w, "complete -c suanli -n '__fish_seen_subcommand_from %s' -a '(suanli __complete %s 2>/dev/null)'\n", n, k)
		}
		for _, f := range flagsOf[n] {
			if long, ok := strings.CutPrefix(f, "--"); ok {
				values := ""
				for _, v := range flagValues {
					if v.flag == f && v.kind != "" {
						values = fmt.Sprintf(" -x -a '(suanli __complete %s 2>/dev/null)'", v.kind)
					} else if v.flag == f {
						values = fmt.Sprintf(" -x -a %s", fishQuote(v.fixed))
					}
				}
				fmt.Fprintf(w, "complete -c suanli -n '__fish_seen_subcommand_from %s' -l %s%s\n", n, long, values)
			} else {
				fmt.Fprintf(w, "complete -c suanli -n '__fish_seen_subcommand_from %s' -o %s\n", n, strings.TrimPrefix(f, "-"))
			}
		}
	}
	return nil
}

func fishQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `\'`) + "'" }
