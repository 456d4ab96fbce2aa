package findings

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

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
