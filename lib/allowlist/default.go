package allowlist

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
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
//
// Parsed once: the agent loads its lists for every scan that finds usage
// (an admin's edit takes effect at the next), and compiling the built-in
// one each time was a twentieth of a first sweep's CPU. A List is shared
// safely: its only change after New is an expression compiled once, at
// first use.
func Default() *List { return defaultList() }

var defaultList = sync.OnceValue(func() *List {
	l, err := Parse(defaultJSON, "built-in")
	if err != nil {
		// The file is embedded and tested; a broken one is a build bug.
		panic(fmt.Sprintf("built-in allowlist: %v", err))
	}
	return l
})

// platformJSON holds the rules the node's own components write in the
// node's network namespace, each entry the exact rule shapes of one
// component (kube-proxy, the kubelet, a network plugin, an engine): applied
// there only, by the agent's node mode, never to a pod.
//
//go:embed platform.json
var platformJSON []byte

func platformEntries() []Entry {
	var f File
	if err := json.Unmarshal(platformJSON, &f); err != nil {
		panic(fmt.Sprintf("built-in platform allowlist: %v", err))
	}
	return f.Entries
}

// Plugins are the names Platform takes: the network plugins and engines of
// the platform list, sorted.
func Plugins() []string {
	var names []string
	for _, e := range platformEntries() {
		if e.Platform != "" && !slices.Contains(names, e.Platform) {
			names = append(names, e.Platform)
		}
	}
	slices.Sort(names)
	return names
}

// Platform is the built-in list for the node's network namespace: the
// entries of what every Kubernetes node runs (kube-proxy, the kubelet),
// and those of each plugin named. A plugin's entries never apply unnamed:
// on a node that does not run it, a rule shaped like its own is anybody's.
// An unknown name is an error (a typo would leave the plugin's rules
// reported on every node, or a wrong plugin allowlisted).
func Platform(plugins ...string) (*List, error) {
	known := Plugins()
	for _, p := range plugins {
		if !slices.Contains(known, p) {
			return nil, fmt.Errorf("unknown platform %q (known: %s)", p, strings.Join(known, ", "))
		}
	}
	var entries []Entry
	for _, e := range platformEntries() {
		if e.Platform == "" || slices.Contains(plugins, e.Platform) {
			entries = append(entries, e)
		}
	}
	l, err := New(entries, "built-in platform")
	if err != nil {
		panic(fmt.Sprintf("built-in platform allowlist: %v", err))
	}
	for i := range l.entries {
		l.entries[i].keepsLevel = true
	}
	return l, nil
}
