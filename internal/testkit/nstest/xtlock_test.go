package nstest

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Another test process, as go test ./... runs them side by side, is a
// second open of the lock file: while a namespace of this one lives, its
// HoldXTMutex must wait, and its namespaces must not.
func TestNamespaceKeepsOtherProcessesHolderOut(t *testing.T) {
	NeedRoot(t)
	other, err := unix.Open(xtLockPath, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(other)
	t.Run("namespace alive", func(t *testing.T) {
		New(t)
		if err := unix.Flock(other, unix.LOCK_EX|unix.LOCK_NB); !errors.Is(err, unix.EWOULDBLOCK) {
			t.Errorf("another process could hold the x_tables mutex while a namespace lives: flock %v", err)
		}
		if err := unix.Flock(other, unix.LOCK_SH|unix.LOCK_NB); err != nil {
			t.Errorf("another process's namespace waits for this one: flock %v", err)
		}
		unix.Flock(other, unix.LOCK_UN)
	})
	// Other test processes may hold it now: look for this one's lock.
	var st unix.Stat_t
	if err := unix.Fstat(other, &st); err != nil {
		t.Fatal(err)
	}
	locks, err := os.ReadFile("/proc/locks")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(locks), "\n") {
		f := strings.Fields(l)
		if len(f) > 5 && f[1] == "FLOCK" && f[4] == strconv.Itoa(os.Getpid()) && strings.HasSuffix(f[5], ":"+strconv.FormatUint(st.Ino, 10)) {
			t.Errorf("the lock outlived the test's namespace: %s", l)
		}
	}
}
