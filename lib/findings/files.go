package findings

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// openDir creates dir (0750) if needed and opens it without following a
// symlink in any component, so a planted link cannot redirect our writes.
func openDir(dir string) (int, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return -1, fmt.Errorf("create directory %q: %w", dir, err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return -1, fmt.Errorf("resolve directory %q: %w", dir, err)
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, abs, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS,
	})
	if err != nil {
		return -1, fmt.Errorf("open directory %q: %w", dir, err)
	}
	return fd, nil
}

// openFile opens name inside dirfd, never through a symlink and never
// blocking on a FIFO planted in its place; only regular files are accepted.
func openFile(dirfd int, name string, flags int) (*os.File, error) {
	fd, err := unix.Openat(dirfd, name, flags|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o640)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("%q is not a regular file", name)
	}
	return os.NewFile(uintptr(fd), name), nil
}

// lock takes an exclusive flock, polling so the caller's deadline holds even
// when another process keeps the lock.
func lock(ctx context.Context, f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("lock %q: %w", f.Name(), err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("lock %q: %w", f.Name(), ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}
