package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/spf13/pflag"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/scan"
)

var scanCommand = command{use: "scan --netns PATH | --all", summary: "one-shot: print the finding a netns (or every pinned one) would give",
	long: scanLong, newConfig: func() config { return new(scanConfig) }}

const scanLong = `Scans the network namespace at PATH (or, with --all, every namespace
pinned in --netns-dir, where CRI-O, containerd and "ip netns" pin them)
exactly as the hook and the agent do, and prints the finding each would
record, as JSON lines or text. Nothing is written. Exits 1 when any
namespace shows iptables usage or could not be read completely (unknown
is not clean); otherwise 2 on a bad flag or a namespace that could not be
opened, 0 when every one is clean.`

type scanConfig struct {
	path, dir, format, namespace string
	all                          bool
	timeout                      time.Duration
	allow                        allowFlags
	vendors                      vendorFlags
}

func (c *scanConfig) register(fs *pflag.FlagSet) {
	fs.StringVar(&c.path, "netns", "", "network namespace file to scan")
	fs.BoolVar(&c.all, "all", false, "scan every namespace in --netns-dir")
	fs.StringVar(&c.dir, "netns-dir", "/var/run/netns", "where --all looks for pinned namespaces")
	fs.Var(newEnum(&c.format, "text", "text", "json"), "format", "text or json (one finding a line, the findings file's record)")
	fs.StringVar(&c.namespace, "namespace", "", "pod namespace, for allowlist entries scoped to namespaces")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "give up reading one netns after this long")
	c.allow.register(fs)
	c.vendors.register(fs)
}

func (c *scanConfig) run(_ []string, s stdio) int {
	stderr := s.err
	if (c.path == "") == !c.all {
		fmt.Fprintln(stderr, "scan: give exactly one of --netns and --all (see 'iptables-alerter scan --help')")
		return 2
	}
	paths := []string{c.path}
	if c.all {
		entries, err := os.ReadDir(c.dir)
		if err != nil {
			fmt.Fprintf(stderr, "scan: %v\n", err)
			return 2
		}
		paths = paths[:0]
		for _, e := range entries {
			paths = append(paths, filepath.Join(c.dir, e.Name()))
		}
		sort.Strings(paths)
	}
	hostname, _ := os.Hostname()
	code, found := 0, false
	for _, p := range paths {
		ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
		res, err := scan.Run(ctx, p, c.namespace, loaders(&c.allow, &c.vendors))
		cancel()
		if err != nil {
			fmt.Fprintf(stderr, "scan: %v\n", err)
			if os.Geteuid() != 0 {
				fmt.Fprintln(stderr, "scan: reading another network namespace needs root")
			}
			// Pinned files that are not (or no longer) a namespace are
			// common in a netns dir; they do not hide usage elsewhere.
			code = 2
			continue
		}
		if res.AllowErr != nil {
			fmt.Fprintf(stderr, "scan: allowlist: %v (reporting without it)\n", res.AllowErr)
		}
		if res.VendorErr != nil {
			fmt.Fprintf(stderr, "scan: vendors: %v (using the built-in table)\n", res.VendorErr)
		}
		d := scan.Decide(scan.Meta{Node: hostname, Source: "scan", Netns: p, SandboxID: "netns:" + res.NetnsID,
			Pod: findings.Pod{Namespace: c.namespace}}, res)
		if d.Clean() {
			if c.format == "text" {
				fmt.Fprintf(s.out, "%s: %s (%d allowlisted)\n", safetext.Display(p), d.Why, res.Allowed.Count)
			}
			continue
		}
		found = true
		scan.PrintFinding(s.out, c.format, d.Record)
	}
	// Usage beats an unreadable namespace: it is the answer asked for.
	if found {
		return 1
	}
	return code
}
