// Package owner names the workload that owns a pod: it follows the pod's
// controller ownerReference one or two steps (ReplicaSet to Deployment, Job
// to CronJob, ReplicationController to OpenShift's DeploymentConfig) and
// says "StaticPod" for a mirror pod and "Pod" for a bare one.
//
// Invariants: it never guesses from the pod's name. When the controller is
// gone or has no controller itself, the answer is the nearest owner known
// (the ReplicaSet, say). When an object of the controller's name has
// another UID than the pod's reference (stale, or made up by whoever
// created the pod), the pod is answered as bare: filed under the
// workload, it would write a UID the garbage collector finds dangling
// into the workload's Report as its owner. Owned says whether the
// reference's UID was read from the API (Checked): only the pod's own and
// its controller's are; a Deployment or CronJob above a controller is
// not read (a GET a finding), nor are kinds it does not know. It says
// too whether anything but the pod vouches for the reference (Vouched):
// a checked one, or what a checked controller names above it; not a
// controller not found, nor one of a kind not read. When a
// lookup is refused or times out, Reference and Owned say so with an
// error beside that answer, which a caller filing pods by owner retries
// rather than take (else one pod lands under two owners). What a lookup
// found is cached (bounded entries, bounded age), a 404 or a failure
// not, so a node's forwarder asks about each ReplicaSet once; reading an
// object drops what was cached of other UIDs under its name.
//
// API calls made, which packaging/rbac must allow: get on replicasets and
// replicationcontrollers (to see their Deployment or DeploymentConfig), on
// jobs (to see their CronJob), and on statefulsets and daemonsets (to
// check the UID; where a role lacks it, they are not checked, and the
// refusal is cached as that answer). Nothing
// else: the other kinds are read from the pod's own ownerReferences.
package owner
