package inspect_test

import (
	"strings"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
)

// Traffic through stateful expressions (counters, quota, limit, a dynamic
// set's counters, xt statistic and hashlimit; nft 1.0.6 cannot write "last") must not change any chain's Sum: the fingerprint stands for the
// rules' meaning, and a new one at each container start is a new finding.
func TestSumIgnoresTrafficState(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "nft", "bash")
	ns := nstest.New(t)
	ns.Run("ip", "link", "set", "lo", "up")
	ns.Run("nft", `add table inet t; add chain inet t out { type filter hook output priority 0; }
add rule inet t out udp dport 9 counter quota until 100 mbytes limit rate 1000/second
add set inet t seen { type ipv4_addr; flags dynamic; }
add rule inet t out udp dport 9 add @seen { ip daddr counter }`)
	ns.Run("iptables-nft", "-A", "OUTPUT", "-p", "udp", "--dport", "9", "-m", "quota", "--quota", "100000000", "-j", "ACCEPT")
	ns.Run("iptables-nft", "-A", "OUTPUT", "-p", "udp", "--dport", "9", "-m", "limit", "--limit", "1000/s", "-j", "ACCEPT")
	// xt matches whose kernel state lives next to their info.
	ns.Run("iptables-nft", "-I", "OUTPUT", "-p", "udp", "--dport", "9", "-m", "statistic", "--mode", "nth", "--every", "3", "--packet", "0", "-j", "RETURN")
	ns.Run("iptables-nft", "-I", "OUTPUT", "-p", "udp", "--dport", "9", "-m", "hashlimit", "--hashlimit-upto", "1000/s", "--hashlimit-name", "h", "-j", "RETURN")
	all := func(inspect.Family, string, bool) bool { return true }

	sums := func() map[string]uint64 {
		m := map[string]uint64{}
		for _, c := range look(t, ns, inspect.Options{Detail: all}).Chains {
			m[string(c.Family)+" "+c.Table+" "+c.Name] = c.Sum
		}
		return m
	}
	before := sums()
	rulesBefore := ns.Run("nft", "list", "ruleset")
	ns.Run("bash", "-c", "for i in $(seq 20); do echo hello > /dev/udp/127.0.0.1/9; done")
	if after := ns.Run("nft", "list", "ruleset"); after == rulesBefore || !strings.Contains(after, "used 680 bytes") {
		t.Fatalf("the traffic changed no state; ruleset:\n%s", after)
	}
	after := sums()
	for k, v := range before {
		if after[k] != v {
			t.Errorf("chain %s: Sum %x before traffic, %x after", k, v, after[k])
		}
	}
}
