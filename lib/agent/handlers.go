package agent

import (
	"context"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/netns"
	"github.com/iptables-alerter/iptables-alerter/lib/ocistate"
	"github.com/iptables-alerter/iptables-alerter/lib/scan"
)

// The NRI handlers. The stub subscribes the agent to exactly the events
// it has methods for. Each one only reads the event, opens a file at
// most, and queues; none returns an error, which the runtime would
// only log (and a failing StopContainer must not fail the kubelet).

// The stub subscribes by the methods it finds: a renamed or re-typed
// handler would silently drop its event. These assignments make that a
// compile error instead.
var (
	_ stub.SynchronizeInterface        = (*Agent)(nil)
	_ stub.PostStartContainerInterface = (*Agent)(nil)
	_ stub.StopContainerInterface      = (*Agent)(nil)
	_ stub.StopPodInterface            = (*Agent)(nil)
)

// Synchronize queues a sweep of every running pod with a network namespace
// of its own (see sweepable), in the same line as the events' scans (see
// queue).
func (a *Agent) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	defer a.handled("Synchronize", time.Now())
	a.execs.syncMu.Lock()
	closes := a.execs.closes
	a.execs.syncMu.Unlock()
	running := runningSandboxes(ctrs)
	var jobs []job
	for _, p := range pods {
		if m, ok := a.meta(p, nil, SourceSweep, "Synchronize"); ok && a.sweepable(m.Netns, running[p.GetId()]) {
			jobs = append(jobs, job{meta: m})
		}
	}
	// The watches first: a sweep's scan waits for its pod's monitor to
	// open (watchOpened), and a worker may take it at once.
	a.watchSynced(pods, ctrs)
	a.sweep(jobs, len(pods))
	// Connected, and the sandboxes known: a command waiting for one has
	// its time, from this sync (after a reconnect too: the sandboxes
	// started while disconnected are known only now). Neither if its
	// connection closed meanwhile (the runtime's request timed out):
	// connected after the close, the agent would vouch for every pod
	// (Looked) until its next dial failed, while pods started unheard.
	a.execs.syncMu.Lock()
	if a.execs.closes == closes {
		a.connection(true, nil)
		a.execs.synced.Store(time.Now().UnixNano())
	}
	a.execs.syncMu.Unlock()
	return nil, nil
}

// PostStartContainer: the container is running and every container
// before it has run. What the hook does on CRI-O, for runtimes without
// hooks.d.
func (a *Agent) PostStartContainer(_ context.Context, p *api.PodSandbox, c *api.Container) error {
	defer a.handled("PostStartContainer", time.Now())
	// Known already unless the agent started after the pod (or its watch
	// failed); watched before the scan is queued, which waits for the
	// monitor (watchOpened).
	a.knowContainer(p, c)
	a.watchPod(p)
	a.queueOpen(p, c, SourcePostStart, "PostStartContainer")
	return nil
}

// StopContainer: the last moment the container's rules are sure to be in
// the namespace. The namespace is opened here, before the reply, so it
// outlives the runtime's teardown until the scan.
func (a *Agent) StopContainer(_ context.Context, p *api.PodSandbox, c *api.Container) ([]*api.ContainerUpdate, error) {
	defer a.handled("StopContainer", time.Now())
	a.queueOpen(p, c, SourceStop, "StopContainer")
	return nil, nil
}

// stageStopPod is the stage of the pod sandbox's stop: the pod's last
// scan, after which its usage is no longer followed.
const stageStopPod = "StopPodSandbox"

// StopPodSandbox: containerd calls it before tearing the netns down (CRI-O
// after: the open then finds it gone, which costs a failed open).
func (a *Agent) StopPodSandbox(_ context.Context, p *api.PodSandbox) error {
	defer a.handled("StopPodSandbox", time.Now())
	a.queueOpen(p, nil, SourceStop, stageStopPod)
	// After the stop's scan holds the netns open: the watch's socket is
	// no longer needed to, and must not keep the stopped pod's netns.
	a.unwatch(p.GetId())
	return nil
}

func (a *Agent) handled(event string, start time.Time) {
	d := time.Since(start)
	a.metrics.handled(event, d)
	a.cfg.Observer.Handled(event, d)
}

// queueOpen opens the pod's namespace and queues a scan of it. A namespace
// that cannot be opened is reported (see openFailed) and not queued; the
// node's own (a host-network pod's) is neither scanned nor reported, as a
// pod without a namespace entry is not.
func (a *Agent) queueOpen(p *api.PodSandbox, c *api.Container, source, stage string) {
	m, ok := a.meta(p, c, source, stage)
	if !ok {
		return
	}
	event := source != SourceStop
	if event {
		// Before the job can be taken: a container started, its init
		// may write rules, and neither the last scan nor one running
		// now saw them.
		a.known.touch(m.SandboxID)
	}
	// A scan of the sandbox waits with its netns open already: it
	// covers this event too, and will see the latest rules.
	if a.queue.join(m) {
		return
	}
	h, err := netns.Open(m.Netns)
	if err != nil {
		out, err := openFailed(source, err)
		if event {
			// Known, not complete: unseen (scanned), and tried again
			// by the re-sweep.
			a.known.add(m)
		}
		a.scanned(Scan{Meta: m, Outcome: out, Err: err})
		return
	}
	if a.isNode(h) {
		h.Close()
		return
	}
	if event {
		a.known.add(m)
	}
	if !a.queue.add(job{meta: m, h: h}) {
		h.Close()
		a.scanned(Scan{Meta: m, Outcome: Dropped})
	}
}

// meta is what the event tells of the pod and container; ok is false for
// a pod without a namespace entry (containerd's host-network pods). A
// namespace entry may still be the node's (CRI-O's host-network pods):
// the callers check what the path opens to (isNode).
func (a *Agent) meta(p *api.PodSandbox, c *api.Container, source, stage string) (scan.Meta, bool) {
	path := netnsPath(p)
	if path == "" {
		return scan.Meta{}, false
	}
	m := scan.Meta{
		Node:      a.cfg.Node,
		Source:    source,
		Stage:     stage,
		SandboxID: p.GetId(),
		Pod:       findings.Pod{Namespace: p.GetNamespace(), Name: p.GetName(), UID: p.GetUid()},
		Netns:     path,
		Owner:     ownerOf(p.GetLabels(), p.GetName()),
	}
	if c != nil {
		m.ContainerID = c.GetId()
		m.Container = c.GetName()
		m.Image = ocistate.Image(c.GetAnnotations())
	}
	return m, true
}

// netnsPath is the pod's network namespace path from pod.Linux.Namespaces;
// empty for a runtime that gives none (containerd's host network).
func netnsPath(p *api.PodSandbox) string {
	for _, ns := range p.GetLinux().GetNamespaces() {
		if ns.GetType() == "network" {
			return ns.GetPath()
		}
	}
	return ""
}
