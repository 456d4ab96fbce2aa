// Package buildinfo says which iptables-alerter binary runs: the version,
// commit and date the Makefile stamps with -X, else what Go embeds. It
// imports only the standard library: the hookonly build links it, and
// that build runs at every container start.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// version is set at build time with -ldflags "-X
// github.com/iptables-alerter/iptables-alerter/internal/buildinfo.version=..."
// (the Makefile's VERSION, from git describe --tags). Unset (go build, go
// install), Read falls back to what Go embeds in the binary.
var version string

// commit, commitDate and modified ("true" or "false") are set with -X by
// the Makefile too: Go stamps no VCS information in a linked git worktree
// (golang/go#58218), nor with -buildvcs=false.
var commit, commitDate, modified string

// About is what the version command, the full build's --version and
// the build_info metric say about the running binary.
type About struct {
	Version string `json:"version"`
	// Commit, Date and Modified are Go's vcs.revision, vcs.time (the
	// commit's time, so a rebuild of a commit says the same) and
	// vcs.modified: "unknown" and false when the binary was built
	// outside a checkout (or by go test, which embeds no VCS stamp).
	Commit    string `json:"commit"`
	Date      string `json:"date"`
	Modified  bool   `json:"modified"`
	GoVersion string `json:"go_version"`
	// Build is "full", "hookonly" or "agentonly" (the command's build tags).
	Build string `json:"build"`
}

// Read describes this binary, build being the name of its build. It reads
// the build info on each call, not at start: the hookonly build runs at
// every container start and needs it only for the version command.
func Read(build string) About {
	bi, _ := debug.ReadBuildInfo()
	return describe(ldStamp{version, commit, commitDate, modified}, bi, build)
}

// ldStamp is what the build set with -X; an empty field was not set.
type ldStamp struct{ version, commit, date, modified string }

// describe gives each field as set with -X, else as Go stamped it: the
// main module's version (a tag, or a pseudo-version from the commit) and
// the VCS settings; else "dev" and "unknown".
func describe(ld ldStamp, bi *debug.BuildInfo, build string) About {
	a := About{Version: "dev", Commit: "unknown", Date: "unknown", GoVersion: runtime.Version(), Build: build}
	if bi != nil {
		if bi.GoVersion != "" {
			a.GoVersion = bi.GoVersion
		}
		if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			a.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				a.Commit = s.Value
			case "vcs.time":
				a.Date = s.Value
			case "vcs.modified":
				a.Modified = s.Value == "true"
			}
		}
	}
	if ld.version != "" {
		a.Version = ld.version
	}
	if ld.commit != "" {
		a.Commit, a.Modified = ld.commit, ld.modified == "true"
	}
	if ld.date != "" {
		a.Date = ld.date
	}
	return a
}
