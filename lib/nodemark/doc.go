// Package nodemark keeps a label on the forwarder's own Node saying how
// ready the node is for RHEL 10, from the node's own findings (node mode)
// and those of its pods: breaks (legacy x_tables rules: RHEL 10 has no
// ip_tables), unknown (an inspection that could not finish, or usage not
// classified: never ready when not everything was seen), needs-extra (xt
// rules: they load only with kernel-modules-extra), ready (native rules or
// none). The worst wins, in that order. Ready needs more than no finding
// (a clean pod leaves none): the agent's word that it looked at every pod
// (findings.Swept), valid, and every finding written before that look
// read by the forwarder (CaughtUp), no more than MaxLag ago; otherwise
// unknown at best. A platform can then gate a change
// on it (packaging/pool-gate).
//
// It takes findings.Records (a lib/consumer Consumer after the Events and
// Reports): present or unknown sets the pod's (or node's) level, gone
// removes it. A command's own finding (the exec watch's read or failed
// write: present, no rules) never clears a level; its own, when it has
// one, counts for the pod's life (no look at the rules answers for it),
// for the node until its next look. A present finding whose look stopped early
// (Truncated) is unknown unless what it saw is worse (breaks). The
// levels are kept in a state file beside the checkpoint, so a restart,
// which resumes after the checkpoint, keeps the pods seen before it.
// Without that file (a first start, the label turned on later, a lost
// file) the marker is Fresh: the forwarder reads the whole findings file
// into it, Held (no save, no patch), before it labels anything. Pods
// deleted without a gone record are dropped when a GET says they are
// gone (every Prune).
//
// Invariants:
//   - Only this node's label is written, with a JSON merge patch of that
//     one key (no read of the Node). packaging/rbac/node-label.yaml grants
//     patch on nodes and ships the ValidatingAdmissionPolicy that lets the
//     forwarder's service account change only that key, only to one of
//     findings.Readinesses, and only on the Node its bound token names
//     (authentication.kubernetes.io/node-name): one node's forwarder
//     cannot clear another node's mark.
//   - The label never holds a finding's line: a failed patch is logged
//     (once per reason), and tried again with the next record and every
//     Retry until it succeeds.
//
// API calls made: nodes patch (its own; again every Prune, as nothing
// may read the Node to see it removed), pods get (Prune).
package nodemark
