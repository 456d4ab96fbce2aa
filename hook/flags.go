package main

import (
	"github.com/spf13/pflag"

	"github.com/iptables-alerter/iptables-alerter/lib/allowlist"
	"github.com/iptables-alerter/iptables-alerter/lib/catalog"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/scan"
)

// The flag groups of the steps several commands share, each registered by
// every command that takes the step, so a flag has one name, one default
// and one help text wherever it appears (cli-runtime's PrintFlags with
// AddFlags is the model).

// recordFlags are the record step's (scan.Store): the hook and the agent
// write the same findings file through the same per-sandbox memory.
type recordFlags struct {
	log  findings.Log
	seen findings.Seen
}

func (r *recordFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&r.log.Path, "findings", findings.DefaultPath, "findings file to append to (its directory is created 0750, the file 0640)")
	fs.Int64Var(&r.log.MaxBytes, "max-bytes", findings.DefaultMaxBytes, "rotate the findings file to FILE.1 beyond this size")
	fs.IntVar(&r.log.Generations, "generations", findings.DefaultGenerations, "rotated files kept, FILE.1 (newest) to FILE.N: at most N+1 times --max-bytes on disk")
	fs.StringVar(&r.seen.Dir, "state-dir", findings.DefaultStateDir, "per-sandbox memory, shared by the hook and the agent: the last fingerprint recorded and the findings written this hour, one finding per pod and usage")
}

// vendorFlags name the admin's vendor table, for every command that
// names vendors.
type vendorFlags struct{ path string }

func (v *vendorFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&v.path, "vendors", catalog.DefaultPath, "admin's vendor table JSON, merged with the built-in one (a missing file adds nothing; see docs/vendors.md)")
}

func (v *vendorFlags) load() (*catalog.Table, error) { return catalog.Load(v.path) }

// loaders gives the scan step what the allowlist and vendor flags name.
func loaders(a *allowFlags, v *vendorFlags) scan.Loaders {
	return scan.Loaders{Allow: a.load, Vendors: v.load, Warm: findings.Warm}
}

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
