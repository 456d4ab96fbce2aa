package report

import (
	"bytes"
	"encoding/json"
	"github.com/iptables-alerter/iptables-alerter/lib/wording"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/lib/catalog"
	"github.com/iptables-alerter/iptables-alerter/lib/events"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// TestNodeFindings (issue 19 item 2): the agent's node-mode records, from a
// findings file or from their Events on the Node, make a group under a
// Node owner naming their writer; the node summary Events, which repeat
// pods' ones, still do not count; a later gone record clears the node's.
func TestNodeFindings(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	writer := &findings.Writer{PID: 7, Comm: "iptables-nft-re", Container: "mesh-agent", Pod: findings.Pod{Namespace: "mesh", Name: "agent-x7", UID: "u7"}}
	node := findings.Record{Schema: findings.Schema, Subject: findings.SubjectNode, Node: "worker-1", Fingerprint: "n1", Time: t0,
		Nft: findings.Nft{Rules: 2}, Impact: findings.Impact{Xt: 2}, Worst: findings.ImpactXt, Writer: writer}
	other := node
	other.Node, other.Writer = "worker-2", nil
	pod := findings.Record{Schema: findings.Schema, Node: "worker-1", Fingerprint: "p1", Time: t0, Pod: findings.Pod{Namespace: "shop", Name: "web", UID: "u1"},
		Nft: findings.Nft{Rules: 1}, Impact: findings.Impact{Xt: 1}, Worst: findings.ImpactXt}
	gone := other
	gone.State, gone.Time, gone.Nft, gone.Impact, gone.Worst = findings.StateGone, t0.Add(time.Second), findings.Nft{}, findings.Impact{}, ""
	// As recorded before node hints: the pod's wording (issue 25), which
	// the pod's finding keeps.
	kubeProxy := catalog.Builtin().Match([]string{"KUBE-SERVICES"}, nil)
	node.Vendors, pod.Vendors = kubeProxy, kubeProxy
	var data []byte
	for _, r := range []findings.Record{node, other, pod, gone} {
		line, err := findings.Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		data = append(data, line...)
	}
	path := filepath.Join(t.TempDir(), "findings.jsonl")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var sk Skipped
	items, err := ReadFindings(path, &sk)
	if err != nil {
		t.Fatal(err)
	}

	sum := events.SummaryOf(node, "worker-3", nodeOwner("")).JSON()
	ev := func(ann map[string]string) map[string]any {
		return map[string]any{"metadata": map[string]any{"namespace": "default", "annotations": ann}, "reason": events.Reason,
			"reportingComponent": events.Controller, "involvedObject": map[string]any{"kind": "Node", "name": "worker-3"}}
	}
	doc, _ := json.Marshal(map[string]any{"kind": "EventList", "items": []any{
		ev(map[string]string{events.SummaryAnnotation: sum, events.SubjectAnnotation: "node"}),
		ev(map[string]string{events.SummaryAnnotation: sum}),
	}})
	evItems, err := ReadEvents(bytes.NewReader(doc), "saved", &sk)
	if err != nil || len(evItems) != 1 {
		t.Fatalf("events: %+v, %v; want the node record's only", evItems, err)
	}
	items = append(items, evItems...)
	if !reflect.DeepEqual(sk, Skipped{}) {
		t.Errorf("skipped %+v", sk)
	}

	gs := GroupItems(items, nil)
	for _, format := range []string{"text", "markdown", "json"} {
		var b bytes.Buffer
		if err := Write(&b, Report{Groups: gs}, format); err != nil || !strings.Contains(b.String(), "worker-3") || !strings.Contains(b.String(), "Node") {
			t.Errorf("%s report without the Node owner (%v):\n%s", format, err, b.String())
		}
	}
	var b bytes.Buffer
	if err := Write(&b, Report{Groups: gs}, "text"); err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(b.String(), "\n              ", " ")
	if n, want := strings.Count(text, "in a pod"), 1; n != want {
		t.Errorf("pod wording %d times, want %d (the pod's only):\n%s", n, want, text)
	}
	if n := strings.Count(text, catalog.NodeWords(kubeProxy)[0].Hint); n != 2 {
		t.Errorf("node hint %d times, want 2 (worker-1, worker-3):\n%s", n, text)
	}
	var got []string
	for _, g := range gs {
		got = append(got, g.Namespace+"|"+g.Owner.String()+"|"+strings.Join(g.Nodes, ",")+"|"+strings.Join(g.Writers, ";"))
	}
	want := []string{
		"|Node/worker-1|worker-1|" + wording.WriterLine(writer),
		"|Node/worker-3|worker-3|" + wording.WriterLine(writer),
		"shop|Pod/web|worker-1|",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("groups:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
