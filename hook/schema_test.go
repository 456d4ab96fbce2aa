//go:build !hookonly

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/schematest"
)

// TestSchemaRealRecords validates what the real programs write against the
// published schemas (docs/schema): the hook's findings lines for a pod
// using iptables-nft, legacy and a known vendor, then for the same pod once
// its rules are gone; `report -o json` of those lines with the documented
// expectations; the shipped allowlists. Each schema is closed: a record
// with one field more fails, which the test checks on a real line too.
func TestSchemaRealRecords(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft-restore", "iptables-nft", "iptables-legacy")
	ns := nstest.New(t)
	ns.Restore(nstest.IstioNAT, "iptables-nft-restore")
	ns.Run("iptables-legacy", "-A", "OUTPUT", "-d", "169.254.169.254", "-j", "REJECT")
	h := hookRun{}
	st := pod{netns: ns.Path(), sandbox: "sb-schema"}.state(t)
	runHookProc(t, st, &h)
	ns.Run("iptables-nft", "-t", "nat", "-F")
	ns.Run("iptables-nft", "-t", "nat", "-X")
	ns.Run("iptables-legacy", "-F", "OUTPUT")
	runHookProc(t, st, &h)
	lines, err := os.ReadFile(h.findings)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"state":"present"`, `"state":"gone"`, `"legacy":{"tables":["ip filter"]`, `"name":"istio"`} {
		if !bytes.Contains(lines, []byte(want)) {
			t.Fatalf("the hook's lines lack %s (the test needs both records):\n%s\nstderr: %s", want, lines, h.stderr)
		}
	}
	if n := schematest.ValidateLines(t, schematest.Findings, lines); n != 2 {
		t.Errorf("validated %d findings lines, want 2", n)
	}
	first, _, _ := bytes.Cut(lines, []byte("\n"))
	if err := schematest.Check(schematest.Findings, schematest.WithField(t, first, "exec", map[string]any{"pid": 1})); err == nil {
		t.Error("a findings line with a field the schema does not declare validated")
	}

	// The report of the first look only: after the gone line it has
	// nothing to group.
	present := filepath.Join(t.TempDir(), "findings.jsonl")
	if err := os.WriteFile(present, append(first, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	exps := filepath.Join(t.TempDir(), "expected.json")
	if err := os.WriteFile(exps, docsExpectations(t), 0o644); err != nil {
		t.Fatal(err)
	}
	schematest.Validate(t, schematest.Expectations, docsExpectations(t))
	code, out, stderr := runCmd(t, "report", "-o", "json", "--expectations", exps, present)
	if code != 0 {
		t.Fatalf("report exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, `"groups": [`) || !strings.Contains(out, "istio") {
		t.Fatalf("report JSON without the pod's group:\n%s", out)
	}
	schematest.Validate(t, schematest.Report, []byte(out))
	if err := schematest.Check(schematest.Report, schematest.WithField(t, []byte(out), "regions", []string{"a"})); err == nil {
		t.Error("a report with a field the schema does not declare validated")
	}

	for _, f := range []string{"packaging/allowlist.json", "lib/allowlist/default.json", "lib/allowlist/platform.json"} {
		b, err := os.ReadFile(filepath.Join("..", f))
		if err != nil {
			t.Fatal(err)
		}
		schematest.Validate(t, schematest.Allowlist, b)
	}
}

// docsExpectations is the example expectations file of docs/report.md, as
// JSON: the published example must be valid too.
func docsExpectations(t *testing.T) []byte {
	t.Helper()
	doc, err := os.ReadFile("../docs/report.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "\n    expected:\n")
	if !ok {
		t.Fatal("docs/report.md has no indented expected: example")
	}
	var block strings.Builder
	block.WriteString("expected:\n")
	for _, l := range strings.Split(rest, "\n") {
		if !strings.HasPrefix(l, "    ") {
			break
		}
		block.WriteString(strings.TrimPrefix(l, "    ") + "\n")
	}
	j, err := yaml.YAMLToJSON([]byte(block.String()))
	if err != nil {
		t.Fatalf("docs example: %v", err)
	}
	return j
}
