package scan

import (
	"slices"
	"strings"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
)

// TestEbtablesUserChainPolicy: ebtables-nft writes a user chain's policy
// (ACCEPT by default, or -P DROP) as a trailing rule, and ebtables-nft-save
// shows it as the chain's policy: the finding counts the rules the save
// lists, no more.
func TestEbtablesUserChainPolicy(t *testing.T) {
	nstest.NeedRoot(t, "ebtables-nft", "ebtables-nft-save")
	tests := []struct {
		name string
		cmds [][]string
		// nft adds rules behind ebtables-nft's back.
		nft [][]string
	}{
		{name: "drop policy, one rule", cmds: [][]string{
			{"-N", "foo", "-P", "DROP"},
			{"-A", "foo", "-p", "IPv4", "-j", "ACCEPT"},
			{"-A", "INPUT", "-j", "foo"},
		}},
		{name: "two policy chains", cmds: [][]string{
			{"-N", "foo", "-P", "DROP"},
			{"-N", "bar"},
			{"-N", "baz", "-P", "RETURN"},
			{"-A", "bar", "-p", "ARP", "-j", "DROP"},
			{"-A", "bar", "-p", "IPv6", "-j", "ACCEPT"},
			{"-A", "FORWARD", "-j", "bar"},
		}},
		{name: "policy chain emptied of rules", cmds: [][]string{
			{"-N", "foo", "-P", "DROP"},
			{"-A", "foo", "-j", "ACCEPT"},
			{"-D", "foo", "-j", "ACCEPT"},
			{"-A", "FORWARD", "-p", "IPv4", "-j", "foo"},
		}},
		{name: "policy rule no longer last", cmds: [][]string{
			{"-N", "foo", "-P", "DROP"},
		}, nft: [][]string{
			// The save then shows foo RETURN and both rules.
			{"add", "rule", "bridge", "filter", "foo", "counter", "accept"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := nstest.New(t)
			for _, c := range tt.cmds {
				ns.Run(append([]string{"ebtables-nft"}, c...)...)
			}
			for _, c := range tt.nft {
				ns.Run(append([]string{"nft"}, c...)...)
			}
			save := ns.Run("ebtables-nft-save")
			listed := 0
			for _, l := range strings.Split(save, "\n") {
				if strings.HasPrefix(l, "-A ") {
					listed++
				}
			}
			res := readNS(t, ns)
			rec := Build(Meta{}, res)
			if rec.Nft.Rules != listed {
				t.Errorf("finding counts %d rules, ebtables-nft-save lists %d:\n%s", rec.Nft.Rules, listed, save)
			}
			// The dump shows a DROP policy as the chain's.
			var dump strings.Builder
			if err := Dump(&dump, res, DumpOptions{}); err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(dump.String(), "chain foo has policy DROP"); got != strings.Contains(save, ":foo DROP") {
				t.Errorf("dump shows foo's DROP policy: %v, the save: %v\n%s", got, !got, dump.String())
			}
			// A policy rule shown as an example reads "-A foo -j DROP",
			// a line the save does not have.
			lines := strings.Split(save, "\n")
			for _, l := range lines {
				name, policy, ok := strings.Cut(strings.TrimPrefix(l, ":"), " ")
				if !ok || !strings.HasPrefix(l, ":") {
					continue
				}
				rule := "-A " + name + " -j " + policy
				for _, ex := range rec.Examples {
					if ex.Rule == rule && !slices.Contains(lines, rule) {
						t.Errorf("example %q is chain %s's policy", ex.Rule, name)
					}
				}
			}
		})
	}
}
