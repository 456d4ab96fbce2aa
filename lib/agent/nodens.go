package agent

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/containerd/nri/pkg/api"

	"github.com/iptables-alerter/iptables-alerter/lib/netns"
)

// The node's own network namespace. A hostNetwork pod shares it: CRI-O
// pins it and reports that path in the pod's Linux.Namespaces (containerd
// reports none), and its rules are the node's (kube-proxy, the CNI), not
// the pod's. The agent tells it apart by what the namespace is, its nsfs
// device and inode, never by the path's shape: a pin may sit anywhere.

// nodeNetnsID is the identity ("dev:inode", as netns.Handle.ID gives it)
// of the network namespace of pid 1 under hostProc: the host's /proc,
// mounted into the agent's container (the systemd unit sees it directly).
// Opening it takes ptrace read access to pid 1, which a container running
// as root with fewer capabilities than pid 1 has only with CAP_SYS_PTRACE.
func nodeNetnsID(hostProc string) (string, error) {
	path := filepath.Join(hostProc, "1", "ns", "net")
	h, err := netns.Open(path)
	if err != nil {
		return "", fmt.Errorf("%w: open the node's network namespace %q (is the host's /proc mounted there, and CAP_SYS_PTRACE given?): %w", ErrConfig, path, err)
	}
	defer h.Close()
	// The node's namespace lives as long as the node: its identity cannot
	// be reused while the agent runs, so the fd need not be kept.
	id, err := h.ID()
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return id, nil
}

// isNode tells whether h is the node's network namespace. With the check
// off (no host /proc), or h unreadable by fstat, it is not: the scan then
// goes ahead and reports what it finds.
func (a *Agent) isNode(h *netns.Handle) bool {
	if a.nodeNetns == "" {
		return false
	}
	id, err := h.ID()
	return err == nil && id == a.nodeNetns
}

// sweepable tells whether the registration sweep scans the pod whose
// namespace path is path: not the node's namespace (host network), and not
// a stopped sandbox. CRI-O's Synchronize lists NotReady sandboxes too (a
// completed Job's pod keeps one until it is deleted) whose namespace is
// already gone; NRI gives no sandbox state, so a namespace that is gone
// while none of the pod's containers runs is read as stopped: nothing to
// scan, no error. Gone with a container running, the pod runs and the
// agent cannot see it: queued, and the scan reports it unreachable.
func (a *Agent) sweepable(path string, running bool) bool {
	// Opened, not stat'ed: the handle checks that the path is a network
	// namespace, and fstat on it gives the namespace's own identity.
	h, err := netns.Open(path)
	if err != nil {
		gone := errors.Is(err, netns.ErrNotExist) || errors.Is(err, netns.ErrNotNetns)
		return running || !gone
	}
	defer h.Close()
	return !a.isNode(h)
}

// runningSandboxes is the set of sandboxes with a running container.
func runningSandboxes(ctrs []*api.Container) map[string]bool {
	running := map[string]bool{}
	for _, c := range ctrs {
		if c.GetState() == api.ContainerState_CONTAINER_RUNNING {
			running[c.GetPodSandboxId()] = true
		}
	}
	return running
}
