package schematest

import (
	"bytes"
	"flag"
	"os"
	"testing"
)

var update = flag.Bool("update-schemas", false, "rewrite docs/schema from the Go types (make schema)")

// TestSchemasUpToDate fails when a Go type that encodes a published format
// gained, lost or changed a field and docs/schema was not regenerated.
func TestSchemasUpToDate(t *testing.T) {
	got, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range got {
		if *update {
			if err := os.WriteFile(Path(name), b, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		old, err := os.ReadFile(Path(name))
		if err != nil {
			t.Errorf("%v (run make schema)", err)
			continue
		}
		if !bytes.Equal(old, b) {
			t.Errorf("%s is stale: its Go type changed; run make schema", Path(name))
		}
	}
}

// TestSchemasClosed checks every object of every schema refuses fields it
// does not declare, and that the validator enforces it.
func TestSchemasClosed(t *testing.T) {
	for name := range Specs() {
		if _, err := Compile(name); err != nil {
			t.Fatalf("compile %s: %v", name, err)
		}
	}
	if err := Check(Allowlist, []byte(`{"entries":[]}`)); err != nil {
		t.Errorf("empty allowlist refused: %v", err)
	}
	bad := map[string]string{
		Allowlist:    `{"entries":[{"name":"a","reason":"b","rule":"-A X","colour":"red"}]}`,
		Expectations: `{"expected":[{"namespace":"a","reason":"b","nmespace":"c"}]}`,
		Report:       `{"groups":[],"skipped":{"malformed":0,"invalid":0,"cut":0},"fail_on":"never","failing":false,"extra":1}`,
	}
	for name, doc := range bad {
		if err := Check(name, []byte(doc)); err == nil {
			t.Errorf("%s: a field the schema does not declare was accepted: %s", name, doc)
		}
	}
}
