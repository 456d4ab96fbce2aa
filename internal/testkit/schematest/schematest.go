// Package schematest names the JSON Schemas published in docs/schema, makes
// them from the Go types (internal/jsonschema) and validates documents
// against the committed files, for the tests that feed them real records.
package schematest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"

	js "github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/iptables-alerter/iptables-alerter/internal/jsonschema"
	"github.com/iptables-alerter/iptables-alerter/lib/allowlist"
	"github.com/iptables-alerter/iptables-alerter/lib/execwatch"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/report"
)

// Names of the schemas: docs/schema/NAME.schema.json.
const (
	Findings     = "findings"
	Report       = "report"
	Allowlist    = "allowlist"
	Expectations = "expectations"
)

// BaseID is where the published schemas live; each $id is BaseID + file.
const BaseID = "https://raw.githubusercontent.com/iptables-alerter/iptables-alerter/main/docs/schema/"

// Specs lists every published schema. To extend one, add the field to its
// Go type and run `make schema`; a closed set of string values goes in
// Enums (a named type) or FieldEnums ("Type.json_name").
func Specs() map[string]jsonschema.Spec {
	levels := append([]string{""}, findings.ImpactLevels...)
	states := make([]string, len(findings.States))
	for i, s := range findings.States {
		states[i] = string(s)
	}
	enums := map[reflect.Type][]string{
		reflect.TypeOf(findings.State("")):   states,
		reflect.TypeOf(findings.Subject("")): {string(findings.SubjectPod), string(findings.SubjectNode)},
	}
	return map[string]jsonschema.Spec{
		Findings: {
			Title:       "iptables-alerter findings line",
			Description: "One line of findings.jsonl (schema " + findings.Schema + "): what one inspection of a pod's or the node's network namespace found. See docs/findings.md.",
			Root:        findings.Record{},
			Enums:       enums,
			FieldEnums: map[string][]string{
				"Record.schema":  {findings.Schema},
				"Record.worst":   levels,
				"Example.impact": levels,
				"Exec.backend":   {execwatch.BackendLegacy, execwatch.BackendNft},
				"Exec.operation": {execwatch.OpWrite, execwatch.OpRead, execwatch.OpSave, execwatch.OpRestore},
			},
		},
		Report: {
			Title:       "iptables-alerter report --format json",
			Description: "The document `iptables-alerter report -o json` writes: findings grouped by workload and judged. See docs/report.md.",
			Root:        report.Report{},
			Enums:       enums,
			FieldEnums: map[string][]string{
				"Report.fail_on":       report.FailModes,
				"Group.worst":          levels,
				"Group.example_impact": levels,
				"Example.impact":       levels,
			},
		},
		Allowlist: {
			Title:       "iptables-alerter allowlist file",
			Description: "The allowlist file (--allowlist, packaging/allowlist.json): rules subtracted before usage is counted. See docs/allowlist.md.",
			Root:        allowlist.File{},
			FieldEnums: map[string][]string{
				"Entry.family": {"ip", "ip6", "arp", "bridge"},
			},
		},
		Expectations: {
			Title:       "iptables-alerter report expectations file",
			Description: "The expectations file (report --expectations, YAML or JSON): usage that is expected, and why. See docs/report.md.",
			Root:        report.Expectations{},
			FieldEnums: map[string][]string{
				"Expectation.level": findings.ImpactLevels,
			},
		},
	}
}

// RepoRoot is the repository's top directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// Path is the committed schema file of name.
func Path(name string) string {
	return filepath.Join(RepoRoot(), "docs", "schema", name+".schema.json")
}

// Generate makes every schema from its Go type, by name.
func Generate() (map[string][]byte, error) {
	g := &jsonschema.Generator{RepoRoot: RepoRoot()}
	out := map[string][]byte{}
	for name, spec := range Specs() {
		spec.ID = BaseID + name + ".schema.json"
		b, err := g.Generate(spec)
		if err != nil {
			return nil, fmt.Errorf("schema %s: %w", name, err)
		}
		out[name] = b
	}
	return out, nil
}

// Compile loads the committed schema of name.
func Compile(name string) (*js.Schema, error) {
	f, err := os.Open(Path(name))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	doc, err := js.UnmarshalJSON(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Path(name), err)
	}
	c := js.NewCompiler()
	c.AssertFormat()
	id := BaseID + name + ".schema.json"
	if err := c.AddResource(id, doc); err != nil {
		return nil, err
	}
	return c.Compile(id)
}

// Check validates one JSON document against the committed schema of name.
func Check(name string, doc []byte) error {
	s, err := Compile(name)
	if err != nil {
		return err
	}
	v, err := js.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return s.Validate(v)
}

// Validate fails t unless doc is valid under the schema of name.
func Validate(t testing.TB, name string, doc []byte) {
	t.Helper()
	if err := Check(name, doc); err != nil {
		t.Errorf("%s does not match docs/schema/%s.schema.json: %v\ndocument: %s", name, name, err, clip(doc))
	}
}

// ValidateLines validates each non-empty line of a JSON-lines file; it
// returns how many it checked.
func ValidateLines(t testing.TB, name string, data []byte) int {
	t.Helper()
	n := 0
	for _, line := range bytes.Split(data, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		Validate(t, name, line)
		n++
	}
	return n
}

// WithField is doc (a JSON object) with one more top-level field: a record
// a newer writer might produce, which the schema must refuse until it
// declares the field.
func WithField(t testing.TB, doc []byte, key string, val any) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(doc, &m); err != nil {
		t.Fatal(err)
	}
	m[key] = val
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func clip(b []byte) string {
	if len(b) > 2000 {
		return string(b[:2000]) + "..."
	}
	return string(b)
}
