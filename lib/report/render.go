package report

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// Formats lists the output formats.
var Formats = []string{"text", "markdown", "json", "junit", "html"}

// Report is what the writers render.
type Report struct {
	// Origin is the header: which cluster, when, from what.
	Origin  Origin  `json:"origin,omitzero"`
	Groups  []Group `json:"groups"`
	Skipped Skipped `json:"skipped"`
	FailOn  string  `json:"fail_on"`
	// Failing is true when a group fails under FailOn: the exit status.
	Failing bool `json:"failing"`
}

// Write renders r in format.
func Write(w io.Writer, r Report, format string) error {
	switch format {
	case "text":
		return writeText(w, r)
	case "markdown":
		return writeMarkdown(w, r)
	case "json":
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetIndent("", "  ")
		if r.Groups == nil {
			r.Groups = []Group{}
		}
		if err := enc.Encode(r); err != nil {
			return fmt.Errorf("write json: %w", err)
		}
		// The same values, readable on a terminal without a bidi or C1
		// control taking effect.
		_, err := w.Write(safetext.JSON(b.Bytes()))
		return err
	case "junit":
		return writeJUnit(w, r)
	case "html":
		return writeHTML(w, r)
	}
	return fmt.Errorf("write report: unknown format %q", format)
}

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
// whole and escaped with esc.
func columns(g Group, esc func(string) string) []string {
	pods := strings.Join(g.Pods, ",")
	if len(g.Pods) > 1 {
		pods = fmt.Sprintf("%d: %s", len(g.Pods), pods)
	}
	hint, doc := g.Hint()
	if doc != "" {
		hint += " " + doc
	}
	worst := g.Worst
	if worst == "" {
		worst = "unclassified"
	}
	example := g.Example
	if g.ExampleImpact != "" && g.ExampleImpact != g.Worst {
		example = "(" + g.ExampleImpact + ") " + example
	}
	if g.State == findings.StateUnknown {
		worst, example = "unknown", unknownWords(g)
	}
	// Every cell escaped, ours too: a level is checked when read (valid),
	// but a Group may be built by other means.
	return []string{
		esc(status(g)),
		esc(g.Namespace),
		esc(g.Owner.String()),
		esc(pods),
		esc(strings.Join(g.Nodes, ",")),
		esc(worst),
		esc(g.VendorNames()),
		esc(hint),
		esc(example),
		esc(strings.Join(g.Writers, "; ")),
	}
}

var header = []string{"STATUS", "NAMESPACE", "OWNER", "PODS", "NODES", "WORST", "VENDOR", "HINT", "EXAMPLE RULE", "WRITER"}

// mdEscape keeps a cell one cell of plain text: no pipes, no HTML, no code
// spans or emphasis from the pod's strings.
func mdEscape(s string) string {
	s = safetext.Display(s)
	var b strings.Builder
	for _, c := range s {
		switch c {
		case '|', '\\', '`', '*', '_', '[', ']', '<', '>', '#', '~':
			b.WriteByte('\\')
		case '&':
			b.WriteString("&amp;")
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

func writeMarkdown(w io.Writer, r Report) error {
	var b strings.Builder
	if !r.Origin.Time.IsZero() {
		b.WriteString(mdEscape(r.Origin.Line()) + "\n\n")
	}
	b.WriteString("| " + strings.Join(header, " | ") + " |\n")
	b.WriteString(strings.Repeat("|---", len(header)) + "|\n")
	for _, g := range r.Groups {
		b.WriteString("| " + strings.Join(columns(g, mdEscape), " | ") + " |\n")
	}
	for i, l := range strings.Split(summary(r), "\n") {
		if i == 0 {
			b.WriteString("\n" + mdEscape(l) + "\n\n")
			continue
		}
		b.WriteString("- " + mdEscape(l) + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
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
			per[g.Worst]++
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
	if r.Skipped.Cut > 0 {
		fmt.Fprintf(&b, "\nLeft out: %d results the Reports had no room for; the pods' Events or the findings files hold them.", r.Skipped.Cut)
	}
	return b.String()
}

// JUnit XML, the shape CI systems read (Jenkins, GitLab, GitHub actions):
// one testsuite, one testcase per workload.
type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Skipped  int          `xml:"skipped,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string `xml:"name,attr"`
	Tests    int    `xml:"tests,attr"`
	Failures int    `xml:"failures,attr"`
	Errors   int    `xml:"errors,attr"`
	Skipped  int    `xml:"skipped,attr"`
	Time     string `xml:"time,attr"`
	// Properties say which cluster, when and from what (Origin).
	Properties *junitProperties `xml:"properties"`
	Cases      []junitCase      `xml:"testcase"`
}

type junitProperties struct {
	Property []junitProperty `xml:"property"`
}

type junitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	Skipped   *junitMessage `xml:"skipped"`
	Failure   *junitMessage `xml:"failure"`
	Error     *junitMessage `xml:"error"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr,omitempty"`
	Text    string `xml:",chardata"`
}

func writeJUnit(w io.Writer, r Report) error {
	s := junitSuite{Name: "iptables-alerter RHEL 10 readiness", Time: "0"}
	if o := r.Origin; !o.Time.IsZero() {
		s.Properties = &junitProperties{Property: []junitProperty{
			{"report", o.Line()},
			{"cluster", safetext.Display(o.Cluster)},
			{"context", safetext.Display(o.Context)},
			{"namespace", safetext.Display(o.Namespace)},
			{"from", strings.Join(o.From, ",")},
			{"time", o.Time.UTC().Format(time.RFC3339)},
		}}
	}
	for _, g := range r.Groups {
		// encoding/xml escapes markup and replaces characters XML cannot
		// hold; Display keeps the text readable as well.
		c := junitCase{Name: safetext.Display(g.Owner.String()), Classname: safetext.Display(g.Namespace), Time: "0"}
		var detail strings.Builder
		for i, v := range columns(g, safetext.Display) {
			fmt.Fprintf(&detail, "%s: %s\n", strings.ToLower(header[i]), v)
		}
		msg := fmt.Sprintf("%s uses iptables: %s", safetext.Display(g.Owner.String()), findings.ImpactWords(g.Worst))
		if g.State == findings.StateUnknown {
			msg = safetext.Display(g.Owner.String() + ": " + unknownWords(g))
		}
		switch {
		case g.State == findings.StateUnknown && g.Fails:
			// An error, not a failure: the test could not run.
			c.Error = &junitMessage{Message: msg, Type: "InspectionIncomplete", Text: detail.String()}
			s.Errors++
		case g.Expected:
			c.SystemOut = "expected: " + safetext.Display(strings.Join(g.Reasons, "; ")) + "\n" + detail.String()
		case g.Fails:
			c.Failure = &junitMessage{Message: msg, Type: "UnexpectedIptablesUsage", Text: detail.String()}
			s.Failures++
		default:
			c.Skipped = &junitMessage{Message: "warning (not failing under --fail-on " + r.FailOn + "): " + msg, Text: detail.String()}
			s.Skipped++
		}
		s.Cases = append(s.Cases, c)
	}
	s.Tests = len(s.Cases)
	out := junitSuites{Name: "iptables-alerter report", Tests: s.Tests, Failures: s.Failures, Errors: s.Errors, Skipped: s.Skipped, Suites: []junitSuite{s}}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(out); err != nil {
		return fmt.Errorf("write junit: %w", err)
	}
	_, err := io.WriteString(w, "\n")
	return err
}
