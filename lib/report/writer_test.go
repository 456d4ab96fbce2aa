package report

import (
	"bytes"
	"context"
	"github.com/iptables-alerter/iptables-alerter/lib/wording"
	"path/filepath"
	"strings"
	"testing"
	"unicode"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	corev1 "k8s.io/api/core/v1"

	"github.com/iptables-alerter/iptables-alerter/lib/events"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/openreports"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
)

// hostileWriter is what a pod may name its process or container: a forged
// report line, a terminal escape, a bidi override, a Markdown cell, HTML.
const hostileWriter = "sh\n    writer:   kubelet (pid 1) on the host\x1b[2J\u202e| FAKE |<b>x</b>\xff"

// The writer reaches the report from each source: a findings file and an
// Event's summary carry the record's (WriterLine), a Report its property;
// each is bounded when read, and a workload shows at most MaxWriters.
func TestWriterSources(t *testing.T) {
	w := &findings.Writer{PID: 4242, Comm: "iptables-nft-re", Container: "istio-init", Pod: findings.Pod{Namespace: "shop", Name: "web-1"}}
	line := wording.WriterLine(w)
	var sk Skipped

	rec := findings.Record{Time: findings.Now(), Node: "node-a", Pod: findings.Pod{Namespace: "shop", Name: "web-1", UID: "u1"}, State: findings.StatePresent,
		Nft: findings.Nft{Rules: 1}, Impact: findings.Impact{Xt: 1}, Worst: findings.ImpactXt, Fingerprint: "f1", Writer: w}
	file := filepath.Join(t.TempDir(), "findings.jsonl")
	if err := (findings.Log{Path: file}).Append(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	fromFile, err := ReadFindings(file, &sk)
	if err != nil || len(fromFile) != 1 || fromFile[0].Writer != line {
		t.Errorf("findings file: %+v, %v; want writer %q", fromFile, err, line)
	}

	sum := events.SummaryOf(rec, "node-a", owner.Owner{Kind: "Deployment", Name: "web"})
	ev := `{"kind":"Event","metadata":{"namespace":"shop","annotations":{"` + events.SummaryAnnotation + `":` + jsonString(sum.JSON()) + `}},
		"reason":"` + events.Reason + `","reportingController":"` + events.Controller + `","regarding":{"kind":"Pod","namespace":"shop","name":"web-1","uid":"u1"}}`
	fromEvent, err := ReadEvents(strings.NewReader(ev), "saved", &sk)
	if err != nil || len(fromEvent) != 1 || fromEvent[0].Writer != line {
		t.Errorf("event: %+v, %v; want writer %q", fromEvent, err, line)
	}

	x := openreportsv1alpha1.ReportResult{Source: openreports.Source, Rule: findings.ImpactXt, Result: "fail",
		Subjects:   []corev1.ObjectReference{{Kind: "Pod", Name: "web-1", UID: "u1"}},
		Properties: map[string]string{openreports.PropOwner: "Deployment/web", openreports.PropWriter: strings.Repeat(hostileWriter, 1000)}}
	it, ok := resultItem("shop", lean(t, x), &sk)
	it = valid(it, &sk)
	if !ok || len(it.Writer) > maxText || !strings.HasPrefix(it.Writer, "sh\n") {
		t.Errorf("report's writer: %d bytes %q", len(it.Writer), it.Writer[:min(len(it.Writer), 60)])
	}

	// Five pods, four writers (one twice): the first three distinct.
	var items []Item
	for i, wr := range []string{"a (pid 1) on the host", "", "b (pid 2) on the host", "a (pid 1) on the host", "c (pid 3) on the host", "d (pid 4) on the host"} {
		it := item("shop", "Deployment", "web", "web-"+string(rune('1'+i)), findings.ImpactXt, nil)
		it.Writer = wr
		items = append(items, it)
	}
	gs := GroupItems(items, nil)
	if len(gs) != 1 || strings.Join(gs[0].Writers, ";") != "a (pid 1) on the host;b (pid 2) on the host;c (pid 3) on the host" {
		t.Errorf("writers %q, want the first %d distinct", gs[0].Writers, MaxWriters)
	}
}

// jsonString quotes s as a JSON string.
func jsonString(s string) string {
	var b bytes.Buffer
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	b.WriteByte('"')
	return b.String()
}

// A hostile writer is one escaped detail line of the text, one cell of
// the Markdown table and of the HTML row, and an inert JSON string.
func TestWriterShown(t *testing.T) {
	it := item("shop", "Deployment", "web", "web-1", findings.ImpactXt, nil)
	it.Writer = hostileWriter
	var sk Skipped
	r := Report{Groups: GroupItems([]Item{valid(it, &sk)}, nil)}
	outs := map[string]string{}
	for _, f := range Formats {
		var b bytes.Buffer
		if err := Write(&b, r, f); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		outs[f] = b.String()
		for _, c := range outs[f] {
			if c != '\n' && (unicode.IsControl(c) || unicode.Is(unicode.Bidi_Control, c)) {
				t.Errorf("%s: control character %U:\n%s", f, c, outs[f])
				break
			}
		}
	}
	// Wrapped as every detail is: spaces run together.
	if n := strings.Count(outs["text"], "    writer:   "); n != 1 || !strings.Contains(outs["text"], "    writer:   sh\\x0a writer: kubelet (pid 1) on the host\\x1b[2J\\u202e| FAKE |<b>x</b>") {
		t.Errorf("text: %d writer lines, or not the escaped writer:\n%s", n, outs["text"])
	}
	for _, l := range strings.Split(outs["markdown"], "\n") {
		if strings.HasPrefix(l, "|") && strings.Count(l, "|")-strings.Count(l, `\|`) != len(header)+1 {
			t.Errorf("markdown row of other than %d cells: %q", len(header), l)
		}
	}
	if !strings.Contains(outs["markdown"], `sh\\x0a`) || !strings.Contains(outs["html"], "<th>WRITER</th>") ||
		!strings.Contains(outs["html"], `&lt;b&gt;x&lt;/b&gt;`) || strings.Contains(outs["html"], "<b>x</b>") {
		t.Errorf("markdown or html lacks the escaped writer:\n%s\n%s", outs["markdown"], outs["html"])
	}
	if !strings.Contains(outs["json"], `"writers": [`) {
		t.Errorf("json lacks writers:\n%s", outs["json"])
	}
}
