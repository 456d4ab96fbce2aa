package classify_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/classify"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"github.com/iptables-alerter/iptables-alerter/lib/netns"
	"github.com/iptables-alerter/iptables-alerter/lib/render"
)

// saveTools are the save tools whose listing is the truth for counts, by
// the family they list.
var saveTools = []struct {
	fam  inspect.Family
	tool string
}{{inspect.IP, "iptables-nft-save"}, {inspect.IP6, "ip6tables-nft-save"}, {inspect.ARP, "arptables-nft-save"}, {inspect.Bridge, "ebtables-nft-save"}}

// saved is what the save tools list: per "family table", the ":" lines
// (chains) and the -A lines (rules); failed names the tools that exited
// non-zero (ebtables-nft-save 1.8.9 crashes on some rules).
type saved struct {
	tables map[string]findings.TableCount
	failed map[inspect.Family]bool
	// lookups counts per table the rules the save tools list but misread:
	// a set lookup outside the bridge family (iptables-nft writes none;
	// "tcp dport { 22, 80 } accept" is listed as "-p tcp -j ACCEPT"). By
	// the criterion they are native, so they are taken from the -A lines.
	lookups map[string]int
	// refused names the tables whose base chains the save tools call
	// incompatible: they list the user chains' rules but not the table as
	// iptables', and it is native by the criterion.
	refused map[string]bool
}

func save(t *testing.T, ns *nstest.NS) saved {
	t.Helper()
	s := saved{tables: map[string]findings.TableCount{}, failed: map[inspect.Family]bool{}, lookups: map[string]int{}, refused: map[string]bool{}}
	perChain := map[string]int{}
	lookups := map[string]int{}
	var js struct {
		Nftables []struct {
			Rule *struct {
				Family, Table, Chain string
				Expr                 []json.RawMessage
			}
		}
	}
	if err := json.Unmarshal([]byte(ns.Run("nft", "-j", "list", "ruleset")), &js); err != nil {
		t.Fatalf("nft -j list ruleset: %v", err)
	}
	for _, o := range js.Nftables {
		if o.Rule == nil || o.Rule.Family == "bridge" {
			continue
		}
		for _, e := range o.Rule.Expr {
			if m := string(e); strings.Contains(m, `"right": {"set"`) || strings.Contains(m, `"right": "@`) {
				lookups[o.Rule.Family+" "+o.Rule.Table+" "+o.Rule.Chain]++
				break
			}
		}
	}
	for _, st := range saveTools {
		out, err := exec.Command("ip", "netns", "exec", ns.Name, st.tool).Output()
		if err != nil {
			s.failed[st.fam] = true
			continue
		}
		table := ""
		for _, line := range strings.Split(string(out), "\n") {
			switch {
			case strings.HasPrefix(line, "# Table `") && strings.Contains(line, "incompatible base-chains"):
				name, _, _ := strings.Cut(strings.TrimPrefix(line, "# Table `"), "'")
				s.refused[string(st.fam)+" "+name] = true
			case strings.HasPrefix(line, "*"):
				table = string(st.fam) + " " + strings.TrimSpace(line[1:])
				s.tables[table] = findings.TableCount{Table: table}
			case strings.HasPrefix(line, ":"):
				c := s.tables[table]
				c.Chains++
				s.tables[table] = c
			case strings.HasPrefix(line, "-A "):
				c := s.tables[table]
				c.Rules++
				s.tables[table] = c
				perChain[table+" "+strings.Fields(line)[1]]++
			}
		}
	}
	// Only the lines the save tools print can be misread ones.
	for k, n := range lookups {
		f := strings.Fields(k)
		s.lookups[f[0]+" "+f[1]] += min(n, perChain[k])
	}
	return s
}

// look inspects the namespace as the hook does and classifies it.
func look(t *testing.T, ns *nstest.NS) classify.Usage {
	t.Helper()
	h, err := netns.Open(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := inspect.Inspect(ctx, h, inspect.Options{Detail: classify.Candidate, First: classify.IPTablesTable,
		Native: classify.Native, LegacyInProcess: true, MaxDetail: 1 << 20, MaxDetailBytes: 1 << 28})
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	return classify.Classify(s)
}

// compare checks every table the save tools list with rules, and every
// table the summary counts, against each other.
func compare(t *testing.T, sum classify.Summary, sv saved) {
	t.Helper()
	ours := map[string]findings.TableCount{}
	for _, pt := range sum.NftPerTable {
		ours[pt.Table] = pt
	}
	keys := map[string]bool{}
	for k := range ours {
		keys[k] = true
	}
	for k, c := range sv.tables {
		if c.Rules > 0 {
			keys[k] = true
		}
	}
	var names []string
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if sv.failed[inspect.Family(strings.Fields(k)[0])] {
			t.Logf("%s: the save tool failed, not compared", k)
			continue
		}
		want := sv.tables[k]
		want.Table = k
		want.Rules -= sv.lookups[k]
		if sv.refused[k] {
			want = findings.TableCount{}
		}
		if d := cmp.Diff(want, ours[k]); d != "" {
			t.Errorf("%s (-save +ours):\n%s", k, d)
		}
	}
}

// repoRoot is the directory holding go.mod above the test's directory.
func repoRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for ; dir != "/"; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
	}
	t.Fatal("no go.mod above the test")
	return ""
}

// TestCorpusPerTable loads every ruleset of the shared corpus
// (../shared/corpus from the repository root, written by other projects)
// into a fresh netns the way ../shared/corpus/check does, and checks that
// each table's counts equal what the real save tools list: rules are its
// -A lines, chains its ":" lines. Rulesets run in parallel, GOMAXPROCS at a
// time: all 351 took 11 to 28 s at load 30 on two cores.
func TestCorpusPerTable(t *testing.T) {
	nstest.NeedRoot(t, "nft", "iptables-nft-save", "ip6tables-nft-save", "arptables-nft-save", "ebtables-nft-save", "ipset", "nfacct")
	dir := filepath.Join(repoRoot(t), "..", "shared", "corpus")
	entries, err := os.ReadDir(dir)
	nstest.Need(t, err == nil, "needs the corpus at "+dir)
	n := 0
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || strings.HasPrefix(name, "_") || strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".md") ||
			strings.HasSuffix(name, ".tsv") || strings.HasSuffix(name, ".py") || name == "check" {
			continue
		}
		n++
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ns := nstest.New(t)
			loadCorpus(t, ns, filepath.Join(dir, name))
			sv := save(t, ns)
			compare(t, classify.Summarize(look(t, ns)), sv)
		})
	}
	nstest.Need(t, n > 0, "needs rulesets in "+dir)
}

// loadCorpus feeds each "#@ LOADER [ARGS]" section of a corpus file to its
// loader in the namespace (the corpus README lists the loaders).
func loadCorpus(t *testing.T, ns *nstest.NS, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type section struct {
		argv []string
		body strings.Builder
	}
	var secs []*section
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#@ ") {
			secs = append(secs, &section{argv: strings.Fields(line[3:])})
		} else if len(secs) > 0 {
			secs[len(secs)-1].body.WriteString(line + "\n")
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, s := range secs {
		body := s.body.String()
		switch tool := s.argv[0]; tool {
		case "iptables-nft", "ip6tables-nft", "iptables-legacy", "ip6tables-legacy", "arptables-nft", "ebtables-nft":
			// One argv a line, shell-quoted.
			for _, l := range strings.Split(body, "\n") {
				if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
					ns.Run("sh", "-c", tool+" "+l)
				}
			}
		case "dummy", "nfacct":
			for _, w := range strings.Fields(body) {
				if tool == "dummy" {
					ns.Run("ip", "link", "add", w, "type", "bridge")
				} else {
					ns.Run("nfacct", "add", w)
				}
			}
		case "nft":
			ns.Restore(body, "nft", "-f", "-")
		case "ipset":
			ns.Restore(body, "ipset", "restore")
		default:
			ns.Restore(body, s.argv...)
		}
	}
}

// The cases, each in a fresh netns, against the real save tools.
func TestNativeAndMixed(t *testing.T) {
	nstest.NeedRoot(t, "nft", "iptables-nft", "iptables-nft-save", "ebtables-nft", "ebtables-nft-save")
	tests := []struct {
		name  string
		load  func(ns *nstest.NS)
		rules []string // the rules counted and rendered, in dump order
	}{
		{
			// What iptables-translate makes of conntrack, multiport, mark
			// and LOG rules, loaded with nft -f in iptables' own names:
			// iptables-nft-save refuses the table.
			name: "native in an iptables table",
			load: func(ns *nstest.NS) {
				ns.Restore(`table ip filter {
	chain INPUT { type filter hook input priority 0; policy drop;
		ct state related,established counter accept
		tcp dport { 22, 80, 443 } counter accept
		meta mark 0x1 counter accept
		iifname "lo" counter accept
		log prefix "drop: " counter
	}
	chain OUTPUT { type filter hook output priority 0; policy accept;
		meta mark set 0x2 counter
	}
	chain FORWARD { type filter hook forward priority 0; policy accept; }
}
table ip nat {
	chain PREROUTING { type nat hook prerouting priority -100; policy accept;
		tcp dport 8080 counter redirect to :15001
	}
}
`, "nft", "-f", "-")
			},
		},
		{
			// iptables-nft rules beside native ones nft added to the same
			// table: a set lookup (translated multiport) and a chain of
			// them, which iptables-nft never writes.
			name: "mixed table",
			load: func(ns *nstest.NS) {
				ns.Run("iptables-nft", "-A", "INPUT", "-s", "10.0.0.0/8", "-j", "ACCEPT")
				ns.Run("iptables-nft", "-A", "INPUT", "-p", "tcp", "--dport", "22", "-j", "ACCEPT")
				ns.Run("nft", "add rule ip filter INPUT tcp dport { 80, 443 } counter accept")
				ns.Run("nft", "add chain ip filter ports")
				ns.Run("nft", "add rule ip filter ports ip saddr { 10.1.1.1, 10.2.2.2 } counter accept")
				ns.Run("iptables-nft", "-A", "INPUT", "-m", "mark", "--mark", "0x1", "-j", "DROP")
			},
			rules: []string{"-A INPUT -s 10.0.0.0/8 -j ACCEPT", "-A INPUT -p tcp --dport 22 -j ACCEPT", "-A INPUT -m mark --mark 0x1 -j DROP"},
		},
		{
			// Consul-style redirect chains in ip nat by iptables-nft, native
			// conntrack rules in ip filter by nft.
			name: "iptables nat beside native filter",
			load: func(ns *nstest.NS) {
				ns.Run("iptables-nft", "-t", "nat", "-N", "CONSUL_PROXY_INBOUND")
				ns.Run("iptables-nft", "-t", "nat", "-A", "PREROUTING", "-p", "tcp", "-j", "CONSUL_PROXY_INBOUND")
				ns.Run("iptables-nft", "-t", "nat", "-A", "CONSUL_PROXY_INBOUND", "-p", "tcp", "-j", "REDIRECT", "--to-ports", "20000")
				ns.Restore("table ip filter {\n\tchain INPUT { type filter hook input priority 0; policy accept;\n\t\tct state established counter accept\n\t}\n}\n", "nft", "-f", "-")
			},
			rules: []string{"-A PREROUTING -p tcp -j CONSUL_PROXY_INBOUND", "-A CONSUL_PROXY_INBOUND -p tcp -j REDIRECT --to-ports 20000"},
		},
		{
			// An ebtables user chain's policy is the chain's, not a rule.
			name: "ebtables user chain policy",
			load: func(ns *nstest.NS) {
				ns.Run("ebtables-nft", "-N", "foo", "-P", "DROP")
				ns.Run("ebtables-nft", "-A", "INPUT", "-j", "foo")
			},
			rules: []string{"-A INPUT -j foo"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ns := nstest.New(t)
			tc.load(ns)
			u := look(t, ns)
			sum := classify.Summarize(u)
			compare(t, sum, save(t, ns))
			var got []string
			for _, r := range u.Rules {
				got = append(got, render.Text(r))
			}
			// The dump's chain order is the kernel's.
			sort.Strings(got)
			sort.Strings(tc.rules)
			if d := cmp.Diff(tc.rules, got); d != "" {
				t.Errorf("rules counted and rendered (-want +got):\n%s", d)
			}
			if sum.NftRules != len(tc.rules) {
				t.Errorf("nft rules %d, want %d", sum.NftRules, len(tc.rules))
			}
			if len(tc.rules) == 0 && !u.Empty() {
				t.Errorf("native rulesets are no usage: %+v", u.Chains)
			}
		})
	}
}
