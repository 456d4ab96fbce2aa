package scan

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// legacyRules are rules real pods write in legacy mode, one or more per
// match and target the README names as decoded.
const legacyRules = `*filter
:USER - [0:0]
-A INPUT -s 10.1.0.0/16 -d 192.168.1.1/32 -i eth0 -p tcp -m tcp --sport 1000:2000 --dport 80 --tcp-flags FIN,SYN,RST,ACK SYN -j ACCEPT
-A INPUT ! -s 10.0.0.0/8 ! -i eth+ ! -p udp -j DROP
-A INPUT -f -j DROP
-A INPUT ! -f -p icmp -m icmp --icmp-type 8 -j ACCEPT
-A INPUT -p udp -m udp ! --dport 53 -j ACCEPT
-A INPUT -p tcp -m multiport --dports 80,443,8000:9000 -j USER
-A INPUT -p tcp -m multiport ! --sports 22 -j USER
-A INPUT -m comment --comment "hello world" -j RETURN
-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A INPUT -m state --state NEW -j ACCEPT
-A INPUT -m mark --mark 0x1/0xff -g USER
-A INPUT -m connmark ! --mark 0x2
-A INPUT -m set --match-set legacy-test src -j DROP
-A OUTPUT -m owner --uid-owner 1337 -j REJECT --reject-with icmp-host-prohibited
-A OUTPUT -m owner ! --gid-owner 1337 -j REJECT
-A OUTPUT -m addrtype --dst-type LOCAL -j LOG --log-prefix "x: " --log-level 6
-A OUTPUT -o lo -j QUEUE
-A USER -j MARK --set-xmark 0x10/0xff
-A USER -j MARK --set-mark 0x539
-A USER -j CONNMARK --save-mark
-A USER -j CONNMARK --restore-mark --nfmask 0xff --ctmask 0xff
COMMIT
*nat
-A PREROUTING -p tcp -j REDIRECT --to-ports 15001
-A PREROUTING -d 1.2.3.4/32 -p tcp -j DNAT --to-destination 10.0.0.1:8080
-A POSTROUTING -o eth0 -j MASQUERADE
-A POSTROUTING -s 10.0.0.0/8 -j SNAT --to-source 1.1.1.1
COMMIT
*mangle
-A PREROUTING -p tcp -j TPROXY --on-port 15006 --on-ip 127.0.0.1 --tproxy-mark 0x539/0xffffffff
COMMIT
`

const legacyRules6 = `*filter
-A INPUT -s 2001:db8::/32 -p ipv6-icmp -m icmp6 --icmpv6-type 128 -j ACCEPT
-A INPUT ! -p tcp ! -d fd00::1/128 -j REJECT --reject-with icmp6-adm-prohibited
-A OUTPUT -m owner --uid-owner 1337 -j RETURN
COMMIT
*nat
-A OUTPUT -p tcp -j DNAT --to-destination [fd00::2]:15001
-A POSTROUTING -j MASQUERADE
COMMIT
`

// TestLegacyRender: rules written by the real iptables-legacy and
// ip6tables-legacy (and arptables-legacy) render as the golden holds, each
// next to the -A line iptables-legacy-save prints for it (arptables has no
// working save here: its golden shows only the rendered text), and a
// legacy-worst record shows a decoded legacy rule as its first example.
func TestLegacyRender(t *testing.T) {
	nstest.NeedRoot(t, "iptables-legacy-restore", "ip6tables-legacy-restore", "iptables-legacy-save", "arptables-legacy", "ipset")
	ns := nstest.New(t)
	ns.Run("ipset", "create", "legacy-test", "hash:ip")
	ns.Restore(legacyRules, "iptables-legacy-restore")
	ns.Restore(legacyRules6, "ip6tables-legacy-restore")
	ns.Run("arptables-legacy", "-N", "FOO")
	ns.Run("arptables-legacy", "-A", "INPUT", "-s", "10.0.0.1", "-d", "10.0.0.0/8", "-i", "eth0", "--opcode", "1", "--source-mac", "00:11:22:33:44:55", "-j", "DROP")
	ns.Run("arptables-legacy", "-A", "OUTPUT", "-o", "lo", "-j", "FOO")
	ns.Run("arptables-legacy", "-A", "FOO", "-j", "mangle", "--mangle-ip-s", "10.0.0.9")
	ns.Run("arptables-legacy", "-A", "FOO", "--h-type", "1", "--proto-type", "0x800", "-j", "CLASSIFY", "--set-class", "1:1")
	ns.Run("arptables-legacy", "-P", "FORWARD", "DROP")
	res := readNS(t, ns)

	saved := legacySaved(ns)
	var b strings.Builder
	for _, r := range res.Usage.LegacyRules {
		k := string(r.Family) + " " + r.Table
		if s := saved[k]; len(s) > 0 {
			fmt.Fprintf(&b, "%s save:   %s\n", k, s[0])
			saved[k] = s[1:]
		}
		fmt.Fprintf(&b, "%s render: %s\n", k, res.LegacyText(r))
	}
	for k, s := range saved {
		if len(s) > 0 {
			t.Errorf("%s: %d saved rules not rendered: %q", k, len(s), s)
		}
	}
	for _, l := range res.Usage.Legacy {
		if l.Cut {
			t.Errorf("legacy %s %s cut", l.Family, l.Table)
		}
		for _, p := range l.Policies {
			fmt.Fprintf(&b, "%s %s policy %s %s\n", l.Family, l.Table, p.Name, p.Policy)
		}
	}
	golden(t, "legacy-render.golden", b.String())

	rec := Build(Meta{}, res)
	if len(rec.Examples) == 0 || rec.Examples[0].Impact != findings.ImpactLegacy || rec.Worst != findings.ImpactLegacy {
		t.Fatalf("record worst %q, examples %+v: want a legacy rule first", rec.Worst, rec.Examples)
	}
	if e := rec.Examples[0]; e.Family != "ip" || e.Table != "filter" || e.Chain != "INPUT" || !strings.HasPrefix(e.Rule, "-A INPUT ") {
		t.Errorf("first example %+v, want an ip filter INPUT rule", e)
	}
}

// TestLegacyFingerprintContent: a legacy rule's content is part of the
// usage fingerprint, its counters are not. On real iptables-legacy in a
// test netns: traffic through the rule keeps the fingerprint; an edit in
// place with the same rule count (iptables-legacy -R) changes it, and the
// record step writes a new record.
func TestLegacyFingerprintContent(t *testing.T) {
	nstest.NeedRoot(t, "iptables-legacy", "iptables-legacy-save", "ip", "bash")
	nstest.NeedIPTables(t)
	ns := nstest.New(t)
	ns.Run("ip", "link", "set", "lo", "up")
	ns.Run("iptables-legacy", "-A", "OUTPUT", "-o", "lo", "-p", "udp", "-j", "ACCEPT")
	m := testMeta
	// The memory's sweep forgets entries whose netns is gone.
	m.Netns = ns.Path()
	look := func() Decision {
		t.Helper()
		d := Decide(m, readNS(t, ns))
		if d.Record.Legacy.Rules != 1 || !d.Parts.Whole() {
			t.Fatalf("legacy rules %d, parts %+v; want 1 rule, a whole look", d.Record.Legacy.Rules, d.Parts)
		}
		return d
	}
	first := look()

	before := ns.Run("iptables-legacy-save", "-c")
	ns.Run("bash", "-c", "for i in 1 2 3; do echo x > /dev/udp/127.0.0.1/9; done")
	if after := ns.Run("iptables-legacy-save", "-c"); after == before {
		t.Fatalf("the traffic did not move the rule's counters:\n%s", after)
	}
	if again := look(); again.Record.Fingerprint != first.Record.Fingerprint || again.Parts != first.Parts {
		t.Errorf("traffic changed the fingerprint: %s %+v, then %s %+v", first.Record.Fingerprint, first.Parts, again.Record.Fingerprint, again.Parts)
	}

	ns.Run("iptables-legacy", "-R", "OUTPUT", "1", "-o", "lo", "-p", "tcp", "-j", "ACCEPT")
	edited := look()
	if edited.Record.Fingerprint == first.Record.Fingerprint || edited.Parts.Legacy == first.Parts.Legacy || edited.Parts.Nft != first.Parts.Nft {
		t.Errorf("iptables-legacy -R with the same count: fingerprint %s (parts %+v), was %s (%+v); want a new one, its legacy part alone changed",
			edited.Record.Fingerprint, edited.Parts, first.Record.Fingerprint, first.Parts)
	}
	s := Store{Log: findings.Log{Path: filepath.Join(t.TempDir(), "findings.jsonl")}, Seen: findings.Seen{Dir: t.TempDir()}}
	for i, st := range []struct {
		d    Decision
		want findings.Outcome
	}{{first, findings.Recorded}, {edited, findings.Recorded}, {look(), findings.Same}} {
		if out, err := s.Record(context.Background(), "sb", st.d); out != st.want || err != nil {
			t.Errorf("record %d: %v %v, want %v", i, out, err, st.want)
		}
	}
}

// TestLegacyDropPolicyAlone: a drop policy set with iptables-legacy and no
// rule (the table keeps its untouched entry count) is legacy usage, as the
// same policy set with iptables-nft is; a table only listed (-L creates it,
// every policy ACCEPT) is not.
func TestLegacyDropPolicyAlone(t *testing.T) {
	nstest.NeedRoot(t, "iptables-legacy", "ip6tables-legacy")
	nstest.NeedIPTables(t)
	ns := nstest.New(t)
	ns.Run("iptables-legacy", "-L", "-n")
	ns.Run("ip6tables-legacy", "-t", "mangle", "-L", "-n")
	if d := Decide(testMeta, readNS(t, ns)); !d.Clean() || d.Record.Legacy.Used() {
		t.Fatalf("tables only listed: %+v (%s), want clean", d.Record.Legacy, d.Why)
	}
	ns.Run("iptables-legacy", "-P", "OUTPUT", "DROP")
	d := Decide(testMeta, readNS(t, ns))
	rec := d.Record
	if d.Clean() || rec.KnownState() != findings.StatePresent || rec.Worst != findings.ImpactLegacy || rec.Legacy.Rules != 0 ||
		!slices.Equal(rec.Legacy.Tables, []string{"ip filter"}) || !d.Parts.Whole() {
		t.Fatalf("OUTPUT's policy DROP alone: state %s, worst %q, legacy %+v, parts %+v (%s); want present at the legacy level, table ip filter, no rule, a whole look",
			rec.KnownState(), rec.Worst, rec.Legacy, d.Parts, d.Why)
	}
	ns.Run("iptables-legacy", "-P", "OUTPUT", "ACCEPT")
	if again := Decide(testMeta, readNS(t, ns)); !again.Clean() {
		t.Errorf("the policy back to ACCEPT: %+v (%s), want clean", again.Record.Legacy, again.Why)
	}
}
