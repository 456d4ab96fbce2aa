// Package inotifytest records what happens to the files of some
// directories, in order, for tests that check the order of renames and
// removals (an installer's, say) as another process performs them.
package inotifytest

import (
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Watch watches dirs with one inotify instance, so the events of all of
// them come in the order they happened.
type Watch struct {
	fd    int
	names map[int32]string
}

// New starts watching dirs; the watch ends with the test.
func New(t testing.TB, dirs ...string) *Watch {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatalf("inotify init: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	w := &Watch{fd: fd, names: map[int32]string{}}
	for _, d := range dirs {
		wd, err := unix.InotifyAddWatch(fd, d, unix.IN_CREATE|unix.IN_MODIFY|unix.IN_MOVED_TO|unix.IN_DELETE|unix.IN_CLOSE_WRITE)
		if err != nil {
			t.Fatalf("inotify watch %q: %v", d, err)
		}
		w.names[int32(wd)] = filepath.Base(d)
	}
	return w
}

var ops = map[uint32]string{unix.IN_CREATE: "create", unix.IN_MODIFY: "modify", unix.IN_MOVED_TO: "moved_to", unix.IN_DELETE: "delete", unix.IN_CLOSE_WRITE: "close_write"}

// Read gives the events so far as "DIR OP NAME" (DIR the base name of the
// watched directory), e.g. "bin moved_to iptables-alerter-hook".
func (w *Watch) Read() []string {
	var out []string
	buf := make([]byte, 1<<16)
	for {
		n, err := unix.Read(w.fd, buf)
		if n <= 0 || err != nil {
			return out
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
			out = append(out, w.names[ev.Wd]+" "+ops[ev.Mask&^unix.IN_ISDIR]+" "+name)
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
}

// On keeps the events about the named files only.
func On(events []string, names ...string) []string {
	var out []string
	for _, ev := range events {
		for _, n := range names {
			if strings.HasSuffix(ev, " "+n) {
				out = append(out, ev)
			}
		}
	}
	return out
}
