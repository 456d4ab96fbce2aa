// Package netns opens a pod's network namespace by path and runs code inside
// it on a locked OS thread.
//
// It takes a path (the pinned /run/netns/<id> file from config.json, or
// /proc/<pid>/ns/net) and gives a Handle holding an fd. Invariant: the
// caller's thread never changes namespace; only Do switches, on a locked
// thread that is thrown away if switching back fails.
package netns
