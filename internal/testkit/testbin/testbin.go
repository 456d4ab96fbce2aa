// Package testbin builds iptables-alerter for the tests that run it as a
// separate process (a runtime's hook, a daemon, a CLI), the one way every
// such test builds it.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Package is the main package of both builds.
const Package = "github.com/iptables-alerter/iptables-alerter/hook"

// Build builds Package into out, static as the Makefile builds it, with
// tags ("" for the full build, "hookonly" for the one hooks.d runs). A
// failure is a broken tree, never a reason for a test to skip.
func Build(out, tags string) error {
	cmd := GoBuild("-tags", tags, "-o", out, Package)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build -tags %q %s: %w\n%s", tags, Package, err, msg)
	}
	return nil
}

// GoBuild is `go build` with args, compiled as `make build` and `make
// lint` compile (CGO_ENABLED=0, -trimpath): the Go build cache then holds
// one non-race compilation of the module's dependencies, not one for each
// set of flags (each is minutes of CPU on a fresh machine's first make
// test).
func GoBuild(args ...string) *exec.Cmd {
	cmd := exec.Command(GoTool(), append([]string{"build", "-trimpath"}, args...)...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	return cmd
}

// GoTool finds the go command of the toolchain running the tests, even
// when it is not on PATH (sudo resets PATH).
func GoTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if root := os.Getenv("GOROOT"); root != "" {
		return filepath.Join(root, "bin", "go")
	}
	return "/usr/local/go/bin/go"
}
