package nstest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestSweepLeftovers: the namespaces of a test binary that died are
// deleted by the next binary's sweep, and its lock file with them; those
// of a binary still alive (its lock held by a flock(1) standing in for
// it) are left.
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
	for _, n := range append(deadNS, aliveNS) {
		if out, err := exec.Command("ip", "netns", "add", n).CombinedOutput(); err != nil {
			t.Fatalf("ip netns add %s: %v: %s", n, err, out)
		}
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", n).Run() })
	}
	deadLock, aliveLock := filepath.Join(ownerDir, dead), filepath.Join(ownerDir, alive)
	for _, p := range []string{deadLock, aliveLock} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Remove(p) })
	}
	holder := exec.Command("flock", "--shared", aliveLock, "sleep", "60")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	// flock(1) takes the lock after its start: wait until an exclusive
	// try fails, as the sweep's would.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if exec.Command("flock", "--exclusive", "--nonblock", aliveLock, "true").Run() != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("flock(1) never took its lock")
		}
		time.Sleep(10 * time.Millisecond)
	}

	sweepLeftovers()

	for _, n := range deadNS {
		if _, err := os.Stat(filepath.Join("/run/netns", n)); err == nil {
			t.Errorf("%s of a dead owner is still there", n)
		}
	}
	if _, err := os.Stat(deadLock); err == nil {
		t.Error("the dead owner's lock file is still there")
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
