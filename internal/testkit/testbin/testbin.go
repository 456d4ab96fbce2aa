// Package testbin builds iptables-alerter for the tests that run it as a
// separate process (a runtime's hook, a daemon, a CLI), the one way every
// such test builds it, and reads the Makefile's build defaults.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// MakeDefault gives the words of the Makefile's default for variable name,
// read with make in dir (the repository's root) from an environment
// without name or MAKEFLAGS: a variable the tests' own make sets, even
// empty, would hide it.
func MakeDefault(dir, name string) ([]string, error) {
	cmd := exec.Command("make", "-s", "--no-print-directory", "--eval=print-default: ; @echo $("+name+")", "print-default")
	cmd.Dir = dir
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, name+"=") && !strings.HasPrefix(e, "MAKEFLAGS=") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("make: %w", err)
	}
	return strings.Fields(string(out)), nil
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
