package follow

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iptables-alerter/iptables-alerter/internal/fileio"
)

// lockName is the lock file in a consumer's checkpoint directory.
const lockName = ".consumer.lock"

// LockRetry is how often LockDir tries again while the lock is held.
const LockRetry = time.Second

// LockDir holds dir's consumer lock (an flock on a file in it, created
// 0600; a link or anything but a regular file there is refused) until the
// returned file is closed; it creates dir (perm) if needed, without
// changing an existing one. Two consumers keeping their checkpoints
// in one directory (the same consumer installed twice on a node, or a
// one-shot run beside the daemon) would each save over the other's
// checkpoint: lines handed over twice, or skipped. The second waits: busy
// is called at the first refusal and once a minute after, until the lock
// is free or ctx ends (its error then).
func LockDir(ctx context.Context, dir string, perm os.FileMode, busy func()) (*os.File, error) {
	if err := os.MkdirAll(dir, perm); err != nil {
		return nil, fmt.Errorf("create checkpoint directory %q: %w", dir, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock checkpoint directory %q: %w", dir, err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("lock checkpoint directory %q: %s is not a regular file (%v)", dir, lockName, err)
	}
	var said time.Time
	err = fileio.Flock(ctx, f, LockRetry, func() {
		if busy != nil && time.Since(said) >= time.Minute {
			busy()
			said = time.Now()
		}
	})
	switch {
	case err == nil:
		return f, nil
	case ctx.Err() != nil:
		err = fmt.Errorf("held by another consumer: %w", err)
	}
	f.Close()
	return nil, fmt.Errorf("lock checkpoint directory %q: %w", dir, err)
}
