// Package openreports keeps findings as OpenReports Report objects
// (openreports.io/v1alpha1), the durable record of which workloads use
// iptables: Events expire with the API's event TTL, Reports stay while the
// workload does.
//
// It takes a findings.Record and gives, by the record's state: present or
// unknown, one result for the pod in the Report of the pod's workload and
// this node (created when missing); gone, the pod's result removed (the
// Report deleted when it holds no result). Prune removes the results of
// pods that are gone once their last sighting is older than a grace.
//
// Invariants:
//   - One Report per workload and node, written only by that node's
//     forwarder: results is an atomic list in the CRD, so server-side apply
//     cannot merge entries from several field managers. Each write is a
//     read-modify-write guarded by resourceVersion and retried on conflict,
//     so two writers of one Report (a restart overlapping the old pod) lose
//     nothing either.
//   - A Report has an owner reference to the workload (never
//     blockOwnerDeletion), so it is garbage-collected with it; only
//     when the API vouched for it (owner.Owned.Vouched): one the pod
//     alone names may be made up, and the garbage collector would delete
//     the Report. A Report with none is pruned as its pods go.
//   - A Report holds at most MaxResults results, each bounded (message
//     1 KiB, properties MaxProperty bytes each), far below etcd's 1.5 MiB;
//     results cut are counted in CutAnnotation and one skip result says so,
//     which the summary counts.
//   - Every Report carries ManagedByLabel=ManagedBy and NodeLabel, so
//     readers select ours and each forwarder lists only its own.
//
// Write returns an error only when trying again later can succeed
// (kubeapi.Retryable); the caller keeps the record and calls again.
//
// API calls made, which packaging/rbac must allow: clusterreports get,
// create, update, delete (node records, node.go); pods get (and
// lib/owner's gets; WriteAfter takes both from the record's Event post
// instead), reports get, list, create, update, delete.
package openreports
