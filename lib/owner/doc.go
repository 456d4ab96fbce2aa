// Package owner names the workload that owns a pod: it follows the pod's
// controller ownerReference one or two steps (ReplicaSet to Deployment, Job
// to CronJob, ReplicationController to OpenShift's DeploymentConfig) and
// says "StaticPod" for a mirror pod and "Pod" for a bare one.
//
// Invariants: Resolve never fails: when a lookup is refused, times out or
// finds nothing it answers the nearest owner it knows (the ReplicaSet, say),
// never a guess from the pod's name. Lookups are cached (bounded entries,
// bounded age), so a node's forwarder asks about each ReplicaSet once.
//
// API calls made, which packaging/rbac must allow: get on replicasets and
// replicationcontrollers (to see their Deployment or DeploymentConfig) and
// on jobs (to see their CronJob). Nothing else: the other kinds are read
// from the pod's own ownerReferences.
package owner
