package allowlist

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/iptables-alerter/iptables-alerter/lib/classify"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
)

// TestPlatform (issue 19 item 2): the node's own components' rules are
// taken away by name, a writer's own are not; every entry says where its
// chain names come from.
func TestPlatform(t *testing.T) {
	l := Platform()
	for _, e := range l.entries {
		if e.Source == "" {
			t.Errorf("entry %q has no source", e.Name)
		}
	}
	r := func(chain string) inspect.Rule {
		return inspect.Rule{Family: inspect.IP, Table: "filter", Chain: chain}
	}
	tests := []struct {
		name string
		rule inspect.Rule
		text string
		want string
	}{
		{"kubelet firewall jump", r("INPUT"), "-A INPUT -j KUBE-FIREWALL", "platform-kubelet"},
		{"kubelet firewall rule", r("KUBE-FIREWALL"), `-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet connections" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP`, "platform-kubelet"},
		{"kube-proxy service jump", r("OUTPUT"), `-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`, "platform-kube-proxy"},
		{"kube-proxy endpoint", r("KUBE-SEP-ABCDEFGHIJKLMNOP"), "-A KUBE-SEP-ABCDEFGHIJKLMNOP -p tcp -m tcp -j DNAT --to-destination 10.0.0.1:80", "platform-kube-proxy"},
		{"ovn-kubernetes", r("PREROUTING"), "-A PREROUTING -j OVN-KUBE-NODEPORT", "platform-ovn-kubernetes"},
		{"portmap", r("CNI-HOSTPORT-DNAT"), "-A CNI-HOSTPORT-DNAT -p tcp -j CNI-DN-0123abcd", "platform-cni-plugins"},
		{"docker", r("FORWARD"), "-A FORWARD -j DOCKER-USER", "platform-docker"},
		{"a writer's own rule", r("INPUT"), "-A INPUT -p tcp --dport 22 -j DROP", ""},
		// A jump to a platform chain must end the rule: nothing hides behind it.
		{"a writer's own chain", r("EVIL"), "-A EVIL -j KUBE-FIREWALL", ""},
		{"a canary-like name", r("KUBE-FIREWALLX"), "-A KUBE-FIREWALLX -j DROP", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := l.Match("", tc.rule, func() string { return tc.text }); got != tc.want {
				t.Errorf("Match(%q) = %q, want %q", tc.text, got, tc.want)
			}
		})
	}
}

// TestApplyEmptyUserChain: an empty user chain is usage; an entry matching
// its declaration takes it away, one matching only rules does not.
func TestApplyEmptyUserChain(t *testing.T) {
	u := classify.Usage{Chains: []classify.Chain{
		{Family: inspect.IP, Table: "mangle", Name: "KUBE-KUBELET-CANARY", User: true},
		{Family: inspect.IP, Table: "filter", Name: "MINE", User: true},
	}}
	out, res := Platform().Apply(u, "", func(inspect.Rule) string { return "" })
	want := Result{Count: 1, Entries: []string{"platform-kubelet"}}
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
