//go:build !hookonly && !agentonly

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/iptables-alerter/iptables-alerter/lib/events"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
	"github.com/iptables-alerter/iptables-alerter/lib/report"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

// hostile holds what a forged Event or a pod's strings may carry against
// the report's reader: a Markdown row, terminal escapes (clear screen,
// window title, C1 CSI), raw HTML, a code span, bidi and line separators.
const hostile = "x\x1b[2J\x1b]0;pwned\x07|\n| FAKE | ROW | a | b | c | d | e | f | g |\r\n<img src=x onerror=alert(1)>`code`\u202e\u2028\u009b31m"

// bogusLevel is a worst level no writer may print.
const bogusLevel = "BOGUSLEVEL\n| FAKE | ROW |\x1b[31m"

// TestReportHostileEvent is issue 18 item 5 on real parts: Events made
// through a real kube-apiserver by anyone allowed to create Events, with a
// summary annotation holding newlines, pipes, ESC sequences, HTML, a bogus
// level, a javascript: link and a huge hint, read by `report` from the
// cluster and from a saved events file, and a findings file written by the
// real findings writer with the same strings in the pod's fields. Every
// format stays its own shape: no Markdown row added, no control character
// in the text, JUnit and JSON well-formed, the level refused, the link
// dropped, the output bounded.
func TestReportHostileEvent(t *testing.T) {
	c := kubetest.Start(t)
	cs := c.Client()
	kubetest.Namespace(t, cs, "shop")
	kc := c.Kubeconfig("admin", c.AdminToken)

	sum := events.Summary{
		Node:   "node-a" + hostile,
		Owner:  owner.Owner{Kind: "Deployment\n| FORGED |", Name: "web" + hostile},
		Pod:    findings.Pod{Namespace: "shop", Name: "web-1", UID: "u1"},
		State:  findings.StatePresent,
		Impact: findings.Impact{Legacy: -5, Xt: 1},
		Worst:  bogusLevel,
		Vendors: []findings.Vendor{{Name: "istio" + hostile, Hint: hostile + strings.Repeat("A", 50<<10),
			Doc: "javascript:alert(document.domain)//https://istio.io/"}},
		Examples: []findings.Example{{Family: "ip" + hostile, Table: "nat", Chain: hostile, Rule: "-A OUTPUT " + hostile, Impact: bogusLevel}},
		Writer: &findings.Writer{PID: 1, Comm: hostile, PPID: 2, ParentComm: hostile, Container: strings.Repeat(hostile, 50),
			Pod: findings.Pod{Namespace: hostile, Name: hostile}},
	}
	unknown := events.Summary{Node: "node-b", Pod: findings.Pod{Namespace: "shop", Name: "hider", UID: "u2"},
		State: findings.StateUnknown, Error: "busy" + hostile, Worst: bogusLevel}
	for i, ev := range []struct {
		name, reason string
		sum          events.Summary
	}{{"hostile-usage", events.Reason, sum}, {"hostile-unknown", events.UnknownReason, unknown}} {
		createPodEvent(t, cs, ev.name, ev.reason, "forged "+string(rune('0'+i)), ev.sum)
	}

	dir := t.TempDir()
	saved := saveEvents(t, cs, dir)

	// A findings file as the hook writes it, the pod's strings hostile.
	file := filepath.Join(dir, "findings.jsonl")
	rec := findings.Record{Time: findings.Now(), Node: "node-c" + hostile, Source: "hook", Stage: "poststart",
		Pod: findings.Pod{Namespace: "shop" + hostile, Name: "db-0" + hostile, UID: "u3" + hostile}, State: findings.StatePresent,
		Nft: findings.Nft{Rules: 1}, Impact: findings.Impact{Xt: 1}, Worst: findings.ImpactXt, Fingerprint: "f1", Error: hostile,
		Examples: []findings.Example{{Family: "ip", Table: "filter", Chain: "INPUT", Rule: `-A INPUT -m comment --comment "` + hostile + `" -j DROP`, Impact: findings.ImpactXt}},
		Writer:   &findings.Writer{PID: 3, Comm: hostile, Unit: hostile, Gone: true}}
	if err := (findings.Log{Path: file}).Append(context.Background(), rec); err != nil {
		t.Fatal(err)
	}

	for name, args := range map[string][]string{
		"cluster events": {"--kubeconfig", kc},
		"saved events":   {"--events", saved},
		"findings file":  {file},
	} {
		for _, f := range report.Formats {
			out, code := runReportCmd(t, append(args, "--format", f)...)
			if code != 0 {
				t.Errorf("%s %s: exit %d", name, f, code)
			}
			checkHostileReport(t, name+" "+f, f, out)
		}
	}
}

// createPodEvent creates an Event as our forwarder's, regarding the pod
// sum names, through the API anyone allowed to create Events uses.
func createPodEvent(t *testing.T, cs kubernetes.Interface, name, reason, note string, sum events.Summary) {
	t.Helper()
	p := sum.Pod
	_, err := cs.EventsV1().Events(p.Namespace).Create(kubetest.Ctx(t), &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: p.Namespace,
			Annotations: map[string]string{events.SummaryAnnotation: sum.JSON()}},
		EventTime: metav1.NewMicroTime(time.Now()), ReportingController: events.Controller, ReportingInstance: "node-a",
		Action: events.Action, Reason: reason, Type: corev1.EventTypeWarning, Note: note,
		Regarding: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace, Name: p.Name, UID: types.UID(p.UID)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create event %s: %v", name, err)
	}
}

// checkHostileReport asserts that out, a report of hostile inputs in
// format, kept its shape.
func checkHostileReport(t *testing.T, name, format, out string) {
	t.Helper()
	if strings.Contains(out, "BOGUSLEVEL") {
		t.Errorf("%s: prints the bogus level:\n%s", name, out)
	}
	if strings.Contains(out, "javascript:") {
		t.Errorf("%s: keeps the javascript: link:\n%s", name, out)
	}
	// A 50 KiB hint is cut: no output grows with what a pod wrote.
	if len(out) > 24<<10 {
		t.Errorf("%s: %d bytes of output", name, len(out))
	}
	// No format hands a terminal a control character: JSON and JUnit are
	// read with cat and less too.
	for _, r := range out {
		if r != '\n' && (unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) || unicode.In(r, unicode.Zl, unicode.Zp)) || r == utf8.RuneError {
			t.Errorf("%s: control character %U in the output:\n%q", name, r, out)
			break
		}
	}
	switch format {
	case "text":
		for _, l := range strings.Split(out, "\n") {
			if n := utf8.RuneCountInString(l); n > report.TextWidth || strings.HasPrefix(l, "| FAKE") {
				t.Errorf("%s: line forged or %d wide: %q", name, n, l)
			}
		}
		if !strings.Contains(out, "not valid") {
			t.Errorf("%s: the summary does not say values were not valid:\n%s", name, out)
		}
		if !strings.Contains(out, "\n    writer:   ") {
			t.Errorf("%s: no writer line:\n%s", name, out)
		}
	case "markdown":
		// Header, separator, one row a group: every table line has its
		// cells' pipes and nothing else starts a row.
		var rows int
		for _, l := range strings.Split(out, "\n") {
			if !strings.HasPrefix(l, "|") {
				continue
			}
			rows++
			if n := strings.Count(l, "|") - strings.Count(l, `\|`); n != 11 {
				t.Errorf("%s: row of %d cells: %q", name, n-1, l)
			}
		}
		if rows < 3 || strings.Count(out, "<") != strings.Count(out, `\<`) {
			t.Errorf("%s: %d table lines or raw HTML:\n%s", name, rows, out)
		}
	case "json":
		var r report.Report
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%s: not JSON: %v\n%s", name, err, out)
		}
		for _, g := range r.Groups {
			if findings.ImpactRank(g.Worst) == len(findings.ImpactLevels) && g.Worst != "" {
				t.Errorf("%s: group %s worst %q", name, g.Owner, g.Worst)
			}
			for _, ex := range g.Examples {
				if findings.ImpactRank(ex.Impact) == len(findings.ImpactLevels) && ex.Impact != "" {
					t.Errorf("%s: example impact %q", name, ex.Impact)
				}
			}
			if g.Impact.Legacy < 0 || g.Impact.Xt < 0 || g.Impact.Native < 0 {
				t.Errorf("%s: negative counts %+v", name, g.Impact)
			}
		}
		// Every input names a hostile writer: shown, bounded.
		writers := 0
		for _, g := range r.Groups {
			for _, w := range g.Writers {
				writers++
				if len(w) > 512 {
					t.Errorf("%s: group %s writer of %d bytes", name, g.Owner, len(w))
				}
			}
		}
		if writers == 0 {
			t.Errorf("%s: no writer shown:\n%s", name, out)
		}
		// Decoded apart: the count is new with the fix this test shows.
		var sk struct {
			Skipped struct {
				Invalid int `json:"invalid"`
			} `json:"skipped"`
		}
		if json.Unmarshal([]byte(out), &sk); sk.Skipped.Invalid == 0 {
			t.Errorf("%s: no invalid values counted:\n%s", name, out)
		}
	case "html":
		// html/template escaped every value: the only tags are ours.
		if strings.Contains(out, "<img") || strings.Contains(out, "onerror=alert") && !strings.Contains(out, "&lt;img src=x onerror=alert") {
			t.Errorf("%s: raw HTML from the input:\n%s", name, out)
		}
	case "junit":
		d := xml.NewDecoder(strings.NewReader(out))
		for {
			_, err := d.Token()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Errorf("%s: JUnit not well-formed: %v\n%s", name, err, out)
				break
			}
		}
	}
}

// A findings line the report could not read (torn by a crash mid-write, a
// copy taken while the agent wrote) may have been the finding that fails:
// under a --fail-on gate the report exits 2 instead of passing on what it
// read, and says why; without a gate it reports what it read (exit 0).
func TestReportGateTornLine(t *testing.T) {
	rec := findings.Record{Schema: findings.Schema, Time: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), State: findings.StatePresent,
		Pod: findings.Pod{Namespace: "shop", Name: "web-1", UID: "u1"}, Node: "n1", Impact: findings.Impact{Native: 1}, Worst: findings.ImpactNative, Fingerprint: "f1"}
	line, err := findings.Encode(rec)
	line = bytes.TrimSuffix(line, []byte("\n"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "findings.jsonl")
	whole := append(append([]byte{}, line...), '\n')
	if err := os.WriteFile(path, append(append([]byte{}, whole...), line[:80]...), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		failOn string
		want   int
	}{{report.FailBreaks, 2}, {report.FailUnexpected, 2}, {report.FailNever, 0}} {
		code, _, stderr := runCmd(t, "report", "--fail-on", tc.failOn, path)
		if code != tc.want || (tc.want == 2) != strings.Contains(stderr, "could not be read") {
			t.Errorf("--fail-on %s over a torn line: exit %d, want %d; stderr %q", tc.failOn, code, tc.want, stderr)
		}
	}
	// The same file whole passes the breaks gate: native keeps loading.
	if err := os.WriteFile(path, whole, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCmd(t, "report", "--fail-on", report.FailBreaks, path); code != 0 {
		t.Errorf("--fail-on breaks over a whole native line: exit %d; stderr %q", code, stderr)
	}
}
