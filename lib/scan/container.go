package scan

import (
	"github.com/sirupsen/logrus"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/ocistate"
)

// Skip tells why the hook does not scan container c (empty: scan it), and
// at which log level to say so; allContainers scans containers no kubelet
// created.
func Skip(c ocistate.Container, allContainers bool) (string, logrus.Level) {
	switch {
	case c.HostNetwork:
		return "host-network container, skipped", logrus.DebugLevel
	case !c.IsPod() && !allContainers:
		return "not a kubelet-created container, skipped (see --all-containers)", logrus.DebugLevel
	case c.Netns == "":
		return "container's process is gone and no netns path is pinned, nothing to inspect", logrus.InfoLevel
	}
	return "", 0
}

// ContainerMeta is what the hook knows of container c on node, for its
// record; stage ("": the container's status) is the hook's stage.
func ContainerMeta(c ocistate.Container, node, stage string) Meta {
	if stage == "" {
		stage = c.Status
	}
	return Meta{
		Node:        node,
		Source:      "hook",
		Stage:       stage,
		ContainerID: c.ID,
		SandboxID:   c.SandboxID,
		Pod:         findings.Pod{Namespace: c.PodNamespace, Name: c.PodName, UID: c.PodUID},
		Container:   c.ContainerName,
		Image:       c.Image,
		Netns:       c.Netns,
	}
}

// SandboxKey names the per-sandbox memory entry: the sandbox id, or the
// netns identity when the runtime gives none.
func SandboxKey(c ocistate.Container, res Result) string {
	if c.SandboxID != "" {
		return c.SandboxID
	}
	return "netns:" + res.NetnsID
}
