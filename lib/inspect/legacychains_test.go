package inspect_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
)

func legacyTable(s inspect.Snapshot, fam inspect.Family, name string) *inspect.LegacyTable {
	for i, l := range s.Legacy {
		if l.Family == fam && l.Name == name {
			return &s.Legacy[i]
		}
	}
	return nil
}

// TestLegacyChainNames: the user chains the real iptables-legacy and
// ip6tables-legacy made are named, in the probe process (this test binary
// is wired), without changing the netns; a table of only its untouched
// entries is not read; names are capped.
func TestLegacyChainNames(t *testing.T) {
	nstest.NeedRoot(t, "iptables-legacy", "ip6tables-legacy", "iptables-legacy-restore")
	ns := nstest.New(t)
	ns.Run("iptables-legacy", "-t", "nat", "-N", "PROXY_INIT_REDIRECT")
	ns.Run("iptables-legacy", "-t", "nat", "-N", "PROXY_INIT_OUTPUT")
	ns.Run("iptables-legacy", "-t", "nat", "-A", "PREROUTING", "-j", "PROXY_INIT_REDIRECT")
	ns.Run("iptables-legacy", "-t", "nat", "-A", "PROXY_INIT_OUTPUT", "-m", "owner", "--uid-owner", "2102", "-j", "RETURN")
	ns.Run("ip6tables-legacy", "-N", "ISTIO_INBOUND")
	ns.Run("ip6tables-legacy", "-A", "INPUT", "-j", "ISTIO_INBOUND")
	ns.Run("iptables-legacy", "-t", "mangle", "-L", "-n") // untouched table, listed
	var b strings.Builder
	b.WriteString("*raw\n")
	for i := 0; i < 100; i++ {
		fmt.Fprintf(&b, ":C%03d - [0:0]\n", i)
	}
	b.WriteString("COMMIT\n")
	ns.Restore(b.String(), "iptables-legacy-restore", "--noflush")

	s := look(t, ns, inspect.Options{})
	if nat := legacyTable(s, inspect.IP, "nat"); nat == nil || !slices.Equal(nat.Chains, []string{"PROXY_INIT_OUTPUT", "PROXY_INIT_REDIRECT"}) {
		t.Errorf("legacy ip nat = %+v, want chains PROXY_INIT_OUTPUT, PROXY_INIT_REDIRECT", nat)
	}
	if f := legacyTable(s, inspect.IP6, "filter"); f == nil || !slices.Equal(f.Chains, []string{"ISTIO_INBOUND"}) {
		t.Errorf("legacy ip6 filter = %+v, want chain ISTIO_INBOUND", f)
	}
	if m := legacyTable(s, inspect.IP, "mangle"); m == nil || m.Chains != nil {
		t.Errorf("untouched legacy ip mangle = %+v, want listed without chains", m)
	}
	if raw := legacyTable(s, inspect.IP, "raw"); raw == nil || len(raw.Chains) != 64 || raw.Chains[0] != "C000" {
		t.Errorf("legacy ip raw: %d chains (%v), want the first 64", len(raw.Chains), raw)
	}
}
