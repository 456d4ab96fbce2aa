package consumer

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/follow"
)

// recorder consumes by remembering fingerprints; fail makes the next
// calls fail.
type recorder struct {
	seen []string
	fail int
}

func (r *recorder) Consume(_ context.Context, rec findings.Record) error {
	if r.fail > 0 {
		r.fail--
		return errors.New("not now")
	}
	r.seen = append(r.seen, rec.Fingerprint)
	return nil
}

// TestRunnerOrderResumeMalformed: each line is parsed once and handed to
// the consumers in order; a consumer that fails gets the same line again
// and the ones before it are not called again for it; a malformed line is
// counted once and reaches no consumer.
func TestRunnerOrderResumeMalformed(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "findings.jsonl")
	log := findings.Log{Path: path}
	if err := os.WriteFile(path, []byte("not json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, fp := range []string{"a", "b"} {
		rec := findings.Record{Schema: findings.Schema, Time: findings.Now(), Pod: findings.Pod{Namespace: "ns", Name: "p", UID: "u"}, Fingerprint: fp}
		if err := log.Append(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
	}
	first, second := &recorder{}, &recorder{fail: 2}
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	var told int
	r := &Runner{Findings: path, Store: follow.FileStore(filepath.Join(dir, "cp.json")), Log: quiet,
		OnMalformed: func(error) { told++ },
		Consumers:   []Named{{"first", first}, {"second", second}}}
	for range 3 {
		if err := r.Once(context.Background()); err != nil && !strings.HasSuffix(err.Error(), "second: not now") {
			t.Fatal(err)
		}
	}
	if got, want := first.seen, []string{"a", "b"}; !equal(got, want) {
		t.Errorf("first consumer saw %v, want %v (each line once)", got, want)
	}
	if got, want := second.seen, []string{"a", "b"}; !equal(got, want) {
		t.Errorf("second consumer saw %v, want %v", got, want)
	}
	if r.Malformed() != 1 || told != 1 {
		t.Errorf("malformed %d, told %d; want 1 and 1", r.Malformed(), told)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
