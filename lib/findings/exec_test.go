package findings

import (
	"bytes"
	"strings"
	"testing"
)

// A pod's command line is bounded and escaped on the line, and an old
// reader's view (state present, no counts) stays what it was.
func TestEncodeExec(t *testing.T) {
	argv := []string{"iptables-legacy", "-A", "INPUT", "-m", "comment", "--comment", "evil\n{\"schema\":\"forged\"}\x1b[31m"}
	for i := 0; i < 200; i++ {
		argv = append(argv, strings.Repeat("x", 500))
	}
	rec := Record{Source: SourceExec, State: StatePresent, Fingerprint: "f", Pod: Pod{Namespace: "ns", Name: "p", UID: "u"},
		Exec: &Exec{Argv: argv, Tool: "iptables-legacy", Backend: "legacy", Operation: "write", Command: "-A", Table: "filter", Chain: "INPUT",
			Exited: true, ExitCode: 3, Failed: true, MissingKernelSupport: true}}
	b, err := Encode(rec)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > MaxRecordBytes || bytes.Count(b, []byte("\n")) != 1 || bytes.Contains(b, []byte("\x1b")) {
		t.Fatalf("line of %d bytes: %q", len(b), b)
	}
	if len(rec.Exec.Argv) != len(argv) {
		t.Error("Encode changed the caller's argv")
	}
	got, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Failed() || !got.Exec.ArgvCut || got.Exec.Argv[0] != "iptables-legacy" || got.Exec.ExitCode != 3 || got.KnownState() != StatePresent {
		t.Errorf("parsed %+v", got.Exec)
	}
	if !strings.Contains(got.Exec.CommandLine(80), `"evil\n{\"schema`) || len(got.Exec.CommandLine(80)) > 80 {
		t.Errorf("command line %q", got.Exec.CommandLine(80))
	}
	// Old records have no exec: null, not failed.
	old, err := Parse([]byte(`{"schema":"iptables-alerter/v1","state":"present","fingerprint":"f","legacy":{"rules":1}}`))
	if err != nil || old.Exec != nil || old.Failed() {
		t.Errorf("old line: %+v %v", old.Exec, err)
	}
	a := &Exec{Tool: "iptables", Operation: "read", Command: "-C", Table: "filter", Chain: "X", Exited: true, ExitCode: 1}
	b2 := *a
	b2.Argv = []string{"iptables", "-C", "X", "-s", "10.0.0.1"}
	if a.ShapeFingerprint() != b2.ShapeFingerprint() {
		t.Error("the shape fingerprint depends on argv's values")
	}
	b2.Chain = "Y"
	if a.ShapeFingerprint() == b2.ShapeFingerprint() {
		t.Error("the shape fingerprint ignores the chain")
	}
}
