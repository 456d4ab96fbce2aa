package nstest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/procstat"
)

// TestSweepLeftovers: the namespaces and processes of a test binary that
// died are deleted and killed by the next binary's sweep, and its lock
// file with them; those of a binary still alive (its lock held by a
// flock(1) standing in for it) are left. Other test binaries sweep meanwhile too: the stand-ins
// are made as a binary makes its own (the live one's lock held before its
// namespace exists), and the dead one's leftovers may be gone by another
// sweep.
func TestSweepLeftovers(t *testing.T) {
	NeedRoot(t, "flock")
	if _, err := ownerTag(); err != nil {
		t.Fatal(err)
	}
	tag := func() string {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		return hex.EncodeToString(b)
	}
	dead, alive := tag(), tag()
	deadNS := []string{"iptalert-" + dead + "-00000001", "iptalert-" + dead + "-00000002"}
	aliveNS := "iptalert-" + alive + "-00000003"
	deadLock, aliveLock := filepath.Join(ownerDir, dead), filepath.Join(ownerDir, alive)
	t.Cleanup(func() { _ = os.Remove(deadLock); _ = os.Remove(aliveLock) })
	addNS := func(n string) {
		if out, err := exec.Command("ip", "netns", "add", n).CombinedOutput(); err != nil {
			t.Fatalf("ip netns add %s: %v: %s", n, err, out)
		}
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", n).Run() })
	}

	// The live stand-in: locked under a name no sweep takes, renamed, and
	// only then its namespace.
	newLock := filepath.Join(ownerDir, ".new-"+alive)
	if err := os.WriteFile(newLock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	holder := exec.Command("flock", "--shared", newLock, "sleep", "60")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	// flock(1) takes the lock after its start: wait until an exclusive
	// try fails, as a sweep's would.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if exec.Command("flock", "--exclusive", "--nonblock", newLock, "true").Run() != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("flock(1) never took its lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := os.Rename(newLock, aliveLock); err != nil {
		t.Fatal(err)
	}
	addNS(aliveNS)
	// The dead one: its lock file unlocked, as a dead binary's is.
	if err := os.WriteFile(deadLock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, n := range deadNS {
		addNS(n)
	}

	// Their processes: a daemon marked with its owner's tag, and under
	// the dead one's a child that is not (a shim's container).
	daemon := func(tag string) (*exec.Cmd, int) {
		cmd := exec.Command("sh", "-c", "env -u "+OwnerEnv+" sleep 60 & echo $!; exec sleep 60")
		cmd.Env = append(os.Environ(), OwnerEnv+"="+tag)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		var child int
		if _, err := fmt.Fscan(out, &child); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
		return cmd, child
	}
	deadDaemon, deadChild := daemon(dead)
	aliveDaemon, _ := daemon(alive)
	exited := make(chan error, 1)
	go func() { exited <- deadDaemon.Wait() }()

	sweepLeftovers()

	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Error("the dead owner's daemon still runs")
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		// Killed, reaped by init (or this test's subreaper): gone, or a
		// zombie.
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", deadChild))
		if err != nil || procstat.Of(st).Field(3) == "Z" {
			break
		}
		if time.Now().After(deadline) {
			t.Error("the dead owner's daemon's child still runs")
			break
		}
	}
	if err := aliveDaemon.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the live owner's daemon: %v", err)
	}

	// Another binary's sweep may hold the dead one's lock as this one
	// looks: it deletes what this one skipped, shortly.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		left := 0
		for _, p := range append([]string{deadLock}, deadNS...) {
			if !strings.HasPrefix(p, "/") {
				p = filepath.Join("/run/netns", p)
			}
			if _, err := os.Stat(p); err == nil {
				left++
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the dead owner's namespaces and lock file still there", left)
		}
	}
	if _, err := os.Stat(filepath.Join("/run/netns", aliveNS)); err != nil {
		t.Errorf("%s of a live owner: %v", aliveNS, err)
	}
	if _, err := os.Stat(aliveLock); err != nil {
		t.Errorf("the live owner's lock file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(ownerDir, owner.tag)); err != nil {
		t.Errorf("this binary's own lock file: %v", err)
	}
}

func TestOwnerOf(t *testing.T) {
	for name, want := range map[string]string{
		"iptalert-0a1b2c3d-00ff00ff":  "0a1b2c3d",
		"iptalert-0a1b2c3d":           "",
		"iptalert-demo-dirty-123":     "",
		"iptalert-bench-pod1-123":     "",
		"iptalert-0A1B2C3D-00ff00ff":  "",
		"iptalert-0a1b2c3d-00ff00ff0": "",
		"ipta-containerd-0a1b2c3d":    "",
	} {
		tag, ok := ownerOf(name)
		if !ok {
			tag = ""
		}
		if tag != want {
			t.Errorf("%s: owner %q, want %q", name, tag, want)
		}
	}
}
