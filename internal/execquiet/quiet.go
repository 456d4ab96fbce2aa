// Package execquiet is the exec watch's quiet path (lib/execwatch's
// reader), and the nftables watch's quiet wait (lib/watch's reader,
// WatchReader in watch.go). Almost every exec on a node is not an iptables tool, and almost
// every exit is not a pending tool's; each still wakes the reader. Through
// the Go runtime each wake-up cost several threads' context switches: the
// reader's return from poll and its next system call each meet the
// runtime's monitor thread (sysmon), which takes an idle-looking P back
// after 10 ms, sleeps deeply once every P is idle, is woken by the next
// return from a system call and then polls every 20 µs for a millisecond
// or more. The exec storm of issue 28 (10,000 execs a minute) cost the
// watch about 230 µs of CPU an exec that way, for one readlink; a thread
// of the runtime's network poller woke at every message too.
//
// So the reader stays in one system call for as long as the messages need
// nothing of Go: it enters the runtime's system call state once
// (entersyscall, as the syscall package does), then polls, reads and
// dismisses non-tool execs and other exits in system calls made directly,
// and leaves it (exitsyscall) only with a message that needs Go: a tool's
// exec (or one whose binary could not be read), a pending tool's exit, a
// message it cannot parse, an overrun, Close, or execs to count
// (PublishEvery). Its P stays its own meanwhile unless sysmon takes it (a
// busy process, or 10 ms without a return); when it was taken, the return
// waits for one, up to milliseconds under load, and a one-shot tool
// (iptables -t bogus) can end meanwhile. So a possible tool's files are
// read here, as its exec arrives, before the return (Snapshot), and the
// Go path reads them instead of /proc.
//
// Code that runs between the two has no P of its own to rely on: it must
// not allocate, grow its stack, call anything but nosplit functions, or
// write pointers (the linker checks the nosplit chain). Every function
// here is nosplit and norace (the race detector's hooks need a P), and is
// tested from ordinary Go too. It is a package of its own so that
// coverage, which instruments the package under test with atomic counters
// (calls under the race detector), leaves it alone: `go test -race -cover
// ./lib/execwatch` works; only -coverpkg naming this package would break
// it.
package execquiet

import (
	"encoding/binary"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/iptables-alerter/iptables-alerter/internal/procstat"
)

//go:linkname entersyscall runtime.entersyscall
func entersyscall()

//go:linkname exitsyscall runtime.exitsyscall
func exitsyscall()

// The connector's messages (include/uapi/linux/connector.h, cn_proc.h).
const (
	CnIdxProc = 1 // CN_IDX_PROC: the group and the callback id
	CnValProc = 1 // CN_VAL_PROC

	ProcEventNone = 0x00000000
	ProcEventExec = 0x00000002
	ProcEventExit = 0x80000000

	// CnMsgLen is struct cn_msg without its data: id (idx, val), seq,
	// ack, len, flags.
	CnMsgLen = 20
	// ProcEventHdr is struct proc_event up to event_data: what, cpu,
	// timestamp_ns.
	ProcEventHdr = 16
)

// Kind is what an Event reports.
type Kind int

const (
	KindOther Kind = iota
	// KindAck: the kernel's answer to a listen request (Err, Seq, Ack).
	KindAck
	KindExec
	KindExit
)

// Event is one decoded connector message.
type Event struct {
	Kind Kind
	// Seq and Ack are the cn_msg's: an acknowledgement answers the
	// request's ack plus one.
	Seq, Ack uint32
	// Err is an acknowledgement's error number (0: listening).
	Err uint32
	// PID and TGID are the thread and its thread group (process), in the
	// initial pid namespace.
	PID, TGID int
	// Status is an exit's raw wait status.
	Status uint32
	// Mono is when the kernel made the event (proc_event's timestamp_ns,
	// CLOCK_MONOTONIC nanoseconds); 0 for a message of another callback.
	Mono int64
}

// Parse reads one netlink message's payload (a cn_msg holding a
// proc_event), in the host's byte order; !ok when it is too short for
// what it says it holds. A message of another connector callback, or an
// event the watch does not use, is KindOther.
//
//go:nosplit
//go:norace
func Parse(b []byte) (ev Event, ok bool) {
	if len(b) < CnMsgLen {
		return Event{}, false
	}
	ne := binary.NativeEndian
	ev.Seq, ev.Ack = ne.Uint32(b[8:]), ne.Uint32(b[12:])
	if ne.Uint32(b[0:]) != CnIdxProc || ne.Uint32(b[4:]) != CnValProc {
		return ev, true
	}
	n := int(ne.Uint16(b[16:]))
	data := b[CnMsgLen:]
	if n > len(data) || n < ProcEventHdr {
		return Event{}, false
	}
	data = data[:n]
	ev.Mono = int64(ne.Uint64(data[8:]))
	d := data[ProcEventHdr:]
	switch ne.Uint32(data[0:]) {
	case ProcEventNone:
		if len(d) < 4 {
			return Event{}, false
		}
		ev.Kind, ev.Err = KindAck, ne.Uint32(d)
	case ProcEventExec:
		if len(d) < 8 {
			return Event{}, false
		}
		ev.Kind, ev.PID, ev.TGID = KindExec, int(int32(ne.Uint32(d))), int(int32(ne.Uint32(d[4:])))
	case ProcEventExit:
		if len(d) < 12 {
			return Event{}, false
		}
		ev.Kind, ev.PID, ev.TGID = KindExit, int(int32(ne.Uint32(d))), int(int32(ne.Uint32(d[4:])))
		ev.Status = ne.Uint32(d[8:])
	}
	return ev, true
}

// MaxRoot bounds the /proc root the quiet path builds paths under; with a
// longer one (a test's stand-in) every exec goes to the Go path.
const MaxRoot = 64

// Reader is the quiet path's state (NewReader). Its caller sets Pending
// before each Wait and writes nothing while Wait runs.
type Reader struct {
	// Buf receives the datagrams (Wait's Message is in it).
	Buf []byte
	// Pending are the pids of the tools waiting for their exit.
	Pending []int
	// Snap is what was read of the process whose exec Wait returned
	// for, when its binary's name may be a tool's (Snapshot).
	Snap Snapshot
	// Errno is why the socket failed when Wait returned Stop for it (0
	// for the stop descriptor): the reader is then deaf, and says so.
	Errno unix.Errno
	// ReportDrained makes Wait return Drained when the socket has no
	// datagram left: set after an Overrun, whose ENOBUFS the kernel
	// reports before the datagrams queued ahead of the drop.
	ReportDrained bool

	// fds are the connector's socket, then the descriptor that tells
	// the reader to stop (readable: Stop).
	fds [2]unix.PollFd
	// procFiles' prefix is nil when every exec goes to the Go path.
	procFiles
	sender
	// timeout is the poll's, here because the quiet path's stack is
	// bounded (nosplit).
	timeout unix.Timespec
}

// procFiles reads a process's /proc files in the system call state.
type procFiles struct {
	// prefix is the /proc root and a slash, nil when nothing is read.
	prefix []byte
	// path is the /proc path a read is made on, here because the quiet
	// path's stack is bounded (nosplit).
	path [MaxRoot + 32]byte
}

// setRoot sets the /proc root the files are read under: "" or one
// longer than MaxRoot reads nothing.
func (p *procFiles) setRoot(root string) {
	if root != "" && len(root) <= MaxRoot {
		p.prefix = []byte(root + "/")
	}
}

// NewReader reads the connector's socket fd until stop is readable; the
// pids are read in root, the /proc they live in ("" or longer than
// MaxRoot: every exec goes to the Go path).
func NewReader(fd, stop int, root string) *Reader {
	q := &Reader{Buf: make([]byte, 64<<10),
		fds: [2]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(stop), Events: unix.POLLIN}}}
	q.setRoot(root)
	s := &q.Snap
	s.Exe.buf = make([]byte, 512)
	s.Netns.buf = make([]byte, 64)
	s.Cmdline.buf = make([]byte, MaxCmdline+1)
	s.Comm.buf = make([]byte, 32)
	s.Status.buf = make([]byte, MaxStatus)
	s.Stat.buf = make([]byte, MaxProc+1)
	s.Cgroup.buf = make([]byte, MaxProc+1)
	s.Stat2.buf = make([]byte, MaxProc+1)
	return q
}

// Result is why Wait returned.
type Result int

const (
	// Message: Buf[off:n] holds a message for the Go path, and what
	// follows it in the datagram.
	Message Result = iota
	// Publish: execs were dismissed PublishEvery ago and wait to be
	// counted (an atomic add needs a P under the race detector).
	Publish
	// Overrun: the kernel dropped messages (ENOBUFS).
	Overrun
	// Drained: with ReportDrained, no datagram is left on the socket.
	Drained
	// Stop: the stop descriptor is readable, or the socket failed.
	Stop
)

// PublishEvery bounds how late the count of dismissed execs reaches the
// caller: Wait returns at most this long after the first of them.
const PublishEvery = time.Second

// MaxRun bounds the kernel's datagrams one receive dismisses before it
// polls again: execs on many cores can queue them faster than the
// dismissal's exe look-ups drain them, and the poll is where a stop and
// the publish deadline are seen.
const MaxRun = 64

// Wait blocks until a message needs the Go path, dismissing the others
// (execs of binaries whose name cannot be a tool's, exits of threads and
// of processes not pending); dismissed counts the execs it dismissed.
func (q *Reader) Wait() (res Result, off, n int, dismissed uint64) {
	q.Snap.PID = 0
	return q.wait()
}

//go:nosplit
//go:norace
func (q *Reader) wait() (res Result, off, n int, dismissed uint64) {
	entersyscall()
	res, off, n, dismissed = q.loop()
	exitsyscall()
	return res, off, n, dismissed
}

// loop is Wait's body, in the system call state (its P may be taken).
//
//go:nosplit
//go:norace
func (q *Reader) loop() (res Result, off, n int, dismissed uint64) {
	// first is when the first execs not published yet were dismissed.
	first := int64(0)
	for {
		tp := uintptr(0)
		if dismissed > 0 {
			left := first + int64(PublishEvery) - monotonic()
			if left <= 0 {
				return Publish, 0, 0, dismissed
			}
			q.timeout = unix.Timespec{Sec: left / int64(time.Second), Nsec: left % int64(time.Second)}
			tp = uintptr(unsafe.Pointer(&q.timeout))
		}
		r, _, e := syscall.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&q.fds[0])), 2, tp, 0, 0, 0)
		if e != 0 && e != unix.EINTR {
			q.Errno = e
			return Stop, 0, 0, dismissed
		}
		if r == 0 || e != 0 {
			continue
		}
		if q.fds[1].Revents != 0 {
			return Stop, 0, 0, dismissed
		}
		res, off, n, d, ret := q.receive()
		if d > 0 && dismissed == 0 {
			first = monotonic()
		}
		dismissed += d
		if ret {
			if res == Message && q.Snap.PID != 0 {
				// Here, not in receive: the stack is bounded.
				q.snapshot()
			}
			return res, off, n, dismissed
		}
	}
}

// receive reads the datagrams waiting on the socket: ret, with Wait's
// result, once one holds a message for the Go path or the socket failed;
// not ret once none waits, MaxRun of the kernel's were dismissed, or
// MaxForeign datagrams not the kernel's were dropped (back to the poll,
// which sees a stop and bounds the time to a publish, whatever floods the
// socket). d counts the execs it dismissed.
//
//go:nosplit
//go:norace
func (q *Reader) receive() (res Result, off, n int, d uint64, ret bool) {
	foreign, run := 0, 0
	for {
		m, e := q.recv(int(q.fds[0].Fd), q.Buf, unix.MSG_DONTWAIT)
		switch e {
		case 0:
			if q.foreign() {
				// Not the kernel's event: a process with
				// CAP_NET_ADMIN in the host's network namespace
				// sent it.
				if foreign++; foreign >= MaxForeign {
					return 0, 0, 0, d, false
				}
				continue
			}
		case unix.EAGAIN:
			if q.ReportDrained {
				return Drained, 0, 0, d, true
			}
			return 0, 0, 0, d, false
		case unix.EINTR:
			continue
		case unix.ENOBUFS:
			return Overrun, 0, 0, d, true
		default:
			q.Errno = e
			return Stop, 0, 0, d, true
		}
		n := int(m)
		if n > len(q.Buf) {
			q.Errno = unix.EMSGSIZE
			return Stop, 0, 0, d, true
		}
		off, more := q.dismiss(q.Buf[:n])
		d += more
		if off < n {
			return Message, off, n, d, true
		}
		if run++; run >= MaxRun {
			return 0, 0, 0, d, false
		}
	}
}

// monotonic is CLOCK_MONOTONIC in nanoseconds, by the system call (the
// vDSO's is Go code that may need a P).
//
//go:nosplit
//go:norace
func monotonic() int64 {
	var ts unix.Timespec
	syscall.RawSyscall(unix.SYS_CLOCK_GETTIME, unix.CLOCK_MONOTONIC, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Sec*int64(time.Second) + ts.Nsec
}

// dismiss goes through a datagram's messages: it returns the offset of
// the first one the Go path must see (len(b) when none) and how many
// execs it dismissed before it.
//
//go:nosplit
//go:norace
func (q *Reader) dismiss(b []byte) (int, uint64) {
	off, execs := 0, uint64(0)
	for off < len(b) {
		rest := b[off:]
		if len(rest) < unix.NLMSG_HDRLEN {
			return off, execs
		}
		l := int(binary.NativeEndian.Uint32(rest))
		if l < unix.NLMSG_HDRLEN || l > len(rest) {
			return off, execs
		}
		ev, ok := Parse(rest[unix.NLMSG_HDRLEN:l])
		switch {
		case !ok || ev.Kind == KindAck:
			return off, execs
		case ev.Kind == KindExec:
			// Every tool's name holds "tables" (iptables, ip6tables,
			// arptables, ebtables, xtables-*); the Go path decides
			// exactly, and on a binary that could not be read whole.
			if q.prefix == nil || ev.TGID <= 0 {
				return off, execs
			}
			exe := &q.Snap.Exe
			q.readLink(ev.TGID, exeLeaf, exe)
			if exe.Err != 0 || exe.N == 0 || exe.N >= len(exe.buf) {
				return off, execs
			}
			if baseHolds(exe.buf[:exe.N], "tables") || q.isPending(ev.TGID) {
				q.Snap.PID = ev.TGID
				return off, execs
			}
			execs++
		case ev.Kind == KindExit:
			if ev.PID == ev.TGID && q.isPending(ev.TGID) {
				return off, execs
			}
		}
		off += (l + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1)
	}
	return len(b), execs
}

//go:nosplit
//go:norace
func (q *Reader) isPending(pid int) bool {
	for _, p := range q.Pending {
		if p == pid {
			return true
		}
	}
	return false
}

// procPath writes prefix, pid and leaf (NUL-terminated) into q.path: its
// length, -1 when it does not fit.
//
//go:nosplit
//go:norace
func (q *procFiles) procPath(pid int, leaf []byte) int {
	n := put(q.path[:], 0, q.prefix)
	n = putUint(q.path[:], n, uint64(pid))
	return put(q.path[:], n, leaf)
}

// atFDCWD is AT_FDCWD (-100) as the system call's unsigned argument.
const atFDCWD = ^uintptr(0) - 99

// baseHolds tells whether the last element of path holds s.
//
//go:nosplit
//go:norace
func baseHolds(path []byte, s string) bool {
	start := 0
	for i := len(path) - 1; i >= 0; i-- {
		if path[i] == '/' {
			start = i + 1
			break
		}
	}
	base := path[start:]
	for i := 0; i+len(s) <= len(base); i++ {
		j := 0
		for j < len(s) && base[i+j] == s[j] {
			j++
		}
		if j == len(s) {
			return true
		}
	}
	return false
}

// exeLeaf ends a /proc path, NUL-terminated for the system call.
var exeLeaf = []byte("/exe\x00")

// put writes s into b at n and returns the end; -1 when it does not fit
// or n is -1 (an earlier put did not fit). By hand: copy is a call under
// the race detector, which needs a P. Written so that the compiler proves
// every index (a bounds check's panic is a call the nosplit stack counts).
//
//go:nosplit
//go:norace
func put(b []byte, n int, s []byte) int {
	if n < 0 || n > len(b) {
		return -1
	}
	dst := b[n:]
	if len(s) > len(dst) {
		return -1
	}
	dst = dst[:len(s)]
	for i := range dst {
		dst[i] = s[i]
	}
	return n + len(s)
}

// putUint writes v in decimal into b at n, as put does.
//
//go:nosplit
//go:norace
func putUint(b []byte, n int, v uint64) int {
	digits := 1
	for x := v; x >= 10; x /= 10 {
		digits++
	}
	if n < 0 || n > len(b) {
		return -1
	}
	dst := b[n:]
	if uint(digits) > uint(len(dst)) {
		return -1
	}
	dst = dst[:digits]
	for i := len(dst) - 1; i >= 0; i-- {
		dst[i] = byte('0' + v%10)
		v /= 10
	}
	return n + digits
}

// Sizes of a Snapshot's files: cmdline as lib/execwatch bounds it (one
// byte more tells it was cut), stat and cgroup as lib/watch reads them;
// status up to its capability lines (about 1 KiB in; a process with
// thousands of supplementary groups pushes them past it, and they read
// as unknown).
const (
	MaxCmdline = 4 << 10
	MaxProc    = procstat.MaxFile
	MaxStatus  = 4 << 10
)

// Snapshot is what the quiet path reads of a possible tool the moment its
// exec arrives, before it returns to Go: a one-shot command may end
// while the reader waits for the runtime (a P, under load milliseconds),
// and a process that ended reads as gone. The files are read in the
// order lib/execwatch reads them: the binary, the network namespace, the
// command line, the name, status (its capabilities), stat, cgroup and
// stat again (a pid taken by another process in between shows in stat's
// start time).
type Snapshot struct {
	// PID is the process read, 0 for none.
	PID                                        int
	Exe, Netns                                 File
	Cmdline, Comm, Status, Stat, Cgroup, Stat2 File
	// Parent is the parent's stat, read by the nftables watch's wait
	// only (WatchReader): a one-shot writer's shell may end with it.
	Parent File
}

// File is one /proc file's bytes (a link's target), or why it could not
// be read. Its buffer is NewReader's. The quiet path writes only N and Err: storing a slice is a
// pointer write, whose barrier needs a P.
type File struct {
	buf []byte
	N   int
	// Err is the system call's error (N is 0 then).
	Err syscall.Errno
}

// Bytes are the file's bytes. A file longer than its buffer fills it
// (MaxCmdline+1, MaxProc+1): the caller tells it was cut.
func (f *File) Bytes() []byte { return f.buf[:f.N] }

// SnapshotOf reads pid's files under root as the quiet path does when its
// exec arrives (tests hand it to the Go path after the process ended).
func SnapshotOf(root string, pid int) *Snapshot {
	q := NewReader(-1, -1, root)
	if q.prefix != nil && pid > 0 {
		q.readLink(pid, exeLeaf, &q.Snap.Exe)
		if q.Snap.Exe.Err == 0 && q.Snap.Exe.N > 0 {
			q.Snap.PID = pid
			q.snapshot()
		}
	}
	return &q.Snap
}

var (
	netLeaf     = []byte("/ns/net\x00")
	cmdlineLeaf = []byte("/cmdline\x00")
	commLeaf    = []byte("/comm\x00")
	statusLeaf  = []byte("/status\x00")
	statLeaf    = []byte("/stat\x00")
	cgroupLeaf  = []byte("/cgroup\x00")
)

// snapshot reads q.Snap.PID's files into q.Snap but its binary, which
// dismiss read.
//
//go:nosplit
//go:norace
func (q *Reader) snapshot() {
	s := &q.Snap
	pid := s.PID
	q.readLink(pid, netLeaf, &s.Netns)
	q.readFile(pid, cmdlineLeaf, &s.Cmdline)
	q.readFile(pid, commLeaf, &s.Comm)
	q.readFile(pid, statusLeaf, &s.Status)
	q.readFile(pid, statLeaf, &s.Stat)
	q.readFile(pid, cgroupLeaf, &s.Cgroup)
	q.readFile(pid, statLeaf, &s.Stat2)
}

// readLink reads pid's leaf link into f.
//
//go:nosplit
//go:norace
func (q *procFiles) readLink(pid int, leaf []byte, f *File) {
	f.N, f.Err = 0, 0
	buf := f.buf
	if q.procPath(pid, leaf) < 0 || len(buf) == 0 {
		f.Err = unix.ENAMETOOLONG
		return
	}
	r, _, e := syscall.RawSyscall6(unix.SYS_READLINKAT, atFDCWD, uintptr(unsafe.Pointer(&q.path[0])), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0)
	if e != 0 {
		f.Err = e
		return
	}
	if r > uintptr(len(buf)) {
		r = uintptr(len(buf))
	}
	f.N = int(r)
}

// readFile reads pid's leaf file into f, at most its capacity, without
// following links.
//
//go:nosplit
//go:norace
func (q *procFiles) readFile(pid int, leaf []byte, f *File) {
	f.N, f.Err = 0, 0
	buf := f.buf
	if q.procPath(pid, leaf) < 0 || len(buf) == 0 {
		f.Err = unix.ENAMETOOLONG
		return
	}
	fd, _, e := syscall.RawSyscall6(unix.SYS_OPENAT, atFDCWD, uintptr(unsafe.Pointer(&q.path[0])), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0, 0, 0)
	if e != 0 {
		f.Err = e
		return
	}
	n := 0
	for n < len(buf) {
		r, _, e := syscall.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&buf[n])), uintptr(len(buf)-n))
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			f.Err = e
			n = 0
			break
		}
		if r == 0 || r > uintptr(len(buf)-n) {
			break
		}
		n += int(r)
	}
	syscall.RawSyscall(unix.SYS_CLOSE, fd, 0, 0)
	f.N = n
}
