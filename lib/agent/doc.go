// Package agent is the NRI plugin: it learns from the container runtime
// when a pod's network namespace is worth a look (every existing pod at
// registration, each container after it started, each container and
// sandbox as it stops) and scans it with lib/scan, recording through the
// record step the hook takes (scan.Store): the same findings file and
// per-sandbox memory.
//
// It takes NRI events (through github.com/containerd/nri pkg/stub) and
// gives findings records, its own health and metrics (Agent.Health for
// /healthz, Agent.Collectors for /metrics, both fed by the agent itself),
// and, for the caller's logs, one Observer call per handled event and per
// scan. Invariant: no handler
// scans or waits on a scan. NRI calls run under a runtime-wide lock with
// a 2 s timeout, and a plugin that times out is disconnected; a handler
// only opens the netns file (an open fd keeps the namespace alive after
// the runtime unmounts it), queues the work and returns. A full queue
// drops the scan (counted) rather than wait.
//
// Legacy x_tables tell nobody of a change, so every ResweepInterval the
// agent looks at each sandbox it knows again (resweep.go) and queues a scan
// only of those whose nftables generation or legacy fingerprint changed
// since their last complete scan, or whose last scan did not complete; the
// CRI fallback's sweeps skip the same way.
//
// The queue (queue.go) is fair: one scan per sandbox waiting or running,
// first in first out across sandboxes with the sweep's in the same line,
// and a scan's deadline the hook's (2 s), so a pod whose huge ruleset
// takes every scan to its deadline, crash-looping, cannot hold the workers
// from the others. Only a stop's scan, the last look, may run longer
// (StopScanTimeout), and only while nothing else waits and another worker
// is free.
//
// With Config.Watch (watch.go), each sandbox's netns also holds a
// lib/watch monitor from RunPodSandbox (or the sweep, or a container's
// start) until StopPodSandbox or RemovePodSandbox: a burst of commits to
// iptables-shaped tables queues one scan per debounce window, in the same
// fair queue, and the record names the committing process (Writer). A
// complete scan (the watch's, or any other) that finds no usage after
// usage (or unknown) was recorded writes state gone (scan.Decide); a
// sandbox over its findings limit is scanned again when its
// interval ends, so the last change of a burst is never lost. Monitors
// are opened off the handlers, a few at a time.
//
// With Config.HostNetns (node.go), node mode, one more watch holds the
// node's own netns, with the built-in platform allowlist before the
// admin's: usage there at the start is recorded once without writer, each
// later change with the host-network pod's container or systemd unit that
// wrote it; its records have subject node and no pod fields.
package agent
