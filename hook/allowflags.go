package main

import (
	"github.com/spf13/pflag"

	"github.com/iptables-alerter/iptables-alerter/lib/allowlist"
)

// allowFlags are the allowlist flags of every command that scans a netns.
type allowFlags struct {
	path      string
	noDefault bool
}

func (a *allowFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&a.path, "allowlist", allowlist.DefaultPath, "allowlist JSON file (a missing file is an empty list; see README)")
	fs.BoolVar(&a.noDefault, "no-default-allowlist", false, "do not apply the built-in entries (ovn-kubernetes/openshift-sdn in-pod rules)")
}

// load gives the built-in entries (unless turned off) followed by the
// file's. On a broken file it still returns the built-in ones with the error,
// so the caller can report usage rather than nothing.
func (a *allowFlags) load() (*allowlist.List, error) {
	var lists []*allowlist.List
	if !a.noDefault {
		lists = append(lists, allowlist.Default())
	}
	var err error
	if a.path != "" {
		var file *allowlist.List
		if file, err = allowlist.Load(a.path); err == nil {
			lists = append(lists, file)
		}
	}
	return allowlist.Join(lists...), err
}
