package kubetest

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// DialIn connects to addr from inside the network namespace at path: the
// socket is created on a thread switched into it, so it belongs to that
// namespace for its whole life, while the test process stays in its own.
func DialIn(ctx context.Context, path, network, addr string) (net.Conn, error) {
	target, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open netns: %w", err)
	}
	defer target.Close()
	runtime.LockOSThread()
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("open own netns: %w", err)
	}
	defer self.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("enter netns: %w", err)
	}
	conn, dialErr := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread stays locked, so it exits with this goroutine
		// instead of running others in the wrong namespace.
		return conn, dialErr
	}
	runtime.UnlockOSThread()
	return conn, dialErr
}
