package scan

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
)

// corpusSection is one "#@ LOADER ARGS" section of a corpus file.
type corpusSection struct {
	argv []string
	body string
}

// readCorpusFile parses a corpus file (../shared/corpus/README.md).
func readCorpusFile(t *testing.T, path string) []corpusSection {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var secs []corpusSection
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if a, ok := strings.CutPrefix(l, "#@ "); ok {
			secs = append(secs, corpusSection{argv: strings.Fields(a)})
		} else if len(secs) > 0 {
			secs[len(secs)-1].body += l + "\n"
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return secs
}

// backendOf rewrites an ip/ip6 restore loader to the backend given
// ("nft" or "legacy"); ok is false for any other loader but ipset.
func backendOf(argv []string, backend string) ([]string, bool) {
	if argv[0] == "ipset" {
		return []string{"ipset", "restore"}, true
	}
	for _, tool := range []string{"iptables", "ip6tables"} {
		if argv[0] == tool+"-nft-restore" || argv[0] == tool+"-legacy-restore" {
			return append([]string{tool + "-" + backend + "-restore"}, argv[1:]...), true
		}
	}
	return nil, false
}

// TestLegacyCorpus: every ip/ip6 ruleset of the corpus (../shared/corpus,
// rulesets written by istio, kuma, kube-proxy, docker, the iptables test
// suite...), loaded by iptables-legacy-restore, renders rule for rule as
// the same ruleset loaded by iptables-nft-restore does, which the corpus
// check holds equal to iptables-nft-save's meaning; and each legacy chain
// renders one line per iptables-legacy-save -A line. A ruleset the legacy
// backend refuses is skipped (logged).
func TestLegacyCorpus(t *testing.T) {
	nstest.NeedRoot(t, "iptables-legacy-restore", "ip6tables-legacy-restore", "iptables-nft-restore", "iptables-legacy-save", "ipset")
	dir, err := filepath.Abs(filepath.Join("..", "..", "..", "shared", "corpus"))
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.rules"))
	nstest.Need(t, len(files) > 0, "needs the corpus in "+dir)
	compared, rules := 0, 0
	for _, path := range files {
		secs := readCorpusFile(t, path)
		usable := len(secs) > 0
		for _, s := range secs {
			if _, ok := backendOf(s.argv, "nft"); !ok {
				usable = false
			}
		}
		if !usable {
			continue
		}
		t.Run(filepath.Base(path), func(t *testing.T) {
			load := func(backend string) (*nstest.NS, bool) {
				ns := nstest.New(t)
				for _, s := range secs {
					argv, _ := backendOf(s.argv, backend)
					if out, err := execIn(ns, argv, s.body); err != nil {
						t.Logf("skipped: %s refuses it: %v: %.200s", argv[0], err, out)
						return nil, false
					}
				}
				return ns, true
			}
			nft, ok := load("nft")
			if !ok {
				return
			}
			leg, ok := load("legacy")
			if !ok {
				return
			}
			want, got := map[string][]string{}, map[string][]string{}
			rn, rl := readNS(t, nft), readNS(t, leg)
			for _, r := range rn.Usage.Rules {
				k := fmt.Sprintf("%s %s %s", r.Family, r.Table, r.Chain)
				want[k] = append(want[k], rn.Text(r))
			}
			for _, r := range rl.Usage.LegacyRules {
				k := fmt.Sprintf("%s %s %s", r.Family, r.Table, r.Chain)
				got[k] = append(got[k], rl.LegacyText(r))
			}
			for _, l := range rl.Usage.Legacy {
				if l.Cut {
					t.Errorf("legacy %s %s cut", l.Family, l.Table)
				}
			}
			for k := range want {
				if len(want[k]) != len(got[k]) || len(got[k]) == 0 {
					continue // the diff below says it
				}
				for i, w := range want[k] {
					if knownDifference(w, got[k][i]) {
						got[k][i] = w
					}
				}
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("legacy render differs from the iptables-nft one (-nft +legacy):\n%s", d)
			}
			saved := map[string]int{}
			for k, rules := range legacySaved(leg) {
				for _, l := range rules {
					chain, _, _ := strings.Cut(strings.TrimPrefix(l, "-A "), " ")
					saved[k+" "+chain]++
				}
			}
			lines := map[string]int{}
			for k, v := range got {
				lines[k] = len(v)
				rules += len(v)
			}
			if d := cmp.Diff(saved, lines); d != "" {
				t.Errorf("rules per chain differ from iptables-legacy-save's -A lines (-save +render):\n%s", d)
			}
			compared++
		})
	}
	t.Logf("%d rulesets, %d legacy rules compared", compared, rules)
	if compared == 0 {
		t.Error("no ruleset compared")
	}
}

// knownDifference tells the two places where the same restore line gives
// different kernel rules in the two backends, each rendered for what the
// kernel holds: iptables-nft drops "! --sport 0:65535" (a match no packet
// passes) where the legacy tcp/udp match keeps it, and NFLOG's prefix is
// 63 bytes in the legacy target, 127 in the native log iptables-nft writes.
func knownDifference(nft, legacy string) bool {
	for _, opt := range []string{" ! --sport 0:65535", " ! --dport 0:65535"} {
		if strings.Replace(legacy, opt, "", 1) == nft && legacy != nft {
			return true
		}
	}
	const nflog = `-j NFLOG --nflog-prefix "`
	i := strings.Index(legacy, nflog)
	if i < 0 || !strings.HasPrefix(nft, legacy[:i+len(nflog)]) {
		return false
	}
	prefix, rest, _ := strings.Cut(legacy[i+len(nflog):], `"`)
	return len(prefix) == 63 && strings.HasPrefix(nft[i+len(nflog):], prefix) && strings.HasSuffix(nft, `"`+rest)
}

// legacySaved is iptables-legacy-save's and ip6tables-legacy-save's -A
// lines by "family table".
func legacySaved(ns *nstest.NS) map[string][]string {
	saved := map[string][]string{}
	for fam, tool := range map[string]string{"ip": "iptables-legacy-save", "ip6": "ip6tables-legacy-save"} {
		table := ""
		for _, l := range strings.Split(ns.Run(tool), "\n") {
			if n, ok := strings.CutPrefix(l, "*"); ok {
				table = n
			} else if strings.HasPrefix(l, "-A ") {
				saved[fam+" "+table] = append(saved[fam+" "+table], l)
			}
		}
	}
	return saved
}

// execIn feeds body to argv inside ns.
func execIn(ns *nstest.NS, argv []string, body string) (string, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns.Name}, argv...)...)
	cmd.Stdin = strings.NewReader(body)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
