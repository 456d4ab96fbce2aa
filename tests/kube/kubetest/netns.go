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
	var conn net.Conn
	err := inNetns(path, func() (err error) {
		conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}

// ListenIn listens on addr inside the network namespace at path, as
// DialIn dials: a server of the test process (a registry) then answers
// what runs in that namespace (containerd) on its loopback.
func ListenIn(path, network, addr string) (net.Listener, error) {
	var l net.Listener
	err := inNetns(path, func() (err error) {
		l, err = net.Listen(network, addr)
		return err
	})
	return l, err
}

// inNetns runs fn on a thread switched into the network namespace at
// path, and switches it back.
func inNetns(path string, fn func() error) error {
	target, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open netns: %w", err)
	}
	defer target.Close()
	runtime.LockOSThread()
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open own netns: %w", err)
	}
	defer self.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter netns: %w", err)
	}
	fnErr := fn()
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread stays locked, so it exits with this goroutine
		// instead of running others in the wrong namespace.
		return fnErr
	}
	runtime.UnlockOSThread()
	return fnErr
}
