package scan

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/child"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/classify"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"github.com/iptables-alerter/iptables-alerter/lib/ipset"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestMain lets Read re-execute this test binary as its probes.
func TestMain(m *testing.M) {
	child.Main(inspect.LegacyProbe, ipset.Probe)
	os.Exit(m.Run())
}

// readNS scans a test netns as the hook does.
func readNS(t *testing.T, ns *nstest.NS) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := Read(ctx, ns.Path())
	if err != nil || !res.Complete() {
		t.Fatalf("read %s: %v, complete=%v (%v)", ns.Path(), err, res.Complete(), res.Err)
	}
	return res
}

// impactLines is what the golden holds: each rule with its level, then the
// summary's counts and worst level.
func impactLines(res Result) string {
	var b strings.Builder
	for _, r := range res.Usage.Rules {
		fmt.Fprintf(&b, "%-6s %s %s %s\n", classify.Level(r), r.Family, r.Table, res.Text(r))
	}
	for _, l := range res.Usage.Legacy {
		fmt.Fprintf(&b, "%-6s %s %s %d entries\n", findings.ImpactLegacy, l.Family, l.Table, l.Rules)
	}
	s := classify.Summarize(res.Usage)
	fmt.Fprintf(&b, "impact legacy=%d xt=%d native=%d worst=%s\n", s.Impact.Legacy, s.Impact.Xt, s.Impact.Native, s.Worst)
	return b.String()
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden %q (run with -update to create): %v", path, err)
	}
	if got != string(want) {
		t.Errorf("%s differs:\n--- want\n%s--- got\n%s", path, want, got)
	}
}

// TestImpactLevels: rules written by the real clients get the level the
// RHEL 10 kernel decides: iptables-legacy rules legacy, iptables-nft rules
// with xt extensions xt, natively translated ones native.
func TestImpactLevels(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "iptables-legacy", "ip6tables-nft")
	tests := []struct {
		name  string
		rules [][]string
		worst string
	}{
		{
			name: "native",
			rules: [][]string{
				{"iptables-nft", "-A", "INPUT", "-p", "tcp", "--dport", "8080", "-j", "DROP"},
				{"iptables-nft", "-A", "INPUT", "-s", "10.0.0.0/8", "-j", "ACCEPT"},
				{"iptables-nft", "-A", "OUTPUT", "-d", "192.0.2.1", "-p", "udp", "--sport", "53", "-j", "DROP"},
				{"ip6tables-nft", "-A", "FORWARD", "-s", "2001:db8::/32", "-j", "DROP"},
				{"iptables-nft", "-N", "MINE"},
				{"iptables-nft", "-A", "MINE", "-i", "eth0", "-j", "RETURN"},
				{"iptables-nft", "-A", "INPUT", "-j", "MINE"},
			},
			worst: findings.ImpactNative,
		},
		{
			name: "xt",
			rules: [][]string{
				{"iptables-nft", "-A", "INPUT", "-p", "tcp", "--dport", "22", "-m", "comment", "--comment", "ssh in", "-j", "ACCEPT"},
				{"iptables-nft", "-A", "INPUT", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"},
				{"iptables-nft", "-t", "nat", "-A", "POSTROUTING", "-o", "eth0", "-j", "MASQUERADE"},
				{"iptables-nft", "-A", "OUTPUT", "-m", "owner", "--uid-owner", "1337", "-j", "RETURN"},
				{"iptables-nft", "-A", "INPUT", "-s", "10.0.0.0/8", "-j", "ACCEPT"},
			},
			worst: findings.ImpactXt,
		},
		{
			name: "legacy",
			rules: [][]string{
				{"iptables-legacy", "-A", "INPUT", "-p", "tcp", "--dport", "8080", "-j", "DROP"},
				{"iptables-legacy", "-t", "nat", "-A", "POSTROUTING", "-j", "MASQUERADE"},
				{"iptables-nft", "-A", "OUTPUT", "-m", "owner", "--uid-owner", "1337", "-j", "RETURN"},
				{"iptables-nft", "-A", "INPUT", "-p", "tcp", "--dport", "22", "-j", "ACCEPT"},
			},
			worst: findings.ImpactLegacy,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ns := nstest.New(t)
			for _, r := range tc.rules {
				ns.Run(r...)
			}
			res := readNS(t, ns)
			golden(t, "impact-"+tc.name+".golden", impactLines(res))
			rec := Build(Meta{}, res)
			if rec.Worst != tc.worst {
				t.Errorf("record worst = %q, want %q", rec.Worst, tc.worst)
			}
			if n := rec.Impact.Legacy + rec.Impact.Xt + rec.Impact.Native; n != rec.Nft.Rules+rec.Legacy.Rules {
				t.Errorf("impact %+v counts %d rules, record %d nft + %d legacy", rec.Impact, n, rec.Nft.Rules, rec.Legacy.Rules)
			}
			legacy := map[string]bool{}
			for _, r := range res.Usage.LegacyRules {
				legacy[res.LegacyText(r)] = true
			}
			shown := false
			for _, ex := range rec.Examples {
				want := findings.ImpactNative
				switch {
				case ex.Family == "ip" && legacy[ex.Rule]:
					want, shown = findings.ImpactLegacy, true
				case strings.Contains(ex.Rule, "-m ") || strings.Contains(ex.Rule, "MASQUERADE"):
					want = findings.ImpactXt
				}
				if ex.Impact != want {
					t.Errorf("example %q has impact %q, want %q", ex.Rule, ex.Impact, want)
				}
			}
			// The worst level is shown first, by a decoded legacy rule.
			if tc.worst == findings.ImpactLegacy && (!shown || rec.Examples[0].Impact != findings.ImpactLegacy) {
				t.Errorf("legacy rules not shown first: %+v", rec.Examples)
			}
		})
	}
}
