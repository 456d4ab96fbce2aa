package nri

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/findingstest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/tests/runtime/critest"
)

// nodeRecords are the records about the node.
func nodeRecords(t *testing.T, f agentFiles) []findings.Record {
	t.Helper()
	var got []findings.Record
	for _, r := range findingstest.Read(t, f.findings) {
		if r.KnownSubject() == findings.SubjectNode {
			got = append(got, r)
		}
	}
	return got
}

// TestCRIONodeMode (issue 19): the agent's node mode (--host-netns) on
// CRI-O, the node's netns stood in for by the one CRI-O runs in, which
// host-network pods share (the real host's is never watched). The node's
// rule present at the start is recorded once, with no writer; a
// host-network container's iptables-nft-restore writing there is named
// with its container and pod in a record of the node's (no pod); the
// kubelet's platform chains written afterwards make no record.
func TestCRIONodeMode(t *testing.T) {
	c := critest.StartCRIO(t, "")
	f := newFiles(t)
	nodeRule(t, c.CRI)
	// Pid 1 of the stand-in is in CRI-O's netns: a bare --host-netns is it.
	hostProc := nstest.HostProc(t, "/run/netns/"+c.Netns)
	a := startAgentArgs(t, f, "--nri-socket", c.NRISocket, "--watch", "--host-proc", hostProc, "--host-netns")
	records := func() []findings.Record { return nodeRecords(t, f) }

	start := waitN(t, a, 1, records)[0]
	if start.Source != "watch" || start.Writer != nil || start.Pod != (findings.Pod{}) || start.SandboxID != "" || start.Node != "test-node" || start.Nft.Rules != 1 {
		t.Errorf("start record: source %q writer %+v pod %+v sandbox %q node %q, %d rules; want the watch's, no writer, no pod, node test-node, the node's 1 rule",
			start.Source, start.Writer, start.Pod, start.SandboxID, start.Node, start.Nft.Rules)
	}

	host := c.RunPod("hostnet", true)
	w := runRestorer(t, c.CRI, host, hostProc, "mesh-agent")
	w.commit(t, "nat", "-A POSTROUTING -s 10.8.0.0/16 -j MASQUERADE")
	got := waitN(t, a, 2, records)
	r := got[1]
	if r.Writer == nil {
		t.Fatalf("host-network container's record without writer: %+v; agent log:\n%s", r, a.log)
	}
	ww := *r.Writer
	t.Logf("writer %s (pid %d) of container %q (%s), pod %+v, parent %s", ww.Comm, ww.PID, ww.Container, ww.ContainerID, ww.Pod, ww.ParentComm)
	if ww.Comm != "iptables-nft-re" || ww.PID != w.pid || ww.Gone || ww.Container != "mesh-agent" || ww.ContainerID == "" ||
		ww.Pod != (findings.Pod{Namespace: "ipta-test", Name: host.Name, UID: host.UID}) {
		t.Errorf("writer %+v, want iptables-nft-restore (comm iptables-nft-re, pid %d) of container mesh-agent in pod ipta-test/%s uid %s",
			ww, w.pid, host.Name, host.UID)
	}
	if r.Subject != findings.SubjectNode || r.Pod != (findings.Pod{}) || r.SandboxID != "" || r.ContainerID != "" || r.Container != "" || r.Node != "test-node" || r.Nft.Rules != 2 {
		t.Errorf("record %+v, want the node's (subject node, node test-node, no pod, sandbox or container) with 2 rules", r)
	}

	// The kubelet's chains as it writes them (KUBE-FIREWALL's rule from
	// kubelet_network_linux.go), then a rule of no platform's: its record
	// is the first after the host-network container's, and its scan saw
	// the kubelet's chains (they are in the ruleset it read), allowlisted.
	w.commit(t, "mangle", ":KUBE-KUBELET-CANARY - [0:0]")
	w.commit(t, "filter", ":KUBE-FIREWALL - [0:0]\n-A INPUT -j KUBE-FIREWALL\n"+
		`-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet connections" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP`)
	w.commit(t, "filter", "-A INPUT -p tcp --dport 9400 -j DROP")
	got = waitN(t, a, 3, records)
	if out, err := exec.Command("ip", "netns", "exec", c.Netns, "iptables-nft-save").CombinedOutput(); err != nil || !strings.Contains(string(out), "KUBE-FIREWALL") {
		t.Errorf("the kubelet's chains not in the node's netns (%v):\n%s", err, out)
	}
	last := got[2]
	if last.Nft.Rules != 3 || !strings.Contains(strings.Join(last.AllowlistEntries, ","), "platform-kubelet") || last.Writer == nil || last.Writer.Container != "mesh-agent" {
		t.Errorf("record after the kubelet's chains and a rule: %d rules, allowlisted %v, writer %+v; want 3 (the node's, the MASQUERADE, the DROP), platform-kubelet, mesh-agent's; agent log:\n%s",
			last.Nft.Rules, last.AllowlistEntries, last.Writer, a.log)
	}
	if len(got) != 3 {
		t.Errorf("%d node records, want 3 (start, the container's, the last rule's): the kubelet's chains made one: %+v", len(got), got)
	}
	if p := forPod(findingstest.Read(t, f.findings), host.Name); len(p) != 0 {
		t.Errorf("host-network pod flagged as a pod: %+v", p)
	}
}
