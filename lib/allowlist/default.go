package allowlist

import (
	_ "embed"
	"fmt"
)

// defaultJSON holds the rules the platform's own network plugins put in
// every pod netns (ovn-kubernetes, openshift-sdn): without it every pod of
// such a cluster would be reported.
//
//go:embed default.json
var defaultJSON []byte

// DefaultPath is where the hook looks for the admin's allowlist.
const DefaultPath = "/etc/iptables-alerter/allowlist.json"

// Default is the built-in list.
func Default() *List {
	l, err := Parse(defaultJSON, "built-in")
	if err != nil {
		// The file is embedded and tested; a broken one is a build bug.
		panic(fmt.Sprintf("built-in allowlist: %v", err))
	}
	return l
}

// platformJSON holds the rules the node's own components write in the
// node's network namespace (kube-proxy, the kubelet, the cluster network,
// CNI plugins, container engines): applied there only, by the agent's
// node mode, never to a pod.
//
//go:embed platform.json
var platformJSON []byte

// Platform is the built-in list for the node's network namespace.
func Platform() *List {
	l, err := Parse(platformJSON, "built-in platform")
	if err != nil {
		panic(fmt.Sprintf("built-in platform allowlist: %v", err))
	}
	return l
}
