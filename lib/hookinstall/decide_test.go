package hookinstall

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/hooksdtest"
)

// TestDecide: on a node without CRI-O, auto installs nothing and says so;
// crio checks against what the node's CRI-O reads and refuses another
// directory; none and --no-check skip the check.
func TestDecide(t *testing.T) {
	empty := t.TempDir()
	crio := t.TempDir()
	if err := os.MkdirAll(filepath.Join(crio, "etc/crio/crio.conf.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(crio, "etc/crio/crio.conf.d/00-default"), []byte(openshiftDropin), 0o644); err != nil {
		t.Fatal(err)
	}
	const read = "/etc/containers/oci/hooks.d"
	for _, tc := range []struct {
		name, root, dir, runtime string
		noCheck, checkOnly       bool
		install                  bool
		note, err                string
	}{
		{"no CRI-O, auto", empty, read, "auto", false, false, false, "nothing installed", ""},
		{"no CRI-O, auto, check only", empty, read, "auto", false, true, false, "hooks directory not checked; --runtime crio", ""},
		{"no CRI-O, none", empty, read, "none", false, true, false, "not checked (--runtime none)", ""},
		{"CRI-O reads it", crio, read, "auto", false, false, true, "CRI-O reads " + read, ""},
		{"CRI-O does not read it", crio, "/elsewhere", "auto", false, false, false, "", "/elsewhere"},
		{"no check", crio, "/elsewhere", "crio", true, false, true, "", ""},
	} {
		install, note, err := Decide(context.Background(), tc.root, tc.dir, tc.runtime, tc.noCheck, tc.checkOnly)
		if install != tc.install || (tc.note == "") != (note == "") || !strings.Contains(note, tc.note) ||
			(tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: install %t, note %q, error %v; want %t, %q, %q", tc.name, install, note, err, tc.install, tc.note, tc.err)
		}
	}
}

// TestLoad: the binary and the JSON are read, the JSON's path rewritten;
// --no-json leaves the JSON out; a missing file names what it was.
func TestLoad(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "hook")
	if err := os.WriteFile(bin, []byte("binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	json := []byte(`{"version":"1.0.0","hook":{"path":"/usr/local/bin/iptables-alerter-hook"},"when":{"always":true},"stages":["poststart"]}`)
	f := Files{BinDir: "/opt/bin", BinaryName: "iptables-alerter-hook"}
	if err := f.Load(bin, "", json, false); err != nil || string(f.Binary) != "binary" || !strings.Contains(string(f.JSON), "/opt/bin/iptables-alerter-hook") {
		t.Errorf("Load: %v, binary %q, JSON %q", err, f.Binary, f.JSON)
	}
	f = Files{BinDir: "/opt/bin"}
	if err := f.Load(bin, "", json, true); err != nil || f.JSON != nil {
		t.Errorf("Load, no JSON: %v, JSON %q", err, f.JSON)
	}
	if err := f.Load(filepath.Join(dir, "gone"), "", json, false); err == nil || !strings.Contains(err.Error(), "read hook binary") {
		t.Errorf("Load, no binary: %v", err)
	}
	if err := f.Load(bin, filepath.Join(dir, "gone.json"), json, false); err == nil || !strings.Contains(err.Error(), "read hooks.d JSON") {
		t.Errorf("Load, no JSON file: %v", err)
	}
	// One CRI-O would refuse at its next start, which no container on the
	// node would outlive: refused here (tests/e2e holds podman, which
	// reads hooks.d with CRI-O's library, to the same verdicts).
	for name, bad := range hooksdtest.Bad {
		path := filepath.Join(dir, "bad.json")
		if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := f.Load(bin, path, json, false); err == nil || !strings.Contains(err.Error(), "CRI-O would not start with it") {
			t.Errorf("Load, %s: %v", name, err)
		}
	}
	for name, good := range hooksdtest.Good {
		path := filepath.Join(dir, "good.json")
		if err := os.WriteFile(path, []byte(good), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := f.Load(bin, path, json, false); err != nil {
			t.Errorf("Load, %s: %v", name, err)
		}
	}
}
