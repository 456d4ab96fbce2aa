package netns

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// ErrNotExist means the namespace is gone (the pod stopped, the pid exited).
// Callers treat it as benign: there is nothing left to inspect.
var ErrNotExist = errors.New("network namespace does not exist")

// ErrNotNetns means the path exists but is not a network namespace.
var ErrNotNetns = errors.New("not a network namespace")

// Handle is an open network namespace.
type Handle struct {
	Path string
	f    *os.File
}

// Open opens the namespace at path and checks that it really is one, so a
// hostile config.json cannot point the hook at an arbitrary file.
func Open(path string) (*Handle, error) {
	// O_NONBLOCK: a FIFO planted at the path must not hang the hook.
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) {
			return nil, fmt.Errorf("open netns %q: %w", path, ErrNotExist)
		}
		return nil, fmt.Errorf("open netns %q: %w", path, err)
	}
	h, err := FromFile(f, path)
	if err != nil {
		f.Close()
		return nil, err
	}
	return h, nil
}

// FromFile checks that f, opened at path, is a network namespace and wraps
// it; a probe process uses it for the fd it inherited. The Handle owns f.
func FromFile(f *os.File, path string) (*Handle, error) {
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("stat netns %q: %w", path, err)
	}
	if st.Type != unix.NSFS_MAGIC && st.Type != unix.PROC_SUPER_MAGIC {
		return nil, fmt.Errorf("open netns %q: %w", path, ErrNotNetns)
	}
	// NS_GET_NSTYPE tells a net namespace from a mount or pid namespace file.
	t, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_NSTYPE)
	if err != nil || t != unix.CLONE_NEWNET {
		return nil, fmt.Errorf("open netns %q: %w", path, ErrNotNetns)
	}
	return &Handle{Path: path, f: f}, nil
}

// Fd is the namespace fd, valid until Close.
func (h *Handle) Fd() int { return int(h.f.Fd()) }

// Close releases the fd.
func (h *Handle) Close() error { return h.f.Close() }

// Do runs fn inside the namespace on a locked OS thread. Go may move
// goroutines between threads at any time, so the switch is only safe with
// the thread locked for the whole call.
func (h *Handle) Do(fn func() error) error {
	errc := make(chan error, 1)
	// A fresh goroutine keeps the caller's own thread untouched.
	go func() {
		runtime.LockOSThread()
		orig, err := vnetns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("get current netns: %w", err)
			return
		}
		defer orig.Close()
		if err := vnetns.Set(vnetns.NsHandle(h.Fd())); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter netns %q: %w", h.Path, err)
			return
		}
		ferr := call(fn, h.Path)
		if err := vnetns.Set(orig); err != nil {
			// Leave the thread locked: the runtime then ends it with the
			// goroutine instead of reusing a thread stuck in the pod's netns.
			errc <- fmt.Errorf("leave netns %q: %w", h.Path, err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// ErrPanic marks a panic inside a Do callback, returned as an error.
var ErrPanic = errors.New("panic")

// call runs fn, turning a panic into an error: fn runs on Do's own
// goroutine, which no caller's recover reaches, and a panic there would end
// the process (for the hook: exit 2, which kills the container).
func call(fn func() error, path string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("inside netns %q: %w: %v", path, ErrPanic, r)
		}
	}()
	return fn()
}

// ID identifies the namespace as "dev:inode", unique among live namespaces.
func (h *Handle) ID() (string, error) {
	var st unix.Stat_t
	if err := unix.Fstat(h.Fd(), &st); err != nil {
		return "", fmt.Errorf("stat netns %q: %w", h.Path, err)
	}
	return fmt.Sprintf("%d:%d", st.Dev, st.Ino), nil
}
