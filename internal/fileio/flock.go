package fileio

import (
	"context"
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Flock takes an exclusive flock on f, trying again every retry while
// another open file holds it, so the caller's deadline holds: ctx's error
// when it ends first. refused, if set, is called at each refusal.
// The descriptor's blocking mode is left as it is (no Fd).
func Flock(ctx context.Context, f *os.File, retry time.Duration, refused func()) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	for {
		var lerr error
		if err := rc.Control(func(fd uintptr) { lerr = unix.Flock(int(fd), unix.LOCK_EX|unix.LOCK_NB) }); err != nil {
			return err
		}
		if lerr == nil {
			return nil
		}
		if !errors.Is(lerr, unix.EWOULDBLOCK) && !errors.Is(lerr, unix.EINTR) {
			return lerr
		}
		if refused != nil {
			refused()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(retry):
		}
	}
}
