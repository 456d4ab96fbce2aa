package scan

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/modules"
)

// TestModules: rules written by the real clients name the modules the
// kernel loaded for them. Each module named for an xt or legacy rule is in
// /sys/module once the rule is in (the kernel loaded it by that name, or
// it is built in), so the names are the kernel's, not guesses.
func TestModules(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "iptables-legacy", "ip6tables-nft")
	ns := nstest.New(t)
	for _, r := range [][]string{
		{"iptables-nft", "-A", "OUTPUT", "-m", "owner", "--uid-owner", "1337", "-j", "RETURN"},
		{"iptables-nft", "-t", "nat", "-A", "OUTPUT", "-p", "tcp", "-j", "REDIRECT", "--to-ports", "15001"},
		{"iptables-nft", "-t", "nat", "-A", "POSTROUTING", "-o", "eth0", "-j", "MASQUERADE"},
		{"iptables-nft", "-A", "INPUT", "-m", "conntrack", "--ctstate", "ESTABLISHED", "-j", "ACCEPT"},
		{"iptables-nft", "-A", "INPUT", "-m", "comment", "--comment", "x", "-j", "ACCEPT"},
		{"iptables-nft", "-t", "mangle", "-A", "OUTPUT", "-j", "MARK", "--set-mark", "0x539"},
		{"ip6tables-nft", "-A", "INPUT", "-p", "tcp", "--dport", "22", "-j", "REJECT"},
		{"iptables-nft", "-A", "FORWARD", "-s", "10.0.0.0/8", "-j", "DROP"},
		{"iptables-legacy", "-t", "nat", "-A", "PREROUTING", "-p", "tcp", "-m", "multiport", "--dports", "80,443", "-j", "DNAT", "--to-destination", "10.0.0.1"},
	} {
		ns.Run(r...)
	}
	rec := Build(Meta{}, readNS(t, ns))
	want := findings.Modules{
		Legacy: []string{"ip_tables", "iptable_nat", "xt_multiport", "xt_nat"},
		Xt: []string{"ip6t_REJECT", "nf_tables", "nft_chain_nat", "nft_compat", "xt_MASQUERADE", "xt_REDIRECT", "xt_comment",
			"xt_conntrack", "xt_mark", "xt_owner"},
		Native: []string{"nf_tables"},
	}
	// iptables-nft 1.8.9 writes -p tcp natively but ip6tables' REJECT and
	// -p tcp on a REDIRECT rule as they are; compare what the kernel holds.
	for _, l := range findings.ImpactLevels {
		got := rec.Modules.Level(l)
		for _, m := range want.Level(l) {
			if !slices.Contains(got, m) {
				t.Errorf("%s modules %v lack %s", l, got, m)
			}
		}
	}
	words := modules.Releases.Words("10.2", rec.Modules.Judged())
	for _, w := range []string{"breaks: ip_tables, iptable_nat are not shipped", "needs kernel-modules-extra: nft_compat", "package unverified:", "xt_owner", "xt_MASQUERADE (reported in kernel-modules-extra)"} {
		if !strings.Contains(words, w) {
			t.Errorf("words %q lack %q", words, w)
		}
	}
	// On a modular kernel the kernel loaded each by that name; a kernel
	// built without modules (this test's VM) shows only some in
	// /sys/module, and the names are then checked by the list above.
	if _, err := os.Stat("/proc/modules"); err != nil {
		t.Logf("kernel without loadable modules (%v): names not checked against /sys/module", err)
		return
	}
	for _, m := range rec.Modules.Judged() {
		if _, err := os.Stat("/sys/module/" + m); err != nil {
			t.Errorf("module %s named for a rule the kernel holds is not loaded: %v", m, err)
		}
	}
}
