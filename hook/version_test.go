package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/internal/buildinfo"
)

// TestVersion: version prints one "key: value" line each, --format json
// the same fields, --version the version alone; in both builds (go test
// -tags hookonly ./hook runs it against the hookonly command line).
func TestVersion(t *testing.T) {
	a := about()
	if a.Build != buildName || a.Version == "" || a.GoVersion == "" {
		t.Fatalf("about() = %+v", a)
	}
	want := "version: " + a.Version + "\ncommit: " + a.Commit + "\ndate: " + a.Date + "\nmodified: false\ngo: " + a.GoVersion + "\nbuild: " + buildName + "\n"
	if a.Modified {
		want = strings.Replace(want, "modified: false", "modified: true", 1)
	}
	if code, out, errs := runCmd(t, "version"); code != 0 || out != want || errs != "" {
		t.Errorf("version: exit %d, stdout %q, stderr %q; want stdout %q", code, out, errs, want)
	}
	if code, out, errs := runCmd(t, "--version"); code != 0 || out != a.Version+"\n" || errs != "" {
		t.Errorf("--version: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, out, errs := runCmd(t, "version", "--format", "json")
	var got buildinfo.About
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || got != a || errs != "" {
		t.Errorf("version --format json: exit %d, stdout %q (%v), stderr %q; want %+v", code, out, err, errs, a)
	}
	if code, out, _ := runCmd(t, "version", "--help"); code != 0 || !strings.Contains(out, "Usage:") || !strings.Contains(out, "--format") {
		t.Errorf("version --help: exit %d, stdout %q", code, out)
	}
	if code, _, errs := runCmd(t, "version", "--format", "yaml"); code == 0 || !strings.Contains(errs, "want text, json") {
		t.Errorf("version --format yaml: exit %d, stderr %q", code, errs)
	}
}
