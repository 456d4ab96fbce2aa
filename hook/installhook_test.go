//go:build !hookonly

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	hooksd "github.com/iptables-alerter/iptables-alerter/hooks.d"
	"github.com/iptables-alerter/iptables-alerter/lib/hookinstall"
)

// TestInstallHookBuiltinJSON: without --json, install-hook writes the
// hooks.d JSON built into it, so a node install needs no copy of the file;
// a bad --runtime is one line naming the allowed values.
func TestInstallHookBuiltinJSON(t *testing.T) {
	root := t.TempDir()
	binary := filepath.Join(t.TempDir(), "iptables-alerter-hook")
	if err := os.WriteFile(binary, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	code, _, errs := runCmd(t, "install-hook", "--root", root, "--bin-dir", "/opt/ipta/bin", "--hooks-dir", "/etc/containers/oci/hooks.d",
		"--runtime", "crio", "--no-check", "--binary", binary)
	if code != 0 {
		t.Fatalf("install-hook: exit %d\n%s", code, errs)
	}
	got, err := os.ReadFile(filepath.Join(root, "etc/containers/oci/hooks.d/iptables-alerter.json"))
	if err != nil || !bytes.Equal(got, hookinstall.BinaryPath(hooksd.JSON, "/opt/ipta/bin")) || !bytes.Contains(got, []byte("/opt/ipta/bin/iptables-alerter-hook")) {
		t.Errorf("installed JSON (%v):\n%s", err, got)
	}
	code, _, errs = runCmd(t, "install-hook", "--runtime", "docker")
	if code != 2 || !strings.Contains(errs, `invalid argument "docker" for "--runtime" flag: want auto, crio, none`) {
		t.Errorf("bad --runtime: exit %d, stderr %q", code, errs)
	}
}
