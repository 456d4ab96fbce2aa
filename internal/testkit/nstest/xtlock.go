package nstest

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// The x_tables mutex is host-wide, and go test ./... runs packages in
// parallel: while one package's HoldXTMutex holds it, a legacy look by
// another package's test is busy for real, and that test gets a truncated
// "legacy x_tables busy" finding it did not ask for. So every namespace New
// makes holds a host-wide lock shared until its test ends, and HoldXTMutex
// holds it exclusive: a holder waits for the namespaces of other test
// processes to go, and they wait for it. One descriptor per process, so a
// holder's own namespaces do not wait for it.
var xtLock struct {
	mu        sync.Mutex
	fd        int // -1 when the lock file cannot be opened
	opened    bool
	shared    int // namespaces of this process alive
	exclusive bool
}

// xtLockPath is one per host: the same name in every test process.
var xtLockPath = filepath.Join(os.TempDir(), "iptables-alerter-test-xtables.lock")

func xtLockFd() int {
	if !xtLock.opened {
		xtLock.opened = true
		fd, err := unix.Open(xtLockPath, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			fd = -1 // not root: no test here touches the kernel anyway
		}
		xtLock.fd = fd
	}
	return xtLock.fd
}

func flock(fd, how int) {
	for fd >= 0 && unix.Flock(fd, how) == unix.EINTR {
	}
}

// KeepXTMutexFree keeps other test processes' HoldXTMutex out until t
// ends, for a test whose legacy looks must not be busy that inspects
// namespaces New did not make (a container runtime's pods).
func KeepXTMutexFree(t testing.TB) { xtShare(t) }

// xtShare holds the lock shared until t ends.
func xtShare(t testing.TB) {
	xtLock.mu.Lock()
	defer xtLock.mu.Unlock()
	if xtLock.shared == 0 && !xtLock.exclusive {
		flock(xtLockFd(), unix.LOCK_SH)
	}
	xtLock.shared++
	t.Cleanup(func() {
		xtLock.mu.Lock()
		defer xtLock.mu.Unlock()
		xtLock.shared--
		if xtLock.shared == 0 && !xtLock.exclusive {
			flock(xtLockFd(), unix.LOCK_UN)
		}
	})
}

// xtExclusive holds the lock exclusive until release is called.
func xtExclusive() (release func()) {
	xtLock.mu.Lock()
	defer xtLock.mu.Unlock()
	flock(xtLockFd(), unix.LOCK_EX)
	xtLock.exclusive = true
	return func() {
		xtLock.mu.Lock()
		defer xtLock.mu.Unlock()
		xtLock.exclusive = false
		if xtLock.shared > 0 {
			flock(xtLockFd(), unix.LOCK_SH)
		} else {
			flock(xtLockFd(), unix.LOCK_UN)
		}
	}
}
