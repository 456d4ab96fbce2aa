package scan

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
	"github.com/iptables-alerter/iptables-alerter/lib/allowlist"
	"github.com/iptables-alerter/iptables-alerter/lib/catalog"
	"github.com/iptables-alerter/iptables-alerter/lib/classify"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
)

// DumpOptions say what Dump marks besides the rules.
type DumpOptions struct {
	// Allow marks each rule an entry takes away for a pod in Namespace;
	// nil marks none.
	Allow     *allowlist.List
	Namespace string
	// Impact marks each rule with its RHEL 10 impact level.
	Impact bool
	// Vendors names the frameworks the rules match; nil names none.
	Vendors *catalog.Table
}

// Dump writes what the render command prints of a netns read by Read:
// every rule in canonical text, one a line, as "family table TEXT" with
// its marks (legacy x_tables rules after them as "legacy family table
// TEXT"), then as "#" comments what the rule lines leave unsaid (empty
// user chains, DROP policies, rules counted but not rendered, legacy
// tables, their policies and whether every rule was read), the counts per
// impact level and the vendors. Whether the read
// was complete is the caller's to say: res.Complete. It gives the first
// write error.
func Dump(w io.Writer, res Result, o DumpOptions) error {
	// bufio keeps the first write error and drops the writes after it.
	out := bufio.NewWriter(w)
	u := res.Usage
	texts := make([]string, 0, len(u.Rules))
	for _, r := range u.Rules {
		text := res.Text(r)
		texts = append(texts, text)
		fmt.Fprintf(out, "%s %s %s", r.Family, safetext.Name(r.Table, MaxName), text)
		// The marks' order is part of the output scripts read: impact,
		// then the allowlist entry.
		if o.Impact {
			fmt.Fprintf(out, "    # impact: %s", classify.Level(r))
		}
		if o.Allow != nil {
			if name := o.Allow.Match(o.Namespace, r, func() string { return text }); name != "" {
				fmt.Fprintf(out, "    # allowlisted: %s", name)
			}
		}
		fmt.Fprintln(out)
	}
	ltexts := make([]string, 0, len(u.LegacyRules))
	for _, r := range u.LegacyRules {
		text := res.LegacyText(r)
		ltexts = append(ltexts, text)
		// "legacy" first: the line names where the rule lives, so no
		// reader takes it for an iptables-nft rule of the same table.
		fmt.Fprintf(out, "legacy %s %s %s", r.Family, safetext.Name(r.Table, MaxName), text)
		if o.Impact {
			fmt.Fprintf(out, "    # impact: %s", findings.ImpactLegacy)
		}
		fmt.Fprintln(out)
	}
	counted := 0
	for _, c := range u.Chains {
		counted += c.Rules
		if c.User && c.Rules == 0 {
			fmt.Fprintf(out, "# %s %s: empty user chain %s\n", c.Family, safetext.Name(c.Table, MaxName), safetext.Name(c.Name, MaxName))
		}
		if c.Drop {
			fmt.Fprintf(out, "# %s %s: chain %s has policy DROP\n", c.Family, safetext.Name(c.Table, MaxName), safetext.Name(c.Name, MaxName))
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
				names[i] = safetext.Name(c, MaxName)
			}
			fmt.Fprintf(out, ", user chains %s", strings.Join(names, " "))
		}
		if l.Cut {
			fmt.Fprintf(out, ", not every rule read (read cap of %d bytes, rule bound, or entries past the layout)", inspect.MaxLegacyEntriesBytes)
		}
		fmt.Fprintln(out)
		for _, p := range l.Policies {
			fmt.Fprintf(out, "# legacy %s %s: chain %s has policy %s\n", l.Family, l.Table, p.Name, p.Policy)
		}
	}
	if sum := classify.Summarize(u); sum.Worst != "" {
		fmt.Fprintf(out, "# impact: legacy=%d xt=%d native=%d worst=%s\n", sum.Impact.Legacy, sum.Impact.Xt, sum.Impact.Native, sum.Worst)
	}
	for _, v := range Vendors(o.Vendors, u, u.Rules, texts, ltexts) {
		fmt.Fprintf(out, "# vendor %s: %s %s\n", v.Name, v.Hint, v.Doc)
	}
	if err := out.Flush(); err != nil {
		return fmt.Errorf("write rules: %w", err)
	}
	return nil
}
