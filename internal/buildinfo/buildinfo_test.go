package buildinfo

import (
	"runtime/debug"
	"testing"
)

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
		want About
	}{
		{"make build", ldStamp{"v1.2.3-4-gabcdef0", "abcdef0123456789abcdef0123456789abcdef01", "2026-11-24T21:00:00Z", "false"}, stamped,
			About{"v1.2.3-4-gabcdef0", "abcdef0123456789abcdef0123456789abcdef01", "2026-11-24T21:00:00Z", false, "go1.99.1", "full"}},
		{"make build in a worktree: no VCS stamp", ldStamp{"v1.2.3-dirty", "abcdef0123456789abcdef0123456789abcdef01", "2026-11-24T21:00:00Z", "true"}, devel,
			About{"v1.2.3-dirty", "abcdef0123456789abcdef0123456789abcdef01", "2026-11-24T21:00:00Z", true, "go1.99.1", "full"}},
		{"make build of a tarball", ldStamp{version: "v1.2.3"}, nil, About{"v1.2.3", "unknown", "unknown", false, Read("full").GoVersion, "full"}},
		{"go build in a checkout", ldStamp{}, stamped, About{"v1.2.4-0.20261124220000-0123456789ab+dirty", "0123456789abcdef0123456789abcdef01234567", "2026-11-24T22:00:00Z", true, "go1.99.1", "full"}},
		{"no VCS stamp", ldStamp{}, devel, About{"dev", "unknown", "unknown", false, "go1.99.1", "full"}},
		{"no build info", ldStamp{}, nil, About{"dev", "unknown", "unknown", false, Read("full").GoVersion, "full"}},
	} {
		if got := describe(c.ld, c.bi, "full"); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
