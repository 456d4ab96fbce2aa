package report

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// writers are the output formats, in the order --help lists them, one
// file each (text.go, markdown.go, json.go, junit.go, html.go).
var writers = []struct {
	name  string
	write func(io.Writer, Report) error
}{
	{"text", writeText},
	{"markdown", writeMarkdown},
	{"json", writeJSON},
	{"junit", writeJUnit},
	{"html", writeHTML},
}

// Formats lists the output formats, for help and validation.
var Formats = formatNames()

func formatNames() []string {
	names := make([]string, len(writers))
	for i, w := range writers {
		names[i] = w.name
	}
	return names
}

// Report is what the writers render.
type Report struct {
	// Origin is the header: which cluster, when, from what.
	Origin Origin `json:"origin,omitzero"`
	// Clusters are, in a report over several clusters (ReadFleet), each
	// one's origin or why it could not be read; none for one cluster.
	Clusters []ClusterRead `json:"clusters,omitempty"`
	Groups   []Group       `json:"groups"`
	Skipped  Skipped       `json:"skipped"`
	FailOn   string        `json:"fail_on"`
	// Target is the RHEL 10 release the groups' Kernel lines speak of
	// ("10.2").
	Target string `json:"target"`
	// Failing is true when a group fails under FailOn: the exit status.
	Failing bool `json:"failing"`
}

// GateBlind says why a --fail-on gate cannot pass the report whatever its
// groups say, "" when it can: findings lines or Events it could not read
// (torn, not JSON, over the bound) may have been the finding that fails,
// and so may a pod a Report had no room for where the report read no
// Events of its namespace (Skipped.CutUnseen: --source reports). Where it
// read them (--source auto), the results cut (Skipped.Cut) do not count:
// those pods' Events are read beside the Reports. That holds while the
// API server keeps the Events (an hour by default): a pod whose Events
// expired is in neither, and nothing in a Report says when its results
// were cut, so the summary says so rather than fail every gate for good.
func (r Report) GateBlind() string {
	if r.FailOn == FailNever {
		return ""
	}
	var why []string
	if r.Skipped.Malformed > 0 {
		why = append(why, fmt.Sprintf("%d findings lines or Events could not be read: --fail-on %s cannot tell they pass (the report says what it read; fix or remove the damaged input, or let the Events expire)", r.Skipped.Malformed, r.FailOn))
	}
	if r.Skipped.CutUnseen > 0 {
		why = append(why, fmt.Sprintf("%s: --fail-on %s cannot tell those pods pass (run with --source auto, the default, which reads those namespaces' Events beside the Reports while the API server keeps them, 1h by default, and needs list on Events there; or report from the nodes' findings files, which hold every pod; a Report's count of results left out only grows while it lives)", cutUnseenWords(r.Skipped), r.FailOn))
	}
	return safetext.Display(strings.Join(why, "; "))
}

// maxNamed bounds the namespaces cutUnseenWords names.
const maxNamed = 10

// cutUnseenWords say how many results the Reports left out where the
// report read no Events, and in which namespaces.
func cutUnseenWords(sk Skipped) string {
	names := sk.CutUnseenIn
	more := ""
	if len(names) > maxNamed {
		names, more = names[:maxNamed], fmt.Sprintf(" and %d more", len(names)-maxNamed)
	}
	return fmt.Sprintf("%d results were left out of full Reports (namespaces %s%s) and this run read no Events there (--source reports)",
		sk.CutUnseen, strings.Join(names, ", "), more)
}

// Write renders r in format.
func Write(w io.Writer, r Report, format string) error {
	for _, wr := range writers {
		if wr.name == format {
			return wr.write(w, r)
		}
	}
	return fmt.Errorf("write report: unknown format %q", format)
}

// NoRulesWords is the level cell of a group of commands with no level
// (Group.NoRules).
const NoRulesWords = "no rules (commands)"

func status(g Group) string {
	switch {
	case g.State == findings.StateUnknown:
		return "error"
	case g.Expected:
		return "expected"
	case g.Fails:
		return "FAIL"
	}
	return "unexpected"
}

// columns are one row's cells of the Markdown table and the JUnit detail,
// whole and escaped with esc, in tableHeader(fleet)'s order.
func columns(g Group, fleet bool, esc func(string) string) []string {
	pods := strings.Join(g.Pods, ",")
	if len(g.Pods) > 1 {
		pods = fmt.Sprintf("%d: %s", len(g.Pods), pods)
	}
	hint, doc := g.Hint()
	if doc != "" {
		hint += " " + doc
	}
	worst := g.Worst
	switch {
	case g.NoRules():
		worst = NoRulesWords
	case worst == "":
		worst = "unclassified"
	}
	example := g.Example
	if g.ExampleImpact != "" && g.ExampleImpact != g.Worst {
		example = "(" + g.ExampleImpact + ") " + example
	}
	if g.Unclassified && g.Worst != "" {
		worst += " + unclassified"
	}
	if g.Truncated {
		// Worst is a lower bound: say so where the level is read.
		worst += " (incomplete)"
	}
	if g.State == findings.StateUnknown {
		worst, example = "unknown", unknownWords(g)
	}
	// Every cell escaped, ours too: a level is checked when read (valid),
	// but a Group may be built by other means.
	cells := []string{
		esc(status(g)),
		esc(g.Namespace),
		esc(g.Owner.String()),
		esc(pods),
		esc(strings.Join(g.Nodes, ",")),
		esc(worst),
		esc(g.VendorNames()),
		esc(hint),
		esc(example),
		esc(strings.Join(append(slices.Clip(g.Writers), g.Commands...), "; ")),
	}
	if fleet {
		cells = slices.Insert(cells, clusterColumn, esc(g.Cluster))
	}
	return cells
}

// header names the cells of columns for one cluster (tableHeader).
var header = []string{"STATUS", "NAMESPACE", "OWNER", "PODS", "NODES", "WORST", "VENDOR", "HINT", "EXAMPLE RULE", "WRITER"}

// clusterColumn is where a report over several clusters has its CLUSTER
// column, after STATUS.
const clusterColumn = 1

// tableHeader is header, with the CLUSTER column in a report over several
// clusters (fleet).
func tableHeader(fleet bool) []string {
	if fleet {
		return slices.Insert(slices.Clone(header), clusterColumn, "CLUSTER")
	}
	return header
}

// unknownWords say what an unknown group is, with the first error.
func unknownWords(g Group) string {
	s := "the inspection could not finish: whether it uses iptables is unknown"
	if g.Error != "" {
		s += " (" + g.Error + ")"
	}
	return s
}

// summary is the closing paragraph: counts per level, the verdict, the
// levels' meaning and what was skipped.
func summary(r Report) string {
	per := map[string]int{}
	using, unknown, unexpected, failing := 0, 0, 0, 0
	for _, g := range r.Groups {
		switch {
		case g.State == findings.StateUnknown:
			unknown++
		case !g.Expected:
			unexpected++
			fallthrough
		default:
			using++
			if !g.NoRules() {
				per[g.Worst]++
			}
		}
		if g.Fails {
			failing++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d workloads using iptables: %d legacy, %d xt, %d native, %d unclassified; %d unexpected",
		using, per[findings.ImpactLegacy], per[findings.ImpactXt], per[findings.ImpactNative], per[""], unexpected)
	// Failing counts unknown groups too: the exit status does.
	if r.FailOn != FailNever && r.FailOn != "" {
		fmt.Fprintf(&b, ", %d failing --fail-on %s", failing, r.FailOn)
	}
	b.WriteString(".")
	for _, l := range findings.ImpactLevels {
		fmt.Fprintf(&b, "\n%s: %s.", l, findings.ImpactWords(l))
	}
	if unknown > 0 {
		fmt.Fprintf(&b, "\n%d workloads with pods whose inspection could not finish (status error): whether they use iptables is unknown.", unknown)
	}
	if r.Skipped.Malformed > 0 {
		fmt.Fprintf(&b, "\nSkipped: %d malformed lines or events.", r.Skipped.Malformed)
	}
	if r.Skipped.Invalid > 0 {
		fmt.Fprintf(&b, "\nReplaced or dropped: %d values read that were not valid (a level, a count, a name, an owner or a link), as a forged Event or a damaged line holds.", r.Skipped.Invalid)
	}
	if w := unreadWords(r); w != "" {
		b.WriteString("\n" + w)
	}
	if r.Skipped.Cut > 0 {
		fmt.Fprintf(&b, "\nLeft out: %d results the Reports had no room for. Under --source auto (the default) their namespaces' Events are read beside the Reports and show those pods while the API server keeps them (an hour by default): a pod whose Events expired shows in neither, and --fail-on cannot see it; the findings files hold them all.", r.Skipped.Cut)
		if r.Skipped.CutUnseen > 0 {
			b.WriteString(" " + safetext.Display(cutUnseenWords(r.Skipped)) + ": those pods are in nothing this report read.")
		}
	}
	if r.Skipped.GoneNodes > 0 {
		fmt.Fprintf(&b, "\nLeft out: %d ClusterReports of nodes the cluster no longer lists (nothing deletes a removed node's: kubectl delete clusterreports -l app.kubernetes.io/managed-by=iptables-alerter,iptables-alerter.io/node=NODE).", r.Skipped.GoneNodes)
	}
	// The failing count above can be 0 while the exit status is 2: said
	// here too, since an HTML or Markdown file is read without the run's
	// stderr.
	if r.GateBlind() != "" {
		fmt.Fprintf(&b, "\nGate: --fail-on %s cannot pass this report (exit 2) whatever its rows say: it could not see every pod (the lines above say what it missed).", r.FailOn)
	}
	return b.String()
}
