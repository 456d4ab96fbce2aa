//go:build !hookonly && !agentonly

package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/lib/follow"
)

// TestTextfileCheckpointDirHeld: a one-shot run beside a collector that
// holds the same checkpoint directory (the timer's unit and the daemon
// both installed) waits, says why, and gives up (lockWait) instead of
// saving over the other's checkpoint; once the directory is free it runs.
func TestTextfileCheckpointDirHeld(t *testing.T) {
	fp, state, text := textfileDirs(t)
	appendFinding(t, fp, "team-a", "web-1", "u1", 3)
	held, err := follow.LockDir(context.Background(), state, 0o700, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func(w time.Duration) { lockWait = w }(lockWait)
	lockWait = 1500 * time.Millisecond
	args := []string{"textfile", "--once", "--findings", fp, "--checkpoint-dir", state, "--textfile-dir", text}
	code, _, stderr := runCmd(t, args...)
	if code != 1 || !strings.Contains(stderr, "another consumer holds the checkpoint directory") || !strings.Contains(stderr, "held by another consumer") {
		t.Fatalf("run beside a holder: exit %d, want 1 saying why:\n%s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(text, "iptables_alerter.prom")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("textfile written while the directory was held: %v", err)
	}
	held.Close()
	if code, _, stderr := runCmd(t, args...); code != 0 {
		t.Fatalf("run once free: exit %d:\n%s", code, stderr)
	}
}
