// Package textfile turns findings into a node-exporter textfile: the current
// iptables usage of each pod still on the node, plus counters.
//
// The latest finding's state decides a pod's series: present, its rule
// counts; unknown (the inspection could not finish, no usage seen),
// iptables_alerter_pod_usage_unknown 1 and no rule series; gone, none. A
// present look cut short (truncated) adds pod_usage_incomplete 1: its
// counts are a lower bound.
// A command's own finding (the exec watch's read or failed write: no
// rules) is no look at the rules: a present pod keeps its counts, an
// unknown one stays unknown.
//
// Takes: findings lines (as a follow.Handler); the Collector is the
// follower's checkpoint store (follow.Store). Gives: FileName in the
// textfile directory, rewritten atomically (temp file, rename) after each
// change, and one state file that carries the per-pod map, the counters and
// the checkpoint they belong to.
//
// Invariants: the state and the checkpoint are saved in one atomic write, so
// after a crash the follower resumes exactly where the saved counters stop
// and no line is counted twice. A damaged state file (torn, garbage) is
// replaced by an empty state and the findings file is replayed from its
// oldest line: the counters start over, no pod is lost. Labels never hold pod UIDs, container ids or
// netns paths (cardinality and privacy): only pod_namespace, pod_name and
// backend. At most one series per (namespace, name, backend): when a pod is
// recreated under the same name, the newest finding wins.
package textfile
