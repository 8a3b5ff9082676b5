package executor

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
)

// blockedEgress are the destinations a lease's containers may not reach
// unless the provider opens them: the private, shared, link-local (cloud
// metadata at 169.254.169.254) and other non-public IPv4 ranges, where the
// provider's LAN, its other tenants and its cloud's services live.
var blockedEgress = []string{
	"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
	"172.16.0.0/12", "192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15", "224.0.0.0/4", "240.0.0.0/4",
}

// firewall adds and removes a lease's packet filter rules with iptables,
// the same tool (and backend) the Docker Engine uses. Every rule carries
// the comment suanli-lease=<lease>, by which it is found again.
type firewall struct {
	bin, restore string
	mu           sync.Mutex
}

// newFirewall finds iptables and the DOCKER-USER chain the engine makes.
func newFirewall() (*firewall, error) {
	bin, err := exec.LookPath("iptables")
	if err != nil {
		return nil, errors.New("executor: iptables is not installed: a lease's containers cannot be kept from the host, the LAN and the cloud metadata address (install iptables, or open private egress)")
	}
	restore, err := exec.LookPath("iptables-restore")
	if err != nil {
		return nil, errors.New("executor: iptables-restore is not installed (it comes with iptables)")
	}
	f := &firewall{bin: bin, restore: restore}
	if _, err := f.run("-S", "DOCKER-USER"); err != nil {
		return nil, fmt.Errorf("executor: the engine's DOCKER-USER chain is missing (is the engine's iptables integration off?): %v", err)
	}
	return f, nil
}

func (f *firewall) run(args ...string) (string, error) {
	out, err := exec.Command(f.bin, append([]string{"-w", "5"}, args...)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("iptables %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// apply runs the rules (iptables arguments, -I/-D included) on the filter
// table in one transaction.
func (f *firewall) apply(rules [][]string) error {
	if len(rules) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("*filter\n")
	for _, r := range rules {
		for i, a := range r {
			if i > 0 {
				b.WriteByte(' ')
			}
			if strings.ContainsAny(a, " \"") || a == "" {
				a = `"` + strings.ReplaceAll(a, `"`, `\"`) + `"`
			}
			b.WriteString(a)
		}
		b.WriteByte('\n')
	}
	b.WriteString("COMMIT\n")
	cmd := exec.Command(f.restore, "-w", "5", "--noflush")
	cmd.Stdin = strings.NewReader(b.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("iptables-restore: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// bridgeName is the Linux bridge of a lease's network (at most 15 bytes).
func bridgeName(lease string) string {
	h := sha256.Sum256([]byte(lease))
	return "sl-" + hex.EncodeToString(h[:6])
}

func leaseComment(lease string) string { return "suanli-lease=" + leaseName(lease) }

// rules are the lease's rules, in the order they go in at the top of each
// chain: answers to connections made to the container (its published
// ports) pass; anything else from its bridge to the host is dropped, and
// to the blocked ranges unless private egress is open.
func leaseRules(lease string, openPrivate bool) [][]string {
	br, c := bridgeName(lease), leaseComment(lease)
	tag := []string{"-m", "comment", "--comment", c}
	rule := func(chain string, rest ...string) []string {
		return append(append([]string{chain, "-i", br}, rest...), tag...)
	}
	rs := [][]string{
		rule("INPUT", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"),
		rule("INPUT", "-j", "DROP"),
	}
	if !openPrivate {
		rs = append(rs, rule("DOCKER-USER", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "RETURN"))
		for _, cidr := range blockedEgress {
			rs = append(rs, rule("DOCKER-USER", "-d", cidr, "-j", "DROP"))
		}
	}
	return rs
}

// add puts the lease's rules at the top of their chains.
func (f *firewall) add(lease string, openPrivate bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var batch [][]string
	pos := map[string]int{}
	for _, r := range leaseRules(lease, openPrivate) {
		pos[r[0]]++
		batch = append(batch, append([]string{"-I", r[0], fmt.Sprint(pos[r[0]])}, r[1:]...))
	}
	if err := f.apply(batch); err != nil {
		return fmt.Errorf("%w: firewall: %v", ErrEngine, err)
	}
	return nil
}

// rulesOf lists the lease's rules as iptables -S prints them ("" lease:
// every lease's).
func (f *firewall) rulesOf(lease string) ([]string, error) {
	var out []string
	for _, chain := range []string{"INPUT", "DOCKER-USER"} {
		s, err := f.run("-S", chain)
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(s, "\n") {
			if lease == "" && strings.Contains(line, "suanli-lease=") || lease != "" && strings.Contains(line, leaseComment(lease)) {
				out = append(out, line)
			}
		}
	}
	return out, nil
}

// remove deletes every rule of the lease.
func (f *firewall) remove(lease string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	rules, err := f.rulesOf(lease)
	if err != nil {
		return err
	}
	var batch [][]string
	for _, r := range rules {
		if spec, ok := strings.CutPrefix(r, "-A "); ok {
			batch = append(batch, append([]string{"-D"}, splitRule(spec)...))
		}
	}
	return f.apply(batch)
}

// splitRule splits a rule as iptables -S prints it, with quoted words.
func splitRule(s string) []string {
	var out []string
	var cur strings.Builder
	quoted, any := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, any = !quoted, true
		case r == ' ' && !quoted:
			if any {
				out = append(out, cur.String())
			}
			cur.Reset()
			any = false
		default:
			cur.WriteRune(r)
			any = true
		}
	}
	if any {
		out = append(out, cur.String())
	}
	return out
}
