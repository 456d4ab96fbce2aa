package scan

import (
	"testing"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
)

// TestMixedBackends: a netns is mixed only when both backends hold rules:
// the empty filter table any iptables-legacy -L creates does not count,
// nor does either backend alone.
func TestMixedBackends(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "iptables-legacy", "ip6tables-legacy")
	for _, tc := range []struct {
		name  string
		rules [][]string
		mixed bool
	}{
		{"nft and a listed legacy table", [][]string{
			{"iptables-nft", "-A", "OUTPUT", "-m", "owner", "--uid-owner", "1337", "-j", "RETURN"},
			{"iptables-legacy", "-L", "-n"},
			{"ip6tables-legacy", "-t", "nat", "-L", "-n"},
		}, false},
		{"legacy only", [][]string{
			{"iptables-legacy", "-A", "INPUT", "-p", "tcp", "--dport", "80", "-j", "DROP"},
		}, false},
		{"nft only", [][]string{
			{"iptables-nft", "-A", "INPUT", "-s", "10.0.0.0/8", "-j", "DROP"},
		}, false},
		{"both", [][]string{
			{"iptables-nft", "-t", "nat", "-A", "OUTPUT", "-p", "tcp", "-j", "REDIRECT", "--to-ports", "15001"},
			{"iptables-legacy", "-A", "INPUT", "-p", "tcp", "--dport", "80", "-j", "DROP"},
		}, true},
		{"both, legacy in ip6 only", [][]string{
			{"iptables-nft", "-A", "INPUT", "-s", "10.0.0.0/8", "-j", "DROP"},
			{"ip6tables-legacy", "-A", "INPUT", "-s", "2001:db8::/32", "-j", "DROP"},
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := nstest.New(t)
			for _, r := range tc.rules {
				ns.Run(r...)
			}
			rec := Build(Meta{}, readNS(t, ns))
			if rec.MixedBackends != tc.mixed {
				t.Errorf("mixed_backends = %v, want %v (nft %+v, legacy %+v)", rec.MixedBackends, tc.mixed, rec.Nft, rec.Legacy)
			}
			if !rec.HasUsage() {
				t.Errorf("no usage recorded: %+v", rec)
			}
		})
	}
}
