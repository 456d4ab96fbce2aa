package scan

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/allowlist"
	"github.com/iptables-alerter/iptables-alerter/lib/netns"
)

// nodeScan runs the node's scan of ns (NodeDetail, the platform list with
// plugins) and returns it with the text of every rule left.
func nodeScan(t *testing.T, ns *nstest.NS, detail int, plugins ...string) (Result, []string) {
	t.Helper()
	platform, err := allowlist.Platform(plugins...)
	if err != nil {
		t.Fatal(err)
	}
	h, err := netns.Open(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res := RunFrom(ctx, h, "", Loaders{Allow: func() (*allowlist.List, error) { return platform, nil }, Detail: detail}, false)
	if !res.Complete() {
		t.Fatalf("node scan incomplete: %v", res.Err)
	}
	var left []string
	for _, r := range res.Usage.Rules {
		left = append(left, fmt.Sprintf("%s %s %s", r.Family, r.Table, res.Text(r)))
	}
	for _, c := range res.Usage.Chains {
		if c.Used() && c.Rules == 0 {
			left = append(left, fmt.Sprintf("%s %s -N %s", c.Family, c.Table, c.Name))
		}
	}
	return res, left
}

// kubeProxyNode is a namespace holding kube-proxy's and the kubelet's
// ruleset for services Services, written by the real iptables-nft-restore.
func kubeProxyNode(t *testing.T, services int) *nstest.NS {
	t.Helper()
	nstest.NeedRoot(t, "iptables-nft-restore", "nfacct")
	ns := nstest.New(t)
	for _, name := range nstest.KubeProxyNfacct {
		ns.Run("nfacct", "add", name)
	}
	ns.Restore(nstest.KubeProxyRules(services), "iptables-nft-restore")
	return ns
}

// TestNodePlatformKubeProxy (issue 25): a node's kube-proxy ruleset of 300
// Services (about 3,000 rules, past inspect's default bound of 1,024) is
// the platform's, all of it: the node's scan leaves no usage. With the
// default bound the rules past it count (the defect: 484 rules of usage
// on a real node).
func TestNodePlatformKubeProxy(t *testing.T) {
	ns := kubeProxyNode(t, 300)
	res, left := nodeScan(t, ns, NodeDetail)
	if len(left) > 0 || !res.Usage.Empty() {
		t.Errorf("kube-proxy's ruleset left %d rules or chains of usage (allowlisted %d), first: %s", len(left), res.Allowed.Count, strings.Join(left[:min(len(left), 20)], "\n"))
	}
	if res.Allowed.Count < 2000 || !slices.Equal(res.Allowed.Entries, []string{"platform-kube-proxy", "platform-kubelet"}) {
		t.Errorf("allowlisted %d rules and chains by %v, want over 2,000 by kube-proxy's and the kubelet's entries", res.Allowed.Count, res.Allowed.Entries)
	}
	if res, _ := nodeScan(t, ns, 0); res.Usage.Empty() {
		t.Errorf("with the default bound the scan saw every rule: the ruleset is too small to test the bound")
	}
}

// TestNodePlatformHostile (issue 25): a rule of a platform's chain that is
// not of the platform's shapes, and a chain named like a platform's that
// the platform never writes, are reported; a plugin's own chains are taken
// only when the plugin is named.
func TestNodePlatformHostile(t *testing.T) {
	ns := kubeProxyNode(t, 20)
	// ovn-kubernetes' gateway rules (gateway_iptables.go), then a writer's
	// own: a DROP appended to the kubelet's KUBE-FIREWALL and a MASQUERADE
	// in a chain named like ovn-kubernetes'.
	ns.Restore(`*nat
:OVN-KUBE-NODEPORT - [0:0]
:OVN-KUBE-EXTERNALIP - [0:0]
-A PREROUTING -j OVN-KUBE-NODEPORT
-A OUTPUT -j OVN-KUBE-NODEPORT
-A PREROUTING -j OVN-KUBE-EXTERNALIP
-A OVN-KUBE-NODEPORT -p TCP -m addrtype --dst-type LOCAL --dport 31080 -j DNAT --to-destination 172.30.0.10:80
-A OVN-KUBE-EXTERNALIP -p TCP -d 192.0.2.77 --dport 80 -j DNAT --to-destination 172.30.0.10:80
COMMIT
`, "iptables-nft-restore", "--noflush")
	if _, left := nodeScan(t, ns, NodeDetail, "ovn-kubernetes"); len(left) > 0 {
		t.Errorf("ovn-kubernetes' rules, named, left usage: %s", strings.Join(left, "\n"))
	}
	if _, left := nodeScan(t, ns, NodeDetail); len(left) != 5 {
		t.Errorf("ovn-kubernetes' rules, not named: %d rules left, want its 5:\n%s", len(left), strings.Join(left, "\n"))
	}

	ns.Restore(`*filter
-A KUBE-FIREWALL -p tcp --dport 22 -j DROP
COMMIT
*nat
:OVN-KUBE-EVIL - [0:0]
-A POSTROUTING -j OVN-KUBE-EVIL
-A OVN-KUBE-EVIL -s 10.0.0.0/8 -j MASQUERADE
COMMIT
`, "iptables-nft-restore", "--noflush")
	res, left := nodeScan(t, ns, NodeDetail, "ovn-kubernetes")
	want := []string{
		"ip filter -A KUBE-FIREWALL -p tcp --dport 22 -j DROP",
		"ip nat -A POSTROUTING -j OVN-KUBE-EVIL",
		"ip nat -A OVN-KUBE-EVIL -s 10.0.0.0/8 -j MASQUERADE",
	}
	if !slices.Equal(left, want) {
		t.Errorf("left after the hostile rules:\n%s\nwant:\n%s", strings.Join(left, "\n"), strings.Join(want, "\n"))
	}
	var chains []string
	for _, c := range res.Usage.Chains {
		if c.Used() {
			chains = append(chains, c.Table+" "+c.Name)
		}
	}
	if !slices.Contains(chains, "filter KUBE-FIREWALL") || !slices.Contains(chains, "nat OVN-KUBE-EVIL") {
		t.Errorf("chains with usage %v, want KUBE-FIREWALL and OVN-KUBE-EVIL among them", chains)
	}
}

// TestNodePlatformCorpus (issue 25): kube-proxy's own expected ruleset of
// its TestOverallIPTablesRules (../shared/corpus, read at run time) is the
// platform's, all of it.
func TestNodePlatformCorpus(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft-restore", "nfacct")
	path, err := filepath.Abs(filepath.Join("..", "..", "..", "shared", "corpus", "kube-proxy-iptables-overall.rules"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = os.Stat(path)
	nstest.Need(t, err == nil, "needs the corpus: "+path)
	ns := nstest.New(t)
	for _, s := range readCorpusFile(t, path) {
		switch s.argv[0] {
		case "nfacct":
			for _, name := range strings.Fields(s.body) {
				ns.Run("nfacct", "add", name)
			}
		case "iptables-nft-restore":
			ns.Restore(s.body, s.argv...)
		default:
			t.Fatalf("loader %v not known here", s.argv)
		}
	}
	if res, left := nodeScan(t, ns, NodeDetail); len(left) > 0 || res.Allowed.Count < 60 {
		t.Errorf("kube-proxy's own ruleset: %d allowlisted, left:\n%s", res.Allowed.Count, strings.Join(left, "\n"))
	}
}
