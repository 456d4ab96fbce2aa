//go:build !hookonly && !agentonly

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// TestInstallHookWaitHoldsOnError: with --wait (the DaemonSet's sidecar)
// an error is reported at once but the process stays up for failHold
// before it exits 1. An installer that exits at once is never seen running
// by the kubelet, which then never starts the pod's agent and forwarder:
// a hooks directory CRI-O does not read took them off the node too.
// Without --wait the exit is immediate.
func TestInstallHookWaitHoldsOnError(t *testing.T) {
	old := failHold
	failHold = 400 * time.Millisecond
	t.Cleanup(func() { failHold = old })
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc/crio/crio.conf.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	conf := "[crio.runtime]\nhooks_dir = [\"/usr/share/containers/oci/hooks.d\"]\n"
	if err := os.WriteFile(filepath.Join(root, "etc/crio/crio.conf.d/10-crio.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"install-hook", "--root", root, "--hooks-dir", "/etc/containers/oci/hooks.d"}
	for _, wait := range []bool{false, true} {
		a := args
		if wait {
			a = append(a[:len(a):len(a)], "--wait")
		}
		start := time.Now()
		code, _, errs := runCmd(t, a...)
		took := time.Since(start)
		if code != 1 || !strings.Contains(errs, "CRI-O does not read this hooks directory") {
			t.Errorf("wait=%v: exit %d, stderr %q", wait, code, errs)
		}
		if wait && took < failHold {
			t.Errorf("--wait: exited %v after the error, before failHold (%v): a sidecar that exits at once keeps the pod's other containers from starting", took, failHold)
		}
		if !wait && took >= failHold {
			t.Errorf("without --wait: exited after %v, want at once", took)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "etc/containers/oci/hooks.d/iptables-alerter.json")); !os.IsNotExist(err) {
		t.Errorf("refused hooks directory got the JSON: %v", err)
	}
}
