package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/findingstest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// ovnkRules writes the rules ovn-kubernetes / openshift-sdn put in every pod
// netns, in the generation given by synFlag ("--syn" or the --tcp-flags form).
func ovnkRules(ns *nstest.NS, synFlag []string) {
	for _, c := range []struct{ cmd, reject string }{{"iptables-nft", "icmp-port-unreachable"}, {"ip6tables-nft", "icmp6-port-unreachable"}} {
		for _, chain := range []string{"FORWARD", "OUTPUT"} {
			for _, port := range []string{"22623", "22624"} {
				args := append([]string{c.cmd, "-A", chain, "-p", "tcp", "-m", "tcp", "--dport", port}, synFlag...)
				ns.Run(append(args, "-j", "REJECT", "--reject-with", c.reject)...)
			}
		}
	}
	for _, chain := range []string{"FORWARD", "OUTPUT"} {
		for _, proto := range []string{"tcp", "udp"} {
			ns.Run("iptables-nft", "-A", chain, "-d", "169.254.169.254/32", "-p", proto, "-m", proto, "!", "--dport", "53", "-j", "REJECT", "--reject-with", "icmp-port-unreachable")
		}
	}
}

// TestDefaultAllowlist: a netns holding exactly the platform's in-pod rules
// gives no finding, in both rule generations; one Istio rule more gives a
// finding whose example is that rule.
func TestDefaultAllowlist(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "ip6tables-nft")
	for _, gen := range [][]string{{"--syn"}, {"--tcp-flags", "FIN,SYN,RST,ACK", "SYN"}} {
		t.Run(strings.Join(gen, " "), func(t *testing.T) {
			ns := nstest.New(t)
			ovnkRules(ns, gen)
			h := hookRun{}
			runHookProc(t, pod{netns: ns.Path(), sandbox: "sb"}.state(t), &h)
			if recs := findingstest.Read(t, h.findings); len(recs) != 0 {
				t.Fatalf("platform rules only: want no finding, got %+v", recs)
			}

			ns.Run("iptables-nft", "-t", "nat", "-A", "OUTPUT", "-p", "tcp", "-j", "REDIRECT", "--to-ports", "15001")
			runHookProc(t, pod{netns: ns.Path(), sandbox: "sb"}.state(t), &h)
			recs := findingstest.Read(t, h.findings)
			if len(recs) != 1 {
				t.Fatalf("want 1 finding, got %d\n%s", len(recs), h.stderr)
			}
			r := recs[0]
			want := findings.Record{
				Nft: findings.Nft{Tables: []string{"ip nat"}, Chains: 1, Rules: 1,
					// Per table, after the allowlist too; chains as the save
					// tool lists them (nat's four built-in chains).
					PerTable: []findings.TableCount{{Table: "ip nat", Chains: 4, Rules: 1}}},
				Legacy:           findings.Legacy{Tables: []string{}},
				Allowlisted:      12,
				AllowlistEntries: []string{"ovn-kubernetes-block-mcs-ipv4", "ovn-kubernetes-block-mcs-ipv6", "ovn-kubernetes-block-metadata"},
				Examples:         []findings.Example{{Family: "ip", Table: "nat", Chain: "OUTPUT", Rule: "-A OUTPUT -p tcp -j REDIRECT --to-ports 15001", Impact: "xt"}},
				// The allowlist took the 12 xt REJECT rules out of the counts
				// per level too.
				Impact: findings.Impact{Xt: 1},
				Worst:  "xt",
			}
			got := findings.Record{Nft: r.Nft, Legacy: r.Legacy, Allowlisted: r.Allowlisted, AllowlistEntries: r.AllowlistEntries, Examples: r.Examples, Impact: r.Impact, Worst: r.Worst}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("finding (-want +got):\n%s", d)
			}
		})
	}
}

// TestAllowlistFlags: --no-default-allowlist reports the platform rules, and
// an admin's file adds entries; a broken file still reports usage.
func TestAllowlistFlags(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "ip6tables-nft")
	ns := nstest.New(t)
	ovnkRules(ns, []string{"--syn"})
	ns.Run("iptables-nft", "-A", "INPUT", "-s", "10.0.0.0/8", "-j", "ACCEPT")
	dir := t.TempDir()
	good := filepath.Join(dir, "allow.json")
	os.WriteFile(good, []byte(`{"entries":[{"name":"lan","reason":"test","family":"ip","table":"filter","chain":"INPUT","rule":"-A INPUT -s 10.0.0.0/8 -j ACCEPT"}]}`), 0o644)
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"entries":[`), 0o644)

	tests := []struct {
		name        string
		args        []string
		rules       int
		allowlisted int
		log         string
	}{
		{"defaults and file", []string{"--allowlist", good}, 0, 13, ""},
		{"defaults only", []string{"--allowlist", filepath.Join(dir, "missing.json")}, 1, 12, ""},
		{"no defaults", []string{"--allowlist", good, "--no-default-allowlist"}, 12, 1, ""},
		{"broken file keeps defaults", []string{"--allowlist", bad}, 1, 12, "cannot load the allowlist"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := hookRun{}
			runHookProc(t, pod{netns: ns.Path(), sandbox: "sb"}.state(t), &h, tc.args...)
			recs := findingstest.Read(t, h.findings)
			if tc.rules == 0 {
				if len(recs) != 0 {
					t.Fatalf("want no finding, got %+v", recs)
				}
				return
			}
			if len(recs) != 1 || recs[0].Nft.Rules != tc.rules || recs[0].Allowlisted != tc.allowlisted {
				t.Fatalf("want 1 finding with %d rules, %d allowlisted; got %+v", tc.rules, tc.allowlisted, recs)
			}
			if !strings.Contains(h.stderr, tc.log) {
				t.Errorf("log does not say %q:\n%s", tc.log, h.stderr)
			}
		})
	}
}

// TestRenderCommand: the admin's tool prints canonical rules and marks the
// allowlisted ones.
func TestRenderCommand(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "ip6tables-nft")
	ns := nstest.New(t)
	ovnkRules(ns, []string{"--tcp-flags", "FIN,SYN,RST,ACK", "SYN"})
	ns.Run("iptables-nft", "-N", "EMPTY")
	code, text, errs := runCmd(t, "render", "--netns", ns.Path())
	if code != 0 {
		t.Fatalf("render: exit %d\n%s", code, errs)
	}
	for _, want := range []string{
		"ip filter -A OUTPUT -p tcp --dport 22623 --syn -j REJECT    # allowlisted: ovn-kubernetes-block-mcs-ipv4\n",
		"ip6 filter -A FORWARD -p tcp --dport 22624 --syn -j REJECT    # allowlisted: ovn-kubernetes-block-mcs-ipv6\n",
		"ip filter -A FORWARD -d 169.254.169.254 -p udp ! --dport 53 -j REJECT    # allowlisted: ovn-kubernetes-block-metadata\n",
		"# ip filter: empty user chain EMPTY\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("render output lacks %q:\n%s", want, text)
		}
	}
	if n := strings.Count(text, "# allowlisted"); n != 12 {
		t.Errorf("%d allowlisted lines, want 12:\n%s", n, text)
	}
	// Counts per level close the output; --impact marks each rule, before
	// the allowlist's mark.
	if want := "# impact: legacy=0 xt=12 native=0 worst=xt\n"; !strings.HasSuffix(text, want) {
		t.Errorf("render output does not end with %q:\n%s", want, text)
	}
	ns.Run("iptables-nft", "-A", "EMPTY", "-p", "tcp", "--dport", "80", "-j", "DROP")
	code, out, errs := runCmd(t, "render", "--impact", "--netns", ns.Path())
	if code != 0 {
		t.Fatalf("render --impact: exit %d\n%s", code, errs)
	}
	for _, want := range []string{
		"ip filter -A OUTPUT -p tcp --dport 22623 --syn -j REJECT    # impact: xt    # allowlisted: ovn-kubernetes-block-mcs-ipv4\n",
		"ip filter -A EMPTY -p tcp --dport 80 -j DROP    # impact: native\n",
		"# impact: legacy=0 xt=12 native=1 worst=xt\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("render --impact output lacks %q:\n%s", want, out)
		}
	}
	if code, _, errs := runCmd(t, "render", "--netns", "/run/netns/iptalert-none"); code != 1 || !strings.Contains(errs, "does not exist") {
		t.Errorf("render of a missing netns: exit %d, stderr %s", code, errs)
	}
	// Without root (a process of its own, under another uid) nothing of the netns can be read: exit 1 and say why,
	// never an empty listing that looks like a clean netns.
	cmd := exec.Command(bin, "render", "--netns", ns.Path())
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(stderr.String(), "needs root") || stdout.Len() != 0 {
		t.Errorf("render without root: err=%v, want exit 1 with \"needs root\"; stdout %q, stderr %q", err, stdout.String(), stderr.String())
	}
}
