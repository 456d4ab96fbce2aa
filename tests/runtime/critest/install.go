package critest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// InstallHook installs the full build bin, the hook build hookBin and the
// shipped hooks.d JSON into a new BINDIR and HOOKSDIR with the Makefile's
// install-files (what `make install` runs after its build and its check of
// CRI-O's config), then adds args to the installed command: arguments
// after its $0 reach the hook as "$@". It returns the installed hook
// binary and the hooks dir, for StartCRIO.
func InstallHook(t testing.TB, bin, hookBin string, args ...string) (hook, hooksDir string) {
	t.Helper()
	dir := t.TempDir()
	bindir, hooksDir := filepath.Join(dir, "bin"), filepath.Join(dir, "hooks.d")
	// The repository's root, three levels above this file.
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(self), "..", "..", "..")
	// The full build stands in for the agent-only one: the hook is what
	// these runtimes run.
	cmd := exec.Command("make", "-s", "-C", root, "install-files", "BIN="+bin, "HOOKBIN="+hookBin, "AGENTBIN="+bin,
		"DESTDIR=", "BINDIR="+bindir, "HOOKSDIR="+hooksDir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make install-files: %v\n%s", err, out)
	}
	path := filepath.Join(hooksDir, "iptables-alerter.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]json.RawMessage
	var h specs.Hook
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("decode %s: %v", path, err)
	}
	if err := json.Unmarshal(doc["hook"], &h); err != nil {
		t.Fatalf("decode %s hook: %v", path, err)
	}
	h.Args = append(h.Args, args...)
	if doc["hook"], err = json.Marshal(h); err != nil {
		t.Fatal(err)
	}
	if data, err = json.Marshal(doc); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(bindir, "iptables-alerter-hook"), hooksDir
}
