// Package kubetest starts a real etcd and kube-apiserver on loopback for
// tests, and gives admin and service-account clients for them.
//
// It takes the etcd from Debian's etcd-server package (/usr/bin/etcd) and
// the kube-apiserver that tests/kube/build-kube.sh caches outside
// the repo (override with KUBE_APISERVER). It gives a Cluster: the URL, the
// CA, an admin token (group system:masters), kubeconfig files, and the
// means to stop and restart the API server on the same etcd.
//
// Invariant: everything listens on 127.0.0.1 only, lives in the test's temp
// dir, and is stopped when the test ends; when a binary is missing the test
// is skipped, or failed under CI=true.
package kubetest
