package agent

import (
	"fmt"

	"github.com/iptables-alerter/iptables-alerter/lib/allowlist"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/netns"
	"github.com/iptables-alerter/iptables-alerter/lib/scan"
)

// Node mode (Config.HostNetns): the watch on the node's own network
// namespace. Its rules are the platform's (kube-proxy, the kubelet, the
// cluster network, CNI plugins): the built-in platform allowlist takes
// those away there, and only there. What is left at the start is recorded
// once, with no writer (who wrote it is not known); every later commit
// that changes it names its writer: a host-network pod's container by its
// cgroup, or a systemd unit. Its records have subject node and no pod.

// nodeKey keys the node's watch in the queue, the per-sandbox memory and
// the limit: never a sandbox id (those are 64 hex digits).
const nodeKey = "node"

// stageNodeStart is the node watch's first scan, once its monitor is open:
// what the node holds before any commit the watch saw.
const stageNodeStart = "node start"

// checkHostNetns checks Config.HostNetns: a network namespace, and the
// node's when HostProc names it (tests point both at a stand-in, never at
// the host's).
func (a *Agent) checkHostNetns() error {
	h, err := netns.Open(a.cfg.HostNetns)
	if err != nil {
		return fmt.Errorf("%w: open the node's network namespace %q: %w", ErrConfig, a.cfg.HostNetns, err)
	}
	defer h.Close()
	if a.nodeNetns != "" && !a.isNode(h) {
		return fmt.Errorf("%w: %q is not the node's network namespace (%s/1/ns/net)", ErrConfig, a.cfg.HostNetns, a.cfg.HostProc)
	}
	return nil
}

// watchNode starts the node's watch; its first scan is queued once the
// monitor is open (follow), so no commit falls between the two.
func (a *Agent) watchNode() {
	if a.cfg.HostNetns == "" {
		return
	}
	m := scan.Meta{Node: a.cfg.Node, Subject: findings.SubjectNode, Source: SourceWatch, Stage: stageCommit,
		SandboxID: nodeKey, Netns: a.cfg.HostNetns}
	w := &watched{meta: m, node: true, done: make(chan struct{}), ready: make(chan struct{})}
	ws := a.watches
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.closed {
		return
	}
	ws.node = w
	ws.wg.Add(1)
	go a.follow(w, true)
}

// isNodeJob tells whether j scans the node's namespace.
func isNodeJob(m scan.Meta) bool { return m.Subject == findings.SubjectNode }

// loaders are the tables a scan applies: for the node, the platform list
// (with the plugins of Config.Platforms) after the admin's, and every rule
// read in detail, for the platform list to see kube-proxy's all.
func (a *Agent) loaders(m scan.Meta) scan.Loaders {
	if !isNodeJob(m) {
		return a.cfg.Load
	}
	l := a.cfg.Load
	// Checked by New: an unknown name never gets here.
	l.Platform, _ = allowlist.Platform(a.cfg.Platforms...)
	l.Detail = scan.NodeDetail
	return l
}
