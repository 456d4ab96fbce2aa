package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/pflag"
)

// version is set at build time with -ldflags "-X main.version=..." (the
// Makefile's VERSION, from git describe --tags). Unset (go build, go
// install), about falls back to what Go embeds in the binary.
var version string

// commit, commitDate and modified ("true" or "false") are set with -X by
// the Makefile too: Go stamps no VCS information in a linked git worktree
// (golang/go#58218), nor with -buildvcs=false.
var commit, commitDate, modified string

// buildAbout is what the version command, the full build's --version and
// the build_info metric say about the running binary.
type buildAbout struct {
	Version string `json:"version"`
	// Commit, Date and Modified are Go's vcs.revision, vcs.time (the
	// commit's time, so a rebuild of a commit says the same) and
	// vcs.modified: "unknown" and false when the binary was built
	// outside a checkout (or by go test, which embeds no VCS stamp).
	Commit    string `json:"commit"`
	Date      string `json:"date"`
	Modified  bool   `json:"modified"`
	GoVersion string `json:"go_version"`
	// Build is "full" or "hookonly" (commands_*.go).
	Build string `json:"build"`
}

// about describes this binary. It reads the build info on each call, not
// at start: the hookonly build runs at every container start and needs it
// only for the version command.
func about() buildAbout {
	bi, _ := debug.ReadBuildInfo()
	return describe(ldStamp{version, commit, commitDate, modified}, bi)
}

// ldStamp is what the build set with -X; an empty field was not set.
type ldStamp struct{ version, commit, date, modified string }

// describe gives each field as set with -X, else as Go stamped it: the
// main module's version (a tag, or a pseudo-version from the commit) and
// the VCS settings; else "dev" and "unknown".
func describe(ld ldStamp, bi *debug.BuildInfo) buildAbout {
	a := buildAbout{Version: "dev", Commit: "unknown", Date: "unknown", GoVersion: runtime.Version(), Build: buildName}
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

// versionCommand is in every build.
var versionCommand = command{
	use:     "version",
	summary: "print the version, commit, date, Go version and build",
	long: `Prints the version (git describe --tags at build time), the commit and its
date, whether the checkout had uncommitted changes, the Go version and the
build (full, or hookonly: the hook-side commands only). --version prints
the version alone.`,
	newConfig: func() config { return &versionConfig{} },
}

type versionConfig struct{ format string }

func (c *versionConfig) register(fs *pflag.FlagSet) {
	fs.Var(newEnum(&c.format, "text", "text", "json"), "format", "text (one \"key: value\" a line) or json")
}

func (c *versionConfig) run(_ []string, s stdio) int {
	a := about()
	if c.format == "json" {
		b, _ := json.Marshal(a)
		fmt.Fprintf(s.out, "%s\n", b)
		return 0
	}
	fmt.Fprintf(s.out, "version: %s\ncommit: %s\ndate: %s\nmodified: %t\ngo: %s\nbuild: %s\n",
		a.Version, a.Commit, a.Date, a.Modified, a.GoVersion, a.Build)
	return 0
}
