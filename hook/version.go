package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/iptables-alerter/iptables-alerter/internal/buildinfo"
)

// about describes this binary.
func about() buildinfo.About { return buildinfo.Read(buildName) }

// versionCommand is in every build.
var versionCommand = command{
	use:     "version",
	summary: "print the version, commit, date, Go version and build",
	long: `Prints the version (git describe --tags at build time), the commit and its
date, whether the checkout had uncommitted changes, the Go version and the
build (full; hookonly: the hook-side commands only; agentonly: the agent
alone). --version prints the version alone.`,
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
