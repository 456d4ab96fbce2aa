package child

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/netns"
)

// TestPeek: the forked child reads in the namespace it was given (a new
// netns has only lo), tells a missing file, a too long one and an
// unreadable one apart, holds none of its parent's files (a pipe of the
// parent's is not among its fds) and is reaped.
func TestPeek(t *testing.T) {
	ns := nstest.New(t)
	h, err := netns.Open(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	dir := t.TempDir()
	long := filepath.Join(dir, "long")
	if err := os.WriteFile(long, []byte(strings.Repeat("x", PeekMax+1)), 0o644); err != nil {
		t.Fatal(err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	paths := []string{
		"/proc/thread-self/net/dev",
		filepath.Join(dir, "missing"),
		long,
		dir, // a directory: read fails with EISDIR
		fmt.Sprintf("/proc/self/fdinfo/%d", pw.Fd()),
	}
	p, err := StartPeek(h, time.Now().Add(10*time.Second), paths)
	if err != nil {
		t.Fatal(err)
	}
	files, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(paths) {
		t.Fatalf("%d files for %d paths", len(files), len(paths))
	}
	if f := files[0]; f.Err != nil || !strings.Contains(string(f.Data), "lo:") || strings.Count(string(f.Data), ":") != 1 {
		t.Errorf("net/dev in the new netns: err=%v\n%s", f.Err, f.Data)
	}
	if !errors.Is(files[1].Err, os.ErrNotExist) {
		t.Errorf("missing file: %v, want not exist", files[1].Err)
	}
	if files[2].Err == nil || files[2].Data != nil {
		t.Errorf("file over PeekMax: err=%v, %d bytes, want an error", files[2].Err, len(files[2].Data))
	}
	if !errors.Is(files[3].Err, syscall.EISDIR) {
		t.Errorf("directory: %v, want EISDIR", files[3].Err)
	}
	if !errors.Is(files[4].Err, os.ErrNotExist) {
		t.Errorf("the parent's pipe is open in the child: %v, %q", files[4].Err, files[4].Data)
	}
	if err := unix.Kill(p.pid, 0); !errors.Is(err, unix.ESRCH) {
		t.Errorf("answered child %d not reaped: kill 0 = %v", p.pid, err)
	}
}

// TestPeekAbandoned: a child blocked in the kernel (opening a FIFO nobody
// writes) ends Wait at the deadline, not later, and is not waited for.
func TestPeekAbandoned(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Second)
	p, err := StartPeek(open(t), deadline, []string{"/proc/self/status", fifo})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Wait()
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("Wait = %v, want the deadline", err)
	}
	// The FIFO's open blocks for good: the margin is a loaded machine's.
	if late := time.Since(deadline); late > 2*time.Second {
		t.Errorf("Wait ended %v after the deadline", late)
	}
	// Killed, it ends (a FIFO open is interruptible) and is reaped.
	for end := time.Now().Add(10 * time.Second); unix.Kill(p.pid, 0) == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("abandoned child %d still there 10 s after the deadline", p.pid)
		}
	}
}
