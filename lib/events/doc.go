// Package events turns findings into Kubernetes Events.
//
// It takes a findings.Record and a Kubernetes client and gives, by the
// record's state: present, one events.k8s.io/v1 Event on the live Pod
// (reason IPTablesUsageObserved, type Warning), plus optionally a summary
// Event on the Node (not for a command's own finding, the exec watch's
// failed write or read: it holds no rules, its note names the command);
// unknown, one Event on the live Pod (reason
// IPTablesUsageUnknown, type Warning) saying the inspection could not
// finish and why; gone, none.
//
// Invariants:
//   - An Event's name is derived from the finding alone (fingerprint,
//     sandbox, pod UID), so posting the same record twice creates one Event:
//     the second create gets AlreadyExists, which counts as delivered.
//   - The Event regards the pod the API serves now: the record's pod UID must
//     be the live pod's UID or, for a static pod, the value of the mirror
//     pod's kubernetes.io/config.mirror annotation. Otherwise the pod is gone
//     and nothing is posted.
//   - The note leads with the finding's worst RHEL 10 impact in plain words
//     and the pod's owning workload (lib/owner), then the vendors' hints;
//     the same facts go into the iptables-alerter.io/finding annotation as
//     JSON (Summary), for report.
//   - The note never exceeds 1024 bytes, is valid UTF-8, and holds no control
//     or bidi characters from the record (they are escaped).
//
// Post returns an error only when trying again later can succeed (see
// kubeapi.Retryable); every other outcome, including a definitive rejection by the
// API, is a Result, so the caller can move on without losing order.
//
// API calls made, which packaging/rbac must allow: pods get, and events
// (events.k8s.io) create, plus lib/owner's gets naming the pod's workload.
package events
