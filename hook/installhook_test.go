//go:build !hookonly && !agentonly

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	hooksd "github.com/iptables-alerter/iptables-alerter/hooks.d"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
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

// TestInstallHookWaitTermWhileInstalling: a SIGTERM that comes while
// install-hook --wait is still installing (here while it reads the hook
// binary from a pipe the test holds) is not lost and does not kill it
// halfway: the install ends, the uninstall follows, exit 0, and the node
// keeps neither file. A pod deleted while its sidecar installs must not
// leave the hook behind.
func TestInstallHookWaitTermWhileInstalling(t *testing.T) {
	root := t.TempDir()
	fifo := filepath.Join(t.TempDir(), "iptables-alerter-hook")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "install-hook", "--root", root, "--bin-dir", "/opt/ipta/bin", "--hooks-dir", "/etc/containers/oci/hooks.d",
		"--runtime", "crio", "--no-check", "--binary", fifo, "--wait")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	// A pipe opens for writing only once a reader has it: install-hook
	// is then reading the binary, its signal handler set long before.
	var w *os.File
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		fd, err := unix.Open(fifo, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err == nil {
			w = os.NewFile(uintptr(fd), fifo)
			break
		}
		if err != unix.ENXIO || time.Now().After(deadline) {
			t.Fatalf("open the pipe for writing: %v; install-hook stderr:\n%s", err, errb.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("#!/bin/sh\nexit 0\n")); err != nil {
		t.Fatal(err)
	}
	w.Close()
	select {
	case err := <-done:
		done <- err
		if err != nil {
			t.Fatalf("install-hook --wait, SIGTERM while installing: %v (want exit 0: installed, then uninstalled)\n%s", err, errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("install-hook --wait still running 30 s after a SIGTERM that came while it installed\n%s", errb.String())
	}
	if s := errb.String(); !strings.Contains(s, "install-hook: installed") || !strings.Contains(s, "uninstall-hook: removed") {
		t.Errorf("stderr %q, want the install then the uninstall", s)
	}
	for _, p := range []string{"opt/ipta/bin/iptables-alerter-hook", "etc/containers/oci/hooks.d/iptables-alerter.json"} {
		if _, err := os.Lstat(filepath.Join(root, p)); !os.IsNotExist(err) {
			t.Errorf("%s left on the node: %v", p, err)
		}
	}
}

// TestInstallHookWaitLeavesMachineConfigFiles: the sidecar on a node of
// the OpenShift MachineConfig route (its /etc/iptables-alerter/install.env
// there, the JSON and binary of another version already in place) writes
// neither, and at SIGTERM leaves both: they are the MachineConfig's. A
// switch from the sidecar route to the MachineConfig one stopped the
// sidecars after the MachineConfig had rolled out, and each took the hook
// off its node until the next reboot; a sidecar of another version wrote
// its JSON over the MachineConfig's, drift the Machine Config Operator
// marks the node degraded for.
func TestInstallHookWaitLeavesMachineConfigFiles(t *testing.T) {
	root := t.TempDir()
	binary := filepath.Join(t.TempDir(), "iptables-alerter-hook")
	if err := os.WriteFile(binary, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Another version's: the sidecar's would differ.
	mcJSON := append(hookinstall.BinaryPath(hooksd.JSON, "/usr/local/bin"), '\n')
	mcBinary := []byte("#!/bin/sh\n# the MachineConfig route's\nexit 0\n")
	mc := map[string][]byte{
		"etc/iptables-alerter/install.env":                 []byte("IPTABLES_ALERTER_IMAGE=ghcr.io/iptables-alerter/iptables-alerter@sha256:0\n"),
		"etc/containers/oci/hooks.d/iptables-alerter.json": mcJSON,
		"usr/local/bin/iptables-alerter-hook":              mcBinary,
	}
	for p, data := range mc {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "install-hook", "--root", root, "--bin-dir", "/usr/local/bin", "--hooks-dir", "/etc/containers/oci/hooks.d",
		"--runtime", "crio", "--no-check", "--binary", binary, "--wait")
	// Read while the process writes it.
	var errb nstest.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(errb.String(), "install-hook: left"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("install-hook --wait did not say in 30 s that it left the files:\n%s", errb.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		done <- err
		if err != nil {
			t.Fatalf("install-hook --wait, SIGTERM: %v\n%s", err, errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("install-hook --wait still running 30 s after SIGTERM\n%s", errb.String())
	}
	if s := errb.String(); strings.Contains(s, "installed") || strings.Contains(s, "uninstall-hook") {
		t.Errorf("stderr %q, want neither an install nor an uninstall", s)
	}
	for p, want := range mc {
		if got, err := os.ReadFile(filepath.Join(root, p)); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %v, changed: want the MachineConfig's left as it was", p, err)
		}
	}
	if strings.Contains(errb.String(), "missing") {
		t.Errorf("stderr %q: a warning of missing files, with both there", errb.String())
	}
	// The MachineConfig's unit has not put the binary in place (its image
	// not pulled): still nothing written, and said.
	if err := os.Remove(filepath.Join(root, "usr/local/bin/iptables-alerter-hook")); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "install-hook", "--root", root, "--bin-dir", "/usr/local/bin", "--hooks-dir", "/etc/containers/oci/hooks.d",
		"--runtime", "crio", "--no-check", "--binary", binary).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "warning: /usr/local/bin/iptables-alerter-hook missing") {
		t.Errorf("install-hook with the MachineConfig's binary missing: %v, %q; want exit 0 and a warning naming it", err, out)
	}
	if _, err := os.Lstat(filepath.Join(root, "usr/local/bin/iptables-alerter-hook")); !os.IsNotExist(err) {
		t.Errorf("install-hook wrote the binary on a node the MachineConfig owns: %v", err)
	}
}

// TestInstallHookWarnsOwnerUnseen: a container given the node's hooks
// directories but not its /etc/iptables-alerter cannot tell a node of the
// MachineConfig route: it installs, and says so.
func TestInstallHookWarnsOwnerUnseen(t *testing.T) {
	root := t.TempDir()
	binary := filepath.Join(t.TempDir(), "iptables-alerter-hook")
	if err := os.WriteFile(binary, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"install-hook", "--root", root, "--bin-dir", "/usr/local/bin", "--hooks-dir", "/etc/containers/oci/hooks.d",
		"--runtime", "crio", "--no-check", "--binary", binary}
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "warning: /etc/iptables-alerter/install.env's directory is not under "+root) {
		t.Errorf("install-hook without the owner file's directory: %v, %q; want exit 0 and a warning", err, out)
	}
	if err := os.MkdirAll(filepath.Join(root, "etc/iptables-alerter"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil || strings.Contains(string(out), "warning") {
		t.Errorf("install-hook with the owner file's directory: %v, %q; want no warning", err, out)
	}
}
