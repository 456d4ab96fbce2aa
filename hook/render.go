package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/iptables-alerter/iptables-alerter/lib/scan"
)

var renderCommand = command{use: "render --netns PATH", summary: "print the canonical iptables rules of a netns, marking allowlisted ones",
	long: renderLong, newConfig: func() config { return new(renderConfig) }}

const renderLong = `Prints every iptables rule in the network namespace at PATH (for example
/run/netns/NAME or /proc/PID/ns/net) in canonical text, one a line, as
"family table TEXT", followed by "    # impact: LEVEL" with --impact (the
rule's RHEL 10 impact: xt needs the nft_compat and xt_* modules of
kernel-modules-extra, native keeps loading; see docs/rhel10.md) and by
"    # allowlisted: ENTRY" where an allowlist entry takes it away. The
counts per impact level and the worst level close the output as a
"# impact:" comment, then one "# vendor NAME: HINT DOC" comment per known
framework the rules match (see --vendors). Copy a line's TEXT into an allowlist entry's "rule".
Legacy x_tables rules follow, as "legacy family table TEXT" (impact legacy),
decoded into the same canonical text; each legacy table is summarised at
the end, with its DROP policies and whether every rule could be read.
Exits 1 when the netns cannot be read, or not all of it (without root, past
--timeout, or past a size bound: what was printed is then only part of it),
0 otherwise.`

type renderConfig struct {
	path, namespace string
	timeout         time.Duration
	impact          bool
	allow           allowFlags
	vendors         vendorFlags
}

func (c *renderConfig) register(fs *pflag.FlagSet) {
	fs.StringVar(&c.path, "netns", "", "network namespace file to read (required)")
	fs.StringVar(&c.namespace, "namespace", "", "pod namespace, for allowlist entries scoped to namespaces")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "give up reading the netns after this long")
	fs.BoolVar(&c.impact, "impact", false, "end each rule line with its RHEL 10 impact level")
	c.allow.register(fs)
	c.vendors.register(fs)
}

func (c *renderConfig) run(_ []string, s stdio) int {
	stderr := s.err
	if c.path == "" {
		fmt.Fprintln(stderr, "render: --netns is required (see 'iptables-alerter render --help')")
		return 2
	}
	list, err := c.allow.load()
	if err != nil {
		fmt.Fprintf(stderr, "render: %v\n", err)
		return 1
	}
	table, err := c.vendors.load()
	if err != nil {
		fmt.Fprintf(stderr, "render: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	res, err := scan.Read(ctx, c.path)
	if err != nil {
		fmt.Fprintf(stderr, "render: %v\n", err)
		if os.Geteuid() != 0 {
			fmt.Fprintln(stderr, "render: reading another network namespace needs root")
		}
		return 1
	}
	if err := scan.Dump(s.out, res, scan.DumpOptions{Allow: list, Namespace: c.namespace, Impact: c.impact, Vendors: table}); err != nil {
		// A listing cut short must not pass for the netns's whole.
		fmt.Fprintf(stderr, "render: %v\n", err)
		return 1
	}
	if res.Complete() {
		return 0
	}
	// What was printed is a lower bound: never let it pass for the whole.
	err = res.Err
	if err == nil {
		err = errors.New("a size bound cut the dump short")
	}
	fmt.Fprintf(stderr, "render: incomplete, the rules above are only part of the netns: %v\n", err)
	if os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "render: reading another network namespace needs root")
	}
	return 1
}
