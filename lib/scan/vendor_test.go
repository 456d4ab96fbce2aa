package scan

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/catalog"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// Rulesets in the shape each vendor documents (its chain names, marks,
// uids and ports), written below by the real iptables-nft-restore; a
// table is "*table" and its lines up to COMMIT.
var vendorRules = map[string]string{
	// Istio sidecar (istio-init): redirection chains, the proxy's uid 1337.
	"istio": `*nat
:ISTIO_INBOUND - [0:0]
:ISTIO_IN_REDIRECT - [0:0]
:ISTIO_OUTPUT - [0:0]
:ISTIO_REDIRECT - [0:0]
-A PREROUTING -p tcp -j ISTIO_INBOUND
-A OUTPUT -p tcp -j ISTIO_OUTPUT
-A ISTIO_INBOUND -p tcp --dport 15008 -j RETURN
-A ISTIO_INBOUND -p tcp -j ISTIO_IN_REDIRECT
-A ISTIO_IN_REDIRECT -p tcp -j REDIRECT --to-ports 15006
-A ISTIO_OUTPUT -m owner --uid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -j ISTIO_REDIRECT
-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001
COMMIT
`,
	// Istio ambient, istio-cni in the pod: ISTIO_PRERT/ISTIO_OUTPUT, mark
	// 0x539 and connmark 0x111.
	"istio-ambient": `*mangle
:ISTIO_PRERT - [0:0]
:ISTIO_OUTPUT - [0:0]
-A PREROUTING -j ISTIO_PRERT
-A OUTPUT -j ISTIO_OUTPUT
-A ISTIO_PRERT -m mark --mark 0x539/0xfff -j CONNMARK --set-xmark 0x111/0xfff
-A ISTIO_OUTPUT -m connmark --mark 0x111/0xfff -j CONNMARK --restore-mark --nfmask 0xffffffff --ctmask 0xffffffff
COMMIT
*nat
:ISTIO_PRERT - [0:0]
:ISTIO_OUTPUT - [0:0]
-A PREROUTING -j ISTIO_PRERT
-A OUTPUT -j ISTIO_OUTPUT
-A ISTIO_PRERT -p tcp -m mark ! --mark 0x539/0xfff -j REDIRECT --to-ports 15006
-A ISTIO_OUTPUT -p tcp -m mark --mark 0x111/0xfff -j ACCEPT
COMMIT
`,
	// Chaos Mesh's chaos-daemon (pkg/chaosdaemon/iptables_server.go):
	// CHAOS-INPUT/CHAOS-OUTPUT jumped to from INPUT/OUTPUT, one chain per
	// experiment behind them (the controller names it; this name is made
	// up, and its ipset match left out).
	"chaos-mesh": `*filter
:CHAOS-INPUT - [0:0]
:CHAOS-OUTPUT - [0:0]
:EXPERIMENT_OUT - [0:0]
-A INPUT -j CHAOS-INPUT
-A OUTPUT -j CHAOS-OUTPUT
-A CHAOS-OUTPUT -j EXPERIMENT_OUT
-A EXPERIMENT_OUT -p tcp -j DROP
COMMIT
`,
	// Linkerd proxy-init in iptablesMode nft.
	"linkerd": `*nat
:PROXY_INIT_REDIRECT - [0:0]
:PROXY_INIT_OUTPUT - [0:0]
-A PREROUTING -j PROXY_INIT_REDIRECT
-A OUTPUT -j PROXY_INIT_OUTPUT
-A PROXY_INIT_REDIRECT -p tcp -j REDIRECT --to-ports 4143
-A PROXY_INIT_OUTPUT -m owner --uid-owner 2102 -j RETURN
-A PROXY_INIT_OUTPUT -p tcp -j REDIRECT --to-ports 4140
COMMIT
`,
	// Consul transparent proxy (consul sdk/iptables chain names).
	"consul": `*nat
:CONSUL_PROXY_INBOUND - [0:0]
:CONSUL_PROXY_IN_REDIRECT - [0:0]
:CONSUL_PROXY_OUTPUT - [0:0]
:CONSUL_PROXY_REDIRECT - [0:0]
:CONSUL_DNS_REDIRECT - [0:0]
-A PREROUTING -p tcp -j CONSUL_PROXY_INBOUND
-A OUTPUT -p tcp -j CONSUL_PROXY_OUTPUT
-A OUTPUT -p udp --dport 53 -j CONSUL_DNS_REDIRECT
-A CONSUL_PROXY_INBOUND -p tcp -j CONSUL_PROXY_IN_REDIRECT
-A CONSUL_PROXY_IN_REDIRECT -p tcp -j REDIRECT --to-ports 20000
-A CONSUL_PROXY_OUTPUT -j CONSUL_PROXY_REDIRECT
-A CONSUL_PROXY_REDIRECT -p tcp -j REDIRECT --to-ports 15001
-A CONSUL_DNS_REDIRECT -p udp -d 127.0.0.1 --dport 53 -j DNAT --to-destination 127.0.0.1:8600
COMMIT
`,
	// Kuma / Kong Mesh transparent proxy.
	"kuma": `*nat
:KUMA_MESH_INBOUND - [0:0]
:KUMA_MESH_INBOUND_REDIRECT - [0:0]
:KUMA_MESH_OUTBOUND - [0:0]
:KUMA_MESH_OUTBOUND_REDIRECT - [0:0]
-A PREROUTING -p tcp -j KUMA_MESH_INBOUND
-A OUTPUT -p tcp -j KUMA_MESH_OUTBOUND
-A KUMA_MESH_INBOUND -p tcp -j KUMA_MESH_INBOUND_REDIRECT
-A KUMA_MESH_INBOUND_REDIRECT -p tcp -j REDIRECT --to-ports 15006
-A KUMA_MESH_OUTBOUND -m owner --uid-owner 5678 -j RETURN
-A KUMA_MESH_OUTBOUND -p tcp -j KUMA_MESH_OUTBOUND_REDIRECT
-A KUMA_MESH_OUTBOUND_REDIRECT -p tcp -j REDIRECT --to-ports 15001
COMMIT
`,
	// Open Service Mesh (OSM_PROXY_* since openservicemesh/osm#4379).
	"osm": `*nat
:OSM_PROXY_INBOUND - [0:0]
:OSM_PROXY_IN_REDIRECT - [0:0]
:OSM_PROXY_OUTBOUND - [0:0]
:OSM_PROXY_OUT_REDIRECT - [0:0]
-A PREROUTING -p tcp -j OSM_PROXY_INBOUND
-A OUTPUT -p tcp -j OSM_PROXY_OUTBOUND
-A OSM_PROXY_INBOUND -p tcp -j OSM_PROXY_IN_REDIRECT
-A OSM_PROXY_IN_REDIRECT -p tcp -j REDIRECT --to-ports 15003
-A OSM_PROXY_OUTBOUND -p tcp -j OSM_PROXY_OUT_REDIRECT
-A OSM_PROXY_OUT_REDIRECT -p tcp -j REDIRECT --to-ports 15001
COMMIT
`,
	// AWS App Mesh proxy route manager.
	"appmesh": `*nat
:APPMESH_INGRESS - [0:0]
:APPMESH_EGRESS - [0:0]
-A PREROUTING -p tcp -j APPMESH_INGRESS
-A OUTPUT -p tcp -j APPMESH_EGRESS
-A APPMESH_INGRESS -p tcp --dport 9080 -j REDIRECT --to-ports 15000
-A APPMESH_EGRESS -m owner --uid-owner 1337 -j RETURN
-A APPMESH_EGRESS -p tcp -j REDIRECT --to-ports 15001
COMMIT
`,
	// Azure Monitor Agent: the metadata service redirected into the pod.
	"azure-monitor-agent": `*nat
-A OUTPUT -p tcp -d 169.254.169.254 --dport 80 -j DNAT --to-destination 127.0.0.1:8421
-A PREROUTING -p tcp -d 169.254.169.254 --dport 80 -j DNAT --to-destination 127.0.0.1:8421
COMMIT
`,
	// Docker in Docker: the inner dockerd's chains.
	"docker": `*filter
:DOCKER - [0:0]
:DOCKER-USER - [0:0]
:DOCKER-ISOLATION-STAGE-1 - [0:0]
:DOCKER-ISOLATION-STAGE-2 - [0:0]
-A FORWARD -j DOCKER-USER
-A FORWARD -j DOCKER-ISOLATION-STAGE-1
-A FORWARD -o docker0 -j DOCKER
-A DOCKER-ISOLATION-STAGE-1 -i docker0 ! -o docker0 -j DOCKER-ISOLATION-STAGE-2
-A DOCKER-ISOLATION-STAGE-2 -o docker0 -j DROP
-A DOCKER-USER -j RETURN
COMMIT
*nat
:DOCKER - [0:0]
-A POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE
-A DOCKER -i docker0 -j RETURN
COMMIT
`,
	// kube-proxy of a cluster inside the pod (kind).
	"kube-proxy": `*nat
:KUBE-SERVICES - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-MARK-MASQ - [0:0]
-A PREROUTING -j KUBE-SERVICES
-A OUTPUT -j KUBE-SERVICES
-A POSTROUTING -j KUBE-POSTROUTING
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
-A KUBE-POSTROUTING -m mark --mark 0x4000/0x4000 -j MASQUERADE
COMMIT
`,
	// Calico felix of a cluster inside the pod.
	"calico": `*filter
:cali-INPUT - [0:0]
:cali-FORWARD - [0:0]
-A INPUT -j cali-INPUT
-A FORWARD -j cali-FORWARD
-A cali-INPUT -m mark --mark 0x10000/0x10000 -j ACCEPT
-A cali-FORWARD -i cali+ -j ACCEPT
COMMIT
`,
	// Cilium of a cluster inside the pod.
	"cilium": `*filter
:CILIUM_INPUT - [0:0]
:CILIUM_FORWARD - [0:0]
-A INPUT -j CILIUM_INPUT
-A FORWARD -j CILIUM_FORWARD
-A CILIUM_INPUT -m mark --mark 0x200/0xf00 -j ACCEPT
-A CILIUM_FORWARD -o cilium_host -j ACCEPT
COMMIT
`,
	// Nobody's framework: a port filter, a masquerade and a user chain.
	"generic": `*filter
:MYAPP - [0:0]
-A INPUT -p tcp --dport 22 -j ACCEPT
-A INPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT
-A INPUT -j MYAPP
-A MYAPP -p tcp --dport 8421 -j DROP
-A OUTPUT -m owner --uid-owner 1000 -j ACCEPT
COMMIT
*nat
-A POSTROUTING -o eth0 -j MASQUERADE
-A OUTPUT -d 169.254.169.254 -p tcp --dport 80 -j DNAT --to-destination 10.0.0.1:80
COMMIT
`,
}

// vendorsOf scans the netns as the hook does, with the built-in table.
func vendorsOf(t *testing.T, ns *nstest.NS) []findings.Vendor {
	t.Helper()
	return vendorsFor(t, ns, findings.SubjectPod)
}

// vendorsFor scans the netns as the scan of subject does (a pod's, or
// the agent's node mode).
func vendorsFor(t *testing.T, ns *nstest.NS, subject findings.Subject) []findings.Vendor {
	t.Helper()
	res := readNS(t, ns)
	res.Vendors = catalog.Builtin()
	return Build(Meta{Subject: subject}, res).Vendors
}

func vendorNames(vs []findings.Vendor) []string {
	out := []string{}
	for _, v := range vs {
		out = append(out, v.Name)
	}
	return out
}

// TestVendors: each vendor's ruleset, written by the real
// iptables-nft-restore, names that vendor with its hint, and only it; a
// generic ruleset names none; a pod mixing two vendors names both.
func TestVendors(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft-restore")
	for _, name := range append(slices.Clone(findings.VendorNames), "generic") {
		t.Run(name, func(t *testing.T) {
			rules, ok := vendorRules[name]
			if !ok {
				t.Fatalf("no ruleset for vendor %q", name)
			}
			ns := nstest.New(t)
			ns.Restore(rules, "iptables-nft-restore", "--noflush")
			got := vendorsOf(t, ns)
			want := []string{name}
			if name == "generic" {
				want = []string{}
			}
			if !slices.Equal(vendorNames(got), want) {
				t.Fatalf("vendors %v, want %v", vendorNames(got), want)
			}
			if name != "generic" && got[0].Hint == "" {
				t.Errorf("no hint for %s", name)
			}
			// The same rules in a node's own namespace: the node's wording
			// (issue 25: "kube-proxy chains in a pod" under Node/NAME).
			node := vendorsFor(t, ns, findings.SubjectNode)
			if !slices.Equal(vendorNames(node), want) {
				t.Fatalf("node vendors %v, want %v", vendorNames(node), want)
			}
			if name != "generic" && (node[0].Hint == got[0].Hint || !strings.Contains(node[0].Hint, "node")) {
				t.Errorf("node hint of %s: %q, pod hint %q", name, node[0].Hint, got[0].Hint)
			}
		})
	}
	// Linkerd's default iptablesMode is legacy: the chains of the legacy
	// table name it; so do Istio's in ip6tables-legacy.
	t.Run("legacy", func(t *testing.T) {
		nstest.NeedRoot(t, "iptables-legacy-restore", "ip6tables-legacy-restore")
		ns := nstest.New(t)
		ns.Restore(vendorRules["linkerd"], "iptables-legacy-restore", "--noflush")
		ns.Restore(vendorRules["istio"], "ip6tables-legacy-restore", "--noflush")
		got := vendorsOf(t, ns)
		if !slices.Equal(vendorNames(got), []string{"istio", "linkerd"}) {
			t.Fatalf("vendors %v, want istio and linkerd", vendorNames(got))
		}
	})
	// A vendor known by its rules, not its chains, is named from the
	// decoded legacy rules too.
	t.Run("rules legacy", func(t *testing.T) {
		nstest.NeedRoot(t, "iptables-legacy-restore")
		ns := nstest.New(t)
		ns.Restore(vendorRules["azure-monitor-agent"], "iptables-legacy-restore", "--noflush")
		if got := vendorsOf(t, ns); !slices.Equal(vendorNames(got), []string{"azure-monitor-agent"}) {
			t.Fatalf("vendors %v, want azure-monitor-agent", vendorNames(got))
		}
	})
	// Chaos Mesh's image forces iptables-legacy.
	t.Run("chaos-mesh legacy", func(t *testing.T) {
		nstest.NeedRoot(t, "iptables-legacy-restore")
		ns := nstest.New(t)
		ns.Restore(vendorRules["chaos-mesh"], "iptables-legacy-restore", "--noflush")
		if got := vendorsOf(t, ns); !slices.Equal(vendorNames(got), []string{"chaos-mesh"}) {
			t.Fatalf("vendors %v, want chaos-mesh", vendorNames(got))
		}
	})
	t.Run("two vendors", func(t *testing.T) {
		ns := nstest.New(t)
		ns.Restore(vendorRules["linkerd"], "iptables-nft-restore", "--noflush")
		ns.Restore(vendorRules["docker"], "iptables-nft-restore", "--noflush")
		got := vendorsOf(t, ns)
		if !slices.Equal(vendorNames(got), []string{"linkerd", "docker"}) {
			t.Fatalf("vendors %v, want linkerd and docker", vendorNames(got))
		}
		if !strings.Contains(got[0].Hint, "proxyInit.iptablesMode=nft") || !strings.Contains(got[1].Hint, "firewall-backend") {
			t.Errorf("hints: %+v", got)
		}
	})
}

// TestVendorsBeyondRenderedRules: a vendor whose rules come after the
// rules Build renders is still named, from the chain list.
func TestVendorsBeyondRenderedRules(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft-restore")
	ns := nstest.New(t)
	var b strings.Builder
	b.WriteString("*filter\n")
	for i := 0; i < 2*maxExampleCandidates; i++ {
		fmt.Fprintf(&b, "-A INPUT -p tcp --dport %d -j ACCEPT\n", 1000+i)
	}
	b.WriteString("COMMIT\n")
	ns.Restore(b.String(), "iptables-nft-restore", "--noflush")
	ns.Restore(vendorRules["kuma"], "iptables-nft-restore", "--noflush")
	res := readNS(t, ns)
	for _, r := range res.Usage.Rules[:maxExampleCandidates] {
		if strings.HasPrefix(r.Chain, "KUMA_") {
			t.Fatalf("kuma rule %s among the first %d rules: the test does not test", r.Chain, maxExampleCandidates)
		}
	}
	res.Vendors = catalog.Builtin()
	if got := vendorNames(Build(Meta{}, res).Vendors); !slices.Equal(got, []string{"kuma"}) {
		t.Fatalf("vendors %v, want kuma", got)
	}
}
