// Package textfiletest holds the end-to-end tests of `iptables-alerter
// textfile` against a real prometheus-node-exporter and promtool (Debian
// packages prometheus-node-exporter and prometheus), with real network
// namespaces standing for the pods' pinned netns.
package textfiletest
