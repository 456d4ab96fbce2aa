package child

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/iptables-alerter/iptables-alerter/lib/netns"
)

// A peek reads a few small files in a network namespace in a child made by
// a bare fork of this process, not an exec: no new program, no Go runtime
// start, no package initialisers, so it costs a fraction of a probe's
// child (a fork of the hook's few MB of page tables). The forked copy of a
// Go process may run no Go code (another thread may have held a runtime
// lock at the fork, and its stack cannot grow), so the child is one
// nosplit function making raw system calls only, as the syscall package's
// own child between fork and exec. Like a probe's child it answers over a
// pipe that is its only open file: a read blocked in the kernel (the
// x_tables mutex) holds nobody but itself, and the caller gives up at the
// deadline.

// PeekMax bounds the bytes read of each file; a file longer than that is
// an error of its File.
const PeekMax = 4096

// Statuses of a peek's record: the child writes, for each path in turn,
// one status byte, the length of the data (two bytes, little-endian) and
// the data (the file's bytes, or the errno on peekFailed).
const (
	peekOK      = 'o'
	peekMissing = 'n'
	peekFailed  = 'e'
	peekLong    = 't'
)

// Exit statuses of a peek's child that failed before its first record.
const (
	peekExitSetns = 3
	peekExitFds   = 4
	peekExitWrite = 5
)

// File is what a peek read of one path.
type File struct {
	Data []byte
	// Err is nil, or wraps os.ErrNotExist for a missing file, or says why
	// the file could not be read whole.
	Err error
}

// Peek is a peek's child under way.
type Peek struct {
	pid   int
	r     *os.File
	paths []string
}

// StartPeek forks a child that enters h's network namespace and reads each
// of paths (at most PeekMax bytes each). Wait takes its answer by deadline.
func StartPeek(h *netns.Handle, deadline time.Time, paths []string) (*Peek, error) {
	cpaths := make([]*byte, len(paths))
	for i, p := range paths {
		b, err := unix.BytePtrFromString(p)
		if err != nil {
			return nil, fmt.Errorf("peek %q: %w", p, err)
		}
		cpaths[i] = b
	}
	buf := make([]byte, 3+PeekMax)
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("open pipe: %w", err)
	}
	// The signal mask forkPeek sets and restores is this thread's.
	runtime.LockOSThread()
	pid, errno := forkPeek(uintptr(h.Fd()), w.Fd(), cpaths, buf)
	runtime.UnlockOSThread()
	runtime.KeepAlive(cpaths)
	runtime.KeepAlive(buf)
	w.Close()
	if errno != 0 {
		r.Close()
		return nil, fmt.Errorf("fork: %w", errno)
	}
	p := &Peek{pid: int(pid), r: r, paths: paths}
	if err := r.SetReadDeadline(deadline); err != nil {
		p.end(false)
		return nil, err
	}
	return p, nil
}

// SetDeadline moves the deadline StartPeek was given (earlier: a caller
// that stops waiting sooner than it first meant to).
func (p *Peek) SetDeadline(t time.Time) error { return p.r.SetReadDeadline(t) }

// Wait reads the child's answer until the deadline StartPeek was given,
// never past it: an error then errors.Is os.ErrDeadlineExceeded, and the
// child is killed and reaped whenever the kernel lets it go. Without an
// error there is one File per path, in order.
func (p *Peek) Wait() ([]File, error) {
	data, err := io.ReadAll(io.LimitReader(p.r, int64(len(p.paths))*(3+PeekMax)+1))
	// EOF: the child exited, it is reaped at once.
	status := p.end(err == nil)
	if err != nil {
		return nil, fmt.Errorf("read peek: %w", err)
	}
	files := make([]File, 0, len(p.paths))
	for len(files) < len(p.paths) {
		n := -1
		if len(data) >= 3 {
			n = int(data[1]) | int(data[2])<<8
		}
		if n < 0 || len(data) < 3+n {
			return nil, fmt.Errorf("peek ended without an answer for %q (%s)", p.paths[len(files)], status)
		}
		st, b := data[0], data[3:3+n]
		data = data[3+n:]
		path := p.paths[len(files)]
		var f File
		switch {
		case st == peekOK:
			f.Data = b
		case st == peekMissing:
			f.Err = fmt.Errorf("peek %q: %w", path, os.ErrNotExist)
		case st == peekLong:
			f.Err = fmt.Errorf("peek %q: longer than %d bytes", path, PeekMax)
		case st == peekFailed && n == 2:
			f.Err = fmt.Errorf("peek %q: %w", path, syscall.Errno(int(b[0])|int(b[1])<<8))
		default:
			return nil, fmt.Errorf("peek %q: bad record %q", path, st)
		}
		files = append(files, f)
	}
	return files, nil
}

// end closes the pipe and kills the child. One that answered is reaped
// here, never left for the runtime (see Proc.End), and its exit status
// returned; one still blocked in the kernel is reaped whenever it ends.
func (p *Peek) end(answered bool) string {
	p.r.Close()
	unix.Kill(p.pid, unix.SIGKILL)
	reap := func() (st unix.WaitStatus) {
		for {
			_, err := unix.Wait4(p.pid, &st, 0, nil)
			if err != unix.EINTR {
				return st
			}
		}
	}
	if !answered {
		go reap()
		return ""
	}
	st := reap()
	switch {
	case st.Exited():
		return fmt.Sprintf("exit status %d", st.ExitStatus())
	case st.Signaled():
		return "signal: " + st.Signal().String()
	}
	return "ended"
}

// forkPeek forks; the child enters the namespace nsfd, keeps only w (as
// its fd 1), writes a record for each path and exits; the parent gets the
// child's pid. All signals are blocked across the fork so that no Go signal
// handler ever runs in the child (a fault there kills it; SIGKILL still
// ends it). Nothing here may allocate or grow the stack (nosplit, raw
// system calls, no escaping locals), nor be instrumented (norace): in the
// child only this function's code runs, up to exit_group. The caller locks
// the OS thread and keeps paths and buf alive; buf holds at least 5 bytes.
//
//go:norace
//go:nosplit
func forkPeek(nsfd, w uintptr, paths []*byte, buf []byte) (pid uintptr, errno syscall.Errno) {
	all := ^uint64(0)
	var old uint64
	syscall.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&all)), uintptr(unsafe.Pointer(&old)), 8, 0, 0)
	// clone(SIGCHLD) with no stack is fork(2); s390x takes the stack first
	// (as the syscall package's own fork does).
	a0, a1 := uintptr(unix.SIGCHLD), uintptr(0)
	if runtime.GOARCH == "s390x" {
		a0, a1 = a1, a0
	}
	r, _, e := syscall.RawSyscall6(unix.SYS_CLONE, a0, a1, 0, 0, 0, 0)
	if e != 0 || r != 0 {
		syscall.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&old)), 0, 8, 0, 0)
		return r, e
	}

	// The child.
	code := uintptr(0)
	if _, _, e := syscall.RawSyscall(unix.SYS_SETNS, nsfd, unix.CLONE_NEWNET, 0); e != 0 {
		code = peekExitSetns
	}
	if code == 0 && w != 1 {
		if _, _, e := syscall.RawSyscall(unix.SYS_DUP3, w, 1, 0); e != 0 {
			code = peekExitFds
		}
	}
	// Every other file of the parent closes, the runtime's pipes the hook
	// got on 0 and 2 first of all.
	if code == 0 {
		if _, _, e := syscall.RawSyscall(unix.SYS_CLOSE_RANGE, 2, uintptr(^uint32(0)), 0); e != 0 {
			code = peekExitFds
		}
		syscall.RawSyscall(unix.SYS_CLOSE, 0, 0, 0)
	}
	cwd := unix.AT_FDCWD
	for i := 0; code == 0 && i < len(paths); i++ {
		n, st := 3, byte(peekOK)
		fd, _, e := syscall.RawSyscall6(unix.SYS_OPENAT, uintptr(cwd), uintptr(unsafe.Pointer(paths[i])), unix.O_RDONLY|unix.O_CLOEXEC, 0, 0, 0)
		switch {
		case e == unix.ENOENT:
			st = peekMissing
		case e != 0:
			st = peekFailed
		default:
			for {
				if n == len(buf) {
					st = peekLong
					break
				}
				m, _, e2 := syscall.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&buf[n])), uintptr(len(buf)-n))
				if e2 == unix.EINTR {
					continue
				}
				if e2 != 0 {
					st, e = peekFailed, e2
					break
				}
				if m == 0 {
					break
				}
				n += int(m)
			}
			syscall.RawSyscall(unix.SYS_CLOSE, fd, 0, 0)
		}
		switch st {
		case peekFailed:
			n = 5
			buf[3], buf[4] = byte(e), byte(e>>8)
		case peekMissing, peekLong:
			n = 3
		}
		buf[0], buf[1], buf[2] = st, byte(n-3), byte((n-3)>>8)
		for off := 0; off < n; {
			m, _, e := syscall.RawSyscall(unix.SYS_WRITE, 1, uintptr(unsafe.Pointer(&buf[off])), uintptr(n-off))
			if e == unix.EINTR {
				continue
			}
			if e != 0 {
				code = peekExitWrite
				break
			}
			off += int(m)
		}
	}
	for {
		syscall.RawSyscall(unix.SYS_EXIT_GROUP, code, 0, 0)
	}
}
