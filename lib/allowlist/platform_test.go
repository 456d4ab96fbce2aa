package allowlist

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/iptables-alerter/iptables-alerter/lib/classify"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
)

// TestPlatform (issues 19 and 25): the node's own components' rules are
// taken away by their exact shapes (canonical text, as render prints what
// they write), never by their chain's name alone; a plugin's only when it
// is named; every entry says where its shapes come from.
func TestPlatform(t *testing.T) {
	for _, e := range platformEntries() {
		if e.Source == "" {
			t.Errorf("entry %q has no source", e.Name)
		}
	}
	all, err := Platform(Plugins()...)
	if err != nil {
		t.Fatal(err)
	}
	base, err := Platform()
	if err != nil {
		t.Fatal(err)
	}
	r := func(fam inspect.Family, table, chain string) inspect.Rule {
		return inspect.Rule{Family: fam, Table: table, Chain: chain}
	}
	f := func(chain string) inspect.Rule { return r(inspect.IP, "filter", chain) }
	n := func(chain string) inspect.Rule { return r(inspect.IP, "nat", chain) }
	tests := []struct {
		name string
		rule inspect.Rule
		text string
		want string
		// plugin is set for a plugin's rule: unnamed, it is reported.
		plugin bool
	}{
		{"kubelet firewall jump", f("INPUT"), "-A INPUT -j KUBE-FIREWALL", "platform-kubelet", false},
		{"kubelet firewall rule", f("KUBE-FIREWALL"), `-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet connections" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP`, "platform-kubelet", false},
		{"kube-proxy filter jump", f("OUTPUT"), `-A OUTPUT -m comment --comment "kubernetes service portals" -m conntrack --ctstate NEW -j KUBE-SERVICES`, "platform-kube-proxy", false},
		{"kube-proxy nat jump", n("PREROUTING"), `-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`, "platform-kube-proxy", false},
		{"kube-proxy cluster IP", n("KUBE-SERVICES"), `-A KUBE-SERVICES -d 172.30.0.41 -p tcp --dport 80 -m comment --comment "ns1/svc1:p80 cluster IP" -j KUBE-SVC-XPGD46QRK7WJZT7O`, "platform-kube-proxy", false},
		{"kube-proxy endpoint", n("KUBE-SEP-C6EBXVWJJZMIWKLZ"), `-A KUBE-SEP-C6EBXVWJJZMIWKLZ -p tcp -m comment --comment "ns4/svc4:p80" -j DNAT --to-destination 10.180.0.5:80`, "platform-kube-proxy", false},
		{"kube-proxy endpoint, large cluster", n("KUBE-SEP-C6EBXVWJJZMIWKLZ"), `-A KUBE-SEP-C6EBXVWJJZMIWKLZ -p tcp -j DNAT --to-destination 10.180.0.5:80`, "platform-kube-proxy", false},
		{"kube-proxy IPv6 endpoint", r(inspect.IP6, "nat", "KUBE-SEP-C6EBXVWJJZMIWKLZ"), `-A KUBE-SEP-C6EBXVWJJZMIWKLZ -p tcp -m comment --comment "ns4/svc4:p80" -j DNAT --to-destination [fd00:10:180::5]:80`, "platform-kube-proxy", false},
		{"kube-proxy service to endpoint", n("KUBE-SVC-4SW47YFZTEDKD3PK"), `-A KUBE-SVC-4SW47YFZTEDKD3PK -m comment --comment "ns4/svc4:p80 -> 10.180.0.4:80" -m statistic --mode random --probability 0.50000000000 -j KUBE-SEP-UKSFD7AGPMPPLUHC`, "platform-kube-proxy", false},
		{"kube-proxy masquerade", n("KUBE-POSTROUTING"), `-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully`, "platform-kube-proxy", false},
		{"kube-proxy canary", f("KUBE-PROXY-CANARY"), "-N KUBE-PROXY-CANARY", "platform-kube-proxy", false},
		{"ovn-kubernetes jump", n("PREROUTING"), "-A PREROUTING -j OVN-KUBE-NODEPORT", "platform-ovn-kubernetes", true},
		{"ovn-kubernetes node port", n("OVN-KUBE-NODEPORT"), "-A OVN-KUBE-NODEPORT -p tcp --dport 31080 -m addrtype --dst-type LOCAL -j DNAT --to-destination 172.30.0.10:80", "platform-ovn-kubernetes", true},

		// A writer's own, in the node's namespace: reported.
		{"a writer's own rule", f("INPUT"), "-A INPUT -p tcp --dport 22 -j DROP", "", false},
		{"a DROP appended to KUBE-FIREWALL", f("KUBE-FIREWALL"), "-A KUBE-FIREWALL -p tcp --dport 22 -j DROP", "", false},
		{"an accept in KUBE-SERVICES", f("KUBE-SERVICES"), "-A KUBE-SERVICES -j ACCEPT", "", false},
		{"a DNAT in a kube-proxy endpoint chain without its shape", n("KUBE-SEP-C6EBXVWJJZMIWKLZ"), "-A KUBE-SEP-C6EBXVWJJZMIWKLZ -p tcp -j DNAT --to-destination 10.180.0.5:80 --random", "", false},
		{"a kube-proxy masquerade with a match added", n("KUBE-POSTROUTING"), `-A KUBE-POSTROUTING -s 10.0.0.0/8 -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE`, "", false},
		{"a MASQUERADE in a chain named like ovn-kubernetes'", n("OVN-KUBE-EVIL"), "-A OVN-KUBE-EVIL -s 10.0.0.0/8 -j MASQUERADE", "", false},
		{"a jump to it", n("POSTROUTING"), "-A POSTROUTING -j OVN-KUBE-EVIL", "", false},
		{"its declaration", n("OVN-KUBE-EVIL"), "-N OVN-KUBE-EVIL", "", false},
		{"a jump to a platform chain from a writer's own", f("EVIL"), "-A EVIL -j KUBE-FIREWALL", "", false},
		{"a canary-like name", f("KUBE-FIREWALLX"), "-A KUBE-FIREWALLX -j DROP", "", false},
		{"a kube-proxy chain name with a bad hash", n("KUBE-SVC-abc"), "-N KUBE-SVC-abc", "", false},
		{"the kubelet's rule in table nat", n("KUBE-FIREWALL"), `-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet connections" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP`, "", false},
	}
	// A declaration is matched as Apply matches an empty user chain's.
	match := func(l *List, r inspect.Rule, text string) string {
		if strings.HasPrefix(text, "-N ") {
			if e := l.matchChain("", classify.Chain{Family: r.Family, Table: r.Table, Name: r.Chain}); e != nil {
				return e.Name
			}
			return ""
		}
		return l.Match("", r, func() string { return text })
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := match(all, tc.rule, tc.text); got != tc.want {
				t.Errorf("with every plugin: Match(%q) = %q, want %q", tc.text, got, tc.want)
			}
			want := tc.want
			if tc.plugin {
				want = ""
			}
			if got := match(base, tc.rule, tc.text); got != want {
				t.Errorf("with no plugin: Match(%q) = %q, want %q", tc.text, got, want)
			}
		})
	}
}

// TestPlatformPlugins: the plugins are named by the entries; an unknown
// name is an error naming the known ones.
func TestPlatformPlugins(t *testing.T) {
	if got := Plugins(); !cmp.Equal(got, []string{"ovn-kubernetes"}) {
		t.Errorf("Plugins() = %v", got)
	}
	if _, err := Platform("ovn-kubernetes", "calico"); err == nil || !strings.Contains(err.Error(), `"calico"`) || !strings.Contains(err.Error(), "ovn-kubernetes") {
		t.Errorf("Platform(calico): %v, want an error naming it and the known plugins", err)
	}
}

// TestApplyEmptyUserChain: an empty user chain is usage; an entry matching
// its declaration takes it away, one matching only rules does not.
func TestApplyEmptyUserChain(t *testing.T) {
	u := classify.Usage{Chains: []classify.Chain{
		{Family: inspect.IP, Table: "mangle", Name: "KUBE-KUBELET-CANARY", User: true},
		{Family: inspect.IP, Table: "filter", Name: "MINE", User: true},
	}}
	platform, err := Platform()
	if err != nil {
		t.Fatal(err)
	}
	out, res := platform.Apply(u, "", func(inspect.Rule) string { return "" })
	want := Result{Count: 1, Entries: []string{"platform-kubelet"}, Worst: findings.ImpactNative}
	if diff := cmp.Diff(want, res); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
	if out.Chains[0].Used() || !out.Chains[1].Used() {
		t.Errorf("chains after Apply: %+v, want only MINE used", out.Chains)
	}
	if _, res := Default().Apply(u, "", func(inspect.Rule) string { return "" }); res.Count != 0 {
		t.Errorf("the pod list took %d chains", res.Count)
	}
}
