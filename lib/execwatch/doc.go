// Package execwatch listens to the kernel's process events connector
// (NETLINK_CONNECTOR, group CN_IDX_PROC) and gives one Command for every run
// of an iptables tool on the node: its argv, netns, cgroup and parent, read
// from the host's /proc while it runs, and its exit status when it ends.
//
// The connector's kernel socket exists only in the initial network
// namespace, and the kernel ignores a listen request from outside the
// initial pid and user namespaces without answering: Open waits for the
// acknowledgement and fails with ErrNoAck when none comes, never inferring
// anything from events that arrive (they arrive whenever anything else on
// the node listens).
//
// Invariant: the work per exec that is not an iptables tool is one
// readlink of /proc/PID/exe, in the reader's one system call
// (internal/execquiet), and a read of its name when it ended before that
// (a tool's name makes a missed run, Options.Missed); a tool costs a few
// bounded reads, once, as its exec arrives (execquiet.Snapshot); the commands waiting for their exit are bounded
// (Options.MaxPending). No tool run is silent: it is reported (Done), or
// missed (Options.Missed), or, reaped before anything of it could be read,
// counted as an unknown program (Stats.Vanished).
package execwatch
