package main

import (
	"encoding/json"
	"runtime/debug"
	"strings"
	"testing"
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
	var got buildAbout
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

// TestDescribe: what -X set wins; else the version Go stamped (a tag or
// pseudo-version) and its VCS settings; else "dev" and "unknown".
func TestDescribe(t *testing.T) {
	stamped := &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Path: "github.com/iptables-alerter/iptables-alerter", Version: "v1.2.4-0.20261124220000-0123456789ab+dirty"},
		Settings: []debug.BuildSetting{{Key: "-trimpath", Value: "true"}, {Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2026-11-24T22:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	devel := &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Version: "(devel)"}}
	for _, c := range []struct {
		name string
		ld   ldStamp
		bi   *debug.BuildInfo
		want buildAbout
	}{
		{"make build", ldStamp{"v1.2.3-4-gabcdef0", "abcdef0123456789abcdef0123456789abcdef01", "2026-11-24T21:00:00Z", "false"}, stamped,
			buildAbout{"v1.2.3-4-gabcdef0", "abcdef0123456789abcdef0123456789abcdef01", "2026-11-24T21:00:00Z", false, "go1.99.1", buildName}},
		{"make build in a worktree: no VCS stamp", ldStamp{"v1.2.3-dirty", "abcdef0123456789abcdef0123456789abcdef01", "2026-11-24T21:00:00Z", "true"}, devel,
			buildAbout{"v1.2.3-dirty", "abcdef0123456789abcdef0123456789abcdef01", "2026-11-24T21:00:00Z", true, "go1.99.1", buildName}},
		{"make build of a tarball", ldStamp{version: "v1.2.3"}, nil, buildAbout{"v1.2.3", "unknown", "unknown", false, about().GoVersion, buildName}},
		{"go build in a checkout", ldStamp{}, stamped, buildAbout{"v1.2.4-0.20261124220000-0123456789ab+dirty", "0123456789abcdef0123456789abcdef01234567", "2026-11-24T22:00:00Z", true, "go1.99.1", buildName}},
		{"no VCS stamp", ldStamp{}, devel, buildAbout{"dev", "unknown", "unknown", false, "go1.99.1", buildName}},
		{"no build info", ldStamp{}, nil, buildAbout{"dev", "unknown", "unknown", false, about().GoVersion, buildName}},
	} {
		if got := describe(c.ld, c.bi); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
