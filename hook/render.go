package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/iptables-alerter/iptables-alerter/lib/catalog"
	"github.com/iptables-alerter/iptables-alerter/lib/scan"
)

var renderCommand = command{name: "render", summary: "print the canonical iptables rules of a netns, marking allowlisted ones", run: runRender}

const renderSynopsis = `render --netns PATH [FLAGS]

Prints every iptables rule in the network namespace at PATH (for example
/run/netns/NAME or /proc/PID/ns/net) in canonical text, one a line, as
"family table TEXT", followed by "    # impact: LEVEL" with --impact (the
rule's RHEL 10 impact: xt needs the nft_compat and xt_* modules of
kernel-modules-extra, native keeps loading; see docs/rhel10.md) and by
"    # allowlisted: ENTRY" where an allowlist entry takes it away. The
counts per impact level and the worst level close the output as a
"# impact:" comment, then one "# vendor NAME: HINT DOC" comment per known
framework the rules match (see --vendors). Copy a line's TEXT into an allowlist entry's "rule".
Legacy x_tables usage is summarised at the end (it is counted, not decoded).
Exits 1 when the netns cannot be read, or not all of it (without root, past
--timeout, or past a size bound: what was printed is then only part of it),
0 otherwise.`

func runRender(args []string, _ io.Reader, stderr io.Writer) int {
	fs := newFlagSet("render", renderSynopsis, stderr)
	path := fs.String("netns", "", "network namespace file to read (required)")
	namespace := fs.String("namespace", "", "pod namespace, for allowlist entries scoped to namespaces")
	timeout := fs.Duration("timeout", 10*time.Second, "give up reading the netns after this long")
	impact := fs.Bool("impact", false, "end each rule line with its RHEL 10 impact level")
	vendors := fs.String("vendors", catalog.DefaultPath, "admin's vendor table JSON, merged with the built-in one")
	var allow allowFlags
	allow.register(fs)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *path == "" {
		fmt.Fprintln(stderr, "render: --netns is required")
		fs.Usage()
		return 2
	}
	list, err := allow.load()
	if err != nil {
		fmt.Fprintf(stderr, "render: %v\n", err)
		return 1
	}
	table, err := catalog.Load(*vendors)
	if err != nil {
		fmt.Fprintf(stderr, "render: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	res, err := scan.Read(ctx, *path)
	if err != nil {
		fmt.Fprintf(stderr, "render: %v\n", err)
		if os.Geteuid() != 0 {
			fmt.Fprintln(stderr, "render: reading another network namespace needs root")
		}
		return 1
	}
	if err := scan.Dump(os.Stdout, res, scan.DumpOptions{Allow: list, Namespace: *namespace, Impact: *impact, Vendors: table}); err != nil {
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
