package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
	"github.com/iptables-alerter/iptables-alerter/lib/catalog"
	"github.com/iptables-alerter/iptables-alerter/lib/classify"
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
Legacy x_tables usage is summarised at the end (it is counted, not decoded).
Exits 1 when the netns cannot be read, or not all of it (without root, past
--timeout, or past a size bound: what was printed is then only part of it),
0 otherwise.`

type renderConfig struct {
	path, namespace, vendors string
	timeout                  time.Duration
	impact                   bool
	allow                    allowFlags
}

func (c *renderConfig) register(fs *pflag.FlagSet) {
	fs.StringVar(&c.path, "netns", "", "network namespace file to read (required)")
	fs.StringVar(&c.namespace, "namespace", "", "pod namespace, for allowlist entries scoped to namespaces")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "give up reading the netns after this long")
	fs.BoolVar(&c.impact, "impact", false, "end each rule line with its RHEL 10 impact level")
	fs.StringVar(&c.vendors, "vendors", catalog.DefaultPath, "admin's vendor table JSON, merged with the built-in one")
	c.allow.register(fs)
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
	table, err := catalog.Load(c.vendors)
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
	u, err := res.Usage, res.Err
	out := s.out
	texts := make([]string, 0, len(u.Rules))
	for _, r := range u.Rules {
		text := res.Text(r)
		texts = append(texts, text)
		fmt.Fprintf(out, "%s %s %s", r.Family, safetext.Name(r.Table, scan.MaxName), text)
		if c.impact {
			fmt.Fprintf(out, "    # impact: %s", classify.Level(r))
		}
		if name := list.Match(c.namespace, r, func() string { return text }); name != "" {
			fmt.Fprintf(out, "    # allowlisted: %s", name)
		}
		fmt.Fprintln(out)
	}
	counted := 0
	for _, c := range u.Chains {
		counted += c.Rules
		if c.User && c.Rules == 0 {
			fmt.Fprintf(out, "# %s %s: empty user chain %s\n", c.Family, safetext.Name(c.Table, scan.MaxName), safetext.Name(c.Name, scan.MaxName))
		}
		if c.Drop {
			fmt.Fprintf(out, "# %s %s: chain %s has policy DROP\n", c.Family, safetext.Name(c.Table, scan.MaxName), safetext.Name(c.Name, scan.MaxName))
		}
	}
	if counted > len(u.Rules) {
		fmt.Fprintf(out, "# %d more rules counted but not rendered (bound of %d)\n", counted-len(u.Rules), len(u.Rules))
	}
	for _, l := range u.Legacy {
		fmt.Fprintf(out, "# legacy %s %s: %d entries beyond the untouched table", l.Family, l.Table, l.Rules)
		if len(l.Chains) > 0 {
			names := make([]string, len(l.Chains))
			for i, c := range l.Chains {
				names[i] = safetext.Name(c, scan.MaxName)
			}
			fmt.Fprintf(out, ", user chains %s", strings.Join(names, " "))
		}
		fmt.Fprintln(out)
	}
	if sum := classify.Summarize(u); sum.Worst != "" {
		fmt.Fprintf(out, "# impact: legacy=%d xt=%d native=%d worst=%s\n", sum.Impact.Legacy, sum.Impact.Xt, sum.Impact.Native, sum.Worst)
	}
	for _, v := range scan.Vendors(table, u, u.Rules, texts) {
		fmt.Fprintf(out, "# vendor %s: %s %s\n", v.Name, v.Hint, v.Doc)
	}
	if res.Complete() {
		return 0
	}
	// What was printed is a lower bound: never let it pass for the whole.
	if err == nil {
		err = errors.New("a size bound cut the dump short")
	}
	fmt.Fprintf(stderr, "render: incomplete, the rules above are only part of the netns: %v\n", err)
	if os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "render: reading another network namespace needs root")
	}
	return 1
}
