package report

import (
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

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
		for _, c := range r.Clusters {
			s.Properties.Property = append(s.Properties.Property, junitProperty{"cluster." + safetext.Display(c.Name), c.Line()})
		}
	}
	// A cluster not read is an error of its own: the CI job shows it
	// rather than a suite with its workloads missing.
	for _, c := range r.Unread() {
		s.Cases = append(s.Cases, junitCase{Name: "cluster " + safetext.Display(c.Name), Classname: safetext.Display(c.Name), Time: "0",
			Error: &junitMessage{Message: c.Line(), Type: "ClusterNotRead"}})
		s.Errors++
	}
	// So is a gate that cannot pass what it read (GateBlind: exit 2): a
	// CI job reading only the suite would otherwise see it green.
	if why := r.GateBlind(); why != "" {
		s.Cases = append(s.Cases, junitCase{Name: "input not read whole", Classname: "report", Time: "0",
			Error: &junitMessage{Message: why, Type: "GateBlind"}})
		s.Errors++
	}
	head := tableHeader(r.Fleet())
	for _, g := range r.Groups {
		// encoding/xml escapes markup and replaces characters XML cannot
		// hold; Display keeps the text readable as well.
		class := g.Namespace
		if r.Fleet() {
			class = g.Cluster + "/" + g.Namespace
		}
		c := junitCase{Name: safetext.Display(g.Owner.String()), Classname: safetext.Display(class), Time: "0"}
		var detail strings.Builder
		for i, v := range columns(g, r.Fleet(), safetext.Display) {
			fmt.Fprintf(&detail, "%s: %s\n", strings.ToLower(head[i]), v)
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
