package nstest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// RunHeld runs cmd, an iptables-legacy command given -w (directly or through
// a wrapper that execs it), held on an xtables lock of the test's own
// (XTABLES_LOCKFILE; the tool takes it before it opens its table) until
// seen(pid) says a watcher has read the process, and returns cmd's Wait
// error. A one-shot run can otherwise end before its /proc is read on a
// loaded machine, which an exec watch rightly counts as a miss and records
// nothing of. The lock is the test's own, so no other process waits on it.
func RunHeld(t testing.TB, cmd *exec.Cmd, seen func(pid int) bool) error {
	t.Helper()
	lock, err := os.Create(filepath.Join(t.TempDir(), "xtables.lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	release := func() { _ = unix.Flock(int(lock.Fd()), unix.LOCK_UN) }
	cmd.Env = append(cmd.Environ(), "XTABLES_LOCKFILE="+lock.Name())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(time.Minute); !seen(cmd.Process.Pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			release()
			_ = cmd.Wait()
			t.Fatalf("%s was not read in a minute", cmd)
		}
	}
	release()
	return cmd.Wait()
}
