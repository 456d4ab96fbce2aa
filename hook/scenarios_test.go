package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/findingstest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// TestHookScenarios writes rules with the real iptables clients and nft in a
// fresh netns, runs the hook binary on it, and checks the finding, and that
// the netns ruleset is byte-identical before and after.
func TestHookScenarios(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "ip6tables-nft", "iptables-legacy", "ip6tables-legacy", "iptables-nft-restore", "nft")
	tests := []struct {
		name   string
		setup  func(ns *nstest.NS)
		want   bool // a finding is expected
		nft    findings.Nft
		legacy findings.Legacy
	}{
		{
			name:  "istio nat ruleset via iptables-nft-restore",
			setup: func(ns *nstest.NS) { ns.Restore(nstest.IstioNAT, "iptables-nft-restore") },
			want:  true,
			nft:   findings.Nft{Tables: []string{"ip nat"}, Chains: 6, Rules: 15},
		},
		{
			name:  "single filter rule",
			setup: func(ns *nstest.NS) { ns.Run("iptables-nft", "-A", "INPUT", "-p", "tcp", "--dport", "22", "-j", "DROP") },
			want:  true,
			nft:   findings.Nft{Tables: []string{"ip filter"}, Chains: 1, Rules: 1},
		},
		{
			name:  "user chain only",
			setup: func(ns *nstest.NS) { ns.Run("iptables-nft", "-N", "MYCHAIN") },
			want:  true,
			nft:   findings.Nft{Tables: []string{"ip filter"}, Chains: 1, Rules: 0},
		},
		{
			name:  "drop policy only",
			setup: func(ns *nstest.NS) { ns.Run("iptables-nft", "-P", "FORWARD", "DROP") },
			want:  true,
			nft:   findings.Nft{Tables: []string{"ip filter"}, Chains: 1, Rules: 0},
		},
		{
			name: "ipv6 only",
			setup: func(ns *nstest.NS) {
				ns.Run("ip6tables-nft", "-t", "mangle", "-A", "OUTPUT", "-p", "udp", "--dport", "53", "-j", "MARK", "--set-mark", "7")
			},
			want: true,
			nft:  findings.Nft{Tables: []string{"ip6 mangle"}, Chains: 1, Rules: 1},
		},
		{
			name: "legacy only",
			setup: func(ns *nstest.NS) {
				ns.Run("iptables-legacy", "-t", "nat", "-A", "OUTPUT", "-p", "tcp", "-j", "REDIRECT", "--to-ports", "15001")
				ns.Run("ip6tables-legacy", "-A", "INPUT", "-j", "DROP")
			},
			want:   true,
			legacy: findings.Legacy{Tables: []string{"ip nat", "ip6 filter"}, Rules: 2},
		},
		{
			name: "nft and legacy at once",
			setup: func(ns *nstest.NS) {
				ns.Run("iptables-nft", "-A", "OUTPUT", "-d", "169.254.169.254", "-j", "REJECT")
				ns.Run("iptables-legacy", "-A", "OUTPUT", "-d", "169.254.169.254", "-j", "REJECT")
			},
			want:   true,
			nft:    findings.Nft{Tables: []string{"ip filter"}, Chains: 1, Rules: 1},
			legacy: findings.Legacy{Tables: []string{"ip filter"}, Rules: 1},
		},
		{
			name: "native nftables only",
			setup: func(ns *nstest.NS) {
				ns.Run("nft", "add table inet app; add chain inet app in { type filter hook input priority 0; policy drop; }; add rule inet app in tcp dport 8080 counter accept")
				// An ip filter table built by nft with its own chain layout is native too.
				ns.Run("nft", "add table ip filter; add chain ip filter input { type filter hook input priority 10; }; add rule ip filter input counter accept")
			},
			want: false,
		},
		{
			name:  "empty netns",
			setup: func(ns *nstest.NS) {},
			want:  false,
		},
		{
			name: "read-only iptables commands beforehand",
			setup: func(ns *nstest.NS) {
				ns.Run("iptables-nft", "-L", "-n")
				ns.Run("iptables-nft-save")
				ns.Run("ip6tables-nft", "-S")
				ns.Run("iptables-legacy-save")
				ns.Run("iptables-nft", "-t", "nat", "-F")
			},
			want: false,
		},
		{
			name: "empty accept base chain left behind is not usage",
			setup: func(ns *nstest.NS) {
				ns.Run("iptables-nft", "-A", "INPUT", "-j", "ACCEPT")
				ns.Run("iptables-nft", "-D", "INPUT", "-j", "ACCEPT")
			},
			want: false,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ns := nstest.New(t)
			tc.setup(ns)
			before := ns.Ruleset()
			var h hookRun
			runHookProc(t, pod{netns: ns.Path(), sandbox: "sb-" + ns.Name}.state(t), &h)
			if after := ns.Ruleset(); after != before {
				t.Fatalf("the hook changed the netns:\nbefore:\n%s\nafter:\n%s", before, after)
			}
			recs := findingstest.Read(t, h.findings)
			if !tc.want {
				if len(recs) != 0 {
					t.Fatalf("want no finding, got %+v", recs)
				}
				return
			}
			if len(recs) != 1 {
				t.Fatalf("want 1 finding, got %d; stderr:\n%s", len(recs), h.stderr)
			}
			r := recs[0]
			want := struct {
				Nft    findings.Nft
				Legacy findings.Legacy
			}{normNft(tc.nft), normLegacy(tc.legacy)}
			// Per-table counts are lib/classify's (checked there against the
			// save tools); these cases check the totals.
			nft := r.Nft
			nft.PerTable = nil
			got := struct {
				Nft    findings.Nft
				Legacy findings.Legacy
			}{nft, r.Legacy}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("counts (-want +got):\n%s", d)
			}
			if r.Pod != (findings.Pod{Namespace: "team-a", Name: "web-1", UID: "0b8c6a6e-1111-2222-3333-444455556666"}) ||
				r.Netns != ns.Path() || r.Stage != "poststart" || r.Node != "node-1" || r.Source != "hook" ||
				r.Container != "app" || r.ContainerID != "c0ffee" || r.Image != "quay.io/example/app:1" || r.Truncated || r.Error != "" {
				t.Errorf("record fields: %+v", r)
			}
		})
	}
}

func normNft(n findings.Nft) findings.Nft {
	if n.Tables == nil {
		n.Tables = []string{}
	}
	return n
}

func normLegacy(l findings.Legacy) findings.Legacy {
	if l.Tables == nil {
		l.Tables = []string{}
	}
	return l
}
