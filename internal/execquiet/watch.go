package execquiet

import (
	"encoding/binary"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The nftables watch's reader (lib/watch) races one-shot writers as the
// exec watch races one-shot tools: a commit's end names the committing
// process, which its shell reaps within a few hundred microseconds. That
// reader runs at real-time priority, so its wake preempts the writer, but
// back from epoll_wait through the runtime it needed a P, and while the
// agent's own work held every P (a collection's idle mark workers, scans
// decoding) its thread parked and the writer ran on: 5 to 19 of 20
// one-shot writers were gone with a collection running throughout. So its
// wait is quiet too: it waits, reads the ready monitor sockets' datagrams,
// each up to a commit's end, and reads those writers' stat and cgroup
// before it returns to Go (WatchReader).

// The nf_tables messages the quiet wait looks for (linux/netfilter/
// nfnetlink.h, nf_tables.h).
const (
	// nftNewGen is NFNL_SUBSYS_NFTABLES<<8 | NFT_MSG_NEWGEN: a commit's end.
	nftNewGen = 10<<8 | 15
	// nftaGenProcPID is NFTA_GEN_PROC_PID, the committing process's pid
	// (big-endian).
	nftaGenProcPID = 2
	nfgenHdrLen    = 4
	nlaHdrLen      = 4
	nlaTypeMask    = 0x3fff
)

// Datagram bounds one datagram the quiet wait reads (lib/watch's receive
// buffer): a longer one is read cut (WatchReader.Cut).
const Datagram = 64 << 10

// MaxDatagrams bounds the kernel's datagrams one Wait reads, every socket
// together; while more sockets are to be read, each keeps its share of
// them (MaxDatagrams/MaxReads) and one Datagram of Buf, so that a pod
// committing a long batch (or read first) leaves the others theirs.
const MaxDatagrams = 32

// MaxForeign bounds the datagrams not sent by the kernel one socket's read
// drops (see SocketRead.Foreign): past it the read ends, so a flood of
// them holds the reader thread for at most that many receives a socket.
// They take none of the kernel's datagrams' room.
const MaxForeign = 32

// MaxReads bounds the sockets one Wait reads: the others ready are left
// to the Go path, and the next Wait starts with the ready socket after
// the last one read (by monitor, so that every ready pod takes its turn).
const MaxReads = 4

// The bounds of the writers' reads, four files each (about 30 µs): past
// them the Go path describes the writer, within its own bounds (lib/watch's
// MaxWriters a window).
const (
	// MaxWriterReads bounds the writers read a second, every monitor
	// together.
	MaxWriterReads = 200
	// MaxMonitorReads bounds them for one monitor: a pod committing from
	// ever new processes (or sending forged commits' ends) spends its own
	// budget, not the other pods'.
	MaxMonitorReads = 20
	// SameWriter: a monitor's writer read once is not read again within
	// it (lib/watch's default window, in which the Go path describes one
	// writer once).
	SameWriter = 50 * time.Millisecond
)

// budgetSlots monitors' budgets are kept (a power of two): two monitors
// open at once whose ids are equal modulo it share one (their reads
// counted together; a slot is never reset for a newcomer, which would
// let two such monitors lift each other's bound).
const budgetSlots = 256

// WatchReader is the nftables watch's quiet wait. Its caller writes
// nothing of it while Wait runs.
//
// The epoll set's events carry, in Fd, the descriptor to read and, in
// Pad, a non-zero id for a monitor's socket (0: not one to read, the
// reader's wake-up eventfd). A socket leaving the set must stay open until
// the Wait that may read it has returned (Gen).
type WatchReader struct {
	// Events are epoll_wait's, the first WatchResult.N of them.
	Events []unix.EpollEvent
	// Reads are the sockets read, the first WatchResult.Reads of them.
	Reads [MaxReads]SocketRead
	// Buf holds the kernel's datagrams Wait read, one after another:
	// datagram i is Lens[i] long, Cut[i] when the kernel's was longer.
	// Room for every socket to read one datagram and the first a second.
	Buf  []byte
	Lens [MaxDatagrams]int
	Cut  [MaxDatagrams]bool

	epfd int
	procFiles
	// last is the monitor read last: the next Wait starts after it in
	// the ready events (or at the first, when it is not ready).
	last uint32
	// reads counts the writers read since second began (MaxWriterReads);
	// budgets are the monitors' (MaxMonitorReads, SameWriter), by id.
	reads   int
	second  int64
	budgets [budgetSlots]budget
	sender
	gen atomic.Uint64
}

// SocketRead is what Wait read from one monitor's socket.
type SocketRead struct {
	// Event is the socket's index in Events.
	Event int
	// The kernel's datagrams First to First+Count were read from it,
	// starting at Off in Buf. A datagram not sent by the kernel (a
	// process with CAP_NET_ADMIN in the pod's network namespace can send
	// one to the monitor's group) is dropped: Foreign counts them, at
	// most MaxForeign.
	First, Count, Off int
	Foreign           int
	// Errno is the error that ended the reading: 0, a commit's end,
	// the socket's share or MaxForeign ended it (the Go path reads on);
	// EAGAIN, none waits; ENOBUFS, the kernel dropped announcements
	// after those; any other, the socket failed.
	Errno syscall.Errno
	// Writer is what was read of the process the commit's end named
	// (PID; Stat, Cgroup, Stat2 and Parent as lib/watch reads them), PID
	// 0 for none.
	Writer Snapshot
}

// budget is one monitor's writer reads.
type budget struct {
	reads  int
	second int64
	// last is the writer of monitor lastID read last, at lastAt.
	lastID uint32
	last   int
	lastAt int64
}

// WatchResult is why Wait returned.
type WatchResult struct {
	// N events are in Events.
	N int
	// Failed is epoll_wait's error (only a bad epoll descriptor).
	Failed syscall.Errno
	// Reads sockets were read (WatchReader.Reads).
	Reads int
}

// NewWatchReader waits on the epoll set epfd; writers are read under root
// ("" or longer than MaxRoot: never).
func NewWatchReader(epfd int, root string) *WatchReader {
	q := &WatchReader{Events: make([]unix.EpollEvent, 32), Buf: make([]byte, (MaxReads+1)*Datagram), epfd: epfd}
	q.setRoot(root)
	// One allocation for every file: its pages are touched only as far
	// as the files read fill them.
	const size = MaxProc + 1
	slab := make([]byte, MaxReads*4*size)
	take := func() []byte {
		b := slab[:size:size]
		slab = slab[size:]
		return b
	}
	for i := range q.Reads {
		w := &q.Reads[i].Writer
		w.Stat.buf, w.Cgroup.buf, w.Stat2.buf, w.Parent.buf = take(), take(), take(), take()
	}
	return q
}

// Gen counts Wait's entries and returns: odd while one runs. A socket
// taken out of the epoll set while it is odd may still be read until it
// changes (wake the reader meanwhile).
func (q *WatchReader) Gen() uint64 { return q.gen.Load() }

// Wait blocks until an epoll event is ready; ready monitor sockets are
// read as WatchResult says.
func (q *WatchReader) Wait() WatchResult {
	q.gen.Add(1)
	res := q.wait()
	q.gen.Add(1)
	return res
}

//go:nosplit
//go:norace
func (q *WatchReader) wait() (res WatchResult) {
	entersyscall()
	res = q.loop()
	exitsyscall()
	return res
}

// loop is Wait's body, in the system call state.
//
//go:nosplit
//go:norace
func (q *WatchReader) loop() WatchResult {
	ev := q.Events
	if len(ev) == 0 {
		return WatchResult{Failed: unix.EINVAL}
	}
	for {
		// epoll_pwait with no mask: epoll_wait, which arm64 lacks.
		r, _, e := syscall.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(q.epfd), uintptr(unsafe.Pointer(&ev[0])), uintptr(len(ev)), ^uintptr(0), 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return WatchResult{Failed: e}
		}
		res := WatchResult{N: int(r)}
		if res.N > len(ev) {
			res.N = len(ev)
		}
		q.readReady(&res)
		return res
	}
}

// readReady reads the ready monitor sockets, at most MaxReads, starting
// after the one read last.
//
//go:nosplit
//go:norace
func (q *WatchReader) readReady(res *WatchResult) {
	ev := q.Events
	n := res.N
	if n > len(ev) {
		n = len(ev)
	}
	if n <= 0 {
		return
	}
	ready, i := 0, 0
	for k := 0; k < n; k++ {
		if ev[k].Pad == 0 {
			continue
		}
		ready++
		if uint32(ev[k].Pad) == q.last && k+1 < n {
			i = k + 1
		}
	}
	if ready > len(q.Reads) {
		ready = len(q.Reads)
	}
	off, datagrams := 0, 0
	for k := 0; k < n && res.Reads < ready; k++ {
		if k > 0 {
			if i++; i >= n {
				i = 0
			}
		}
		if ev[i].Pad == 0 {
			continue
		}
		r := &q.Reads[res.Reads]
		res.Reads++
		r.Event, r.First, r.Off = i, datagrams, off
		used, pid := q.read(r, int(ev[i].Fd), ready-res.Reads)
		off += used
		datagrams += r.Count
		q.last = uint32(ev[i].Pad)
		if pid > 0 {
			// Here, not in read: the stack is bounded.
			q.readWriter(&r.Writer, uint32(ev[i].Pad), pid)
		}
	}
}

// read reads fd's datagrams into Buf from r.Off until one ends a commit,
// none waits, MaxForeign were dropped, or the kernel's would take what
// the later sockets still to read keep: their share of the datagrams,
// and room for one Datagram each (a whole one's room is kept before each
// receive). It returns the bytes it used and the pid the commit's end
// named (0: none read).
//
//go:nosplit
//go:norace
func (q *WatchReader) read(r *SocketRead, fd int, later int) (used, pid int) {
	r.Count, r.Foreign, r.Errno, r.Writer.PID = 0, 0, 0, 0
	off := r.Off
	// At most len(q.Lens): later is never negative.
	limit := MaxDatagrams - later*(MaxDatagrams/MaxReads)
	end := len(q.Buf) - later*Datagram
	for r.First+r.Count < limit && off+used >= 0 && end-(off+used) >= Datagram {
		rest := q.Buf[off+used : end]
		got, e := q.recv(fd, rest[:Datagram], unix.MSG_DONTWAIT|unix.MSG_TRUNC)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			r.Errno = e
			return used, 0
		}
		if q.foreign() {
			// Not the kernel's: dropped, and a flood of them
			// ends the read.
			if r.Foreign++; r.Foreign >= MaxForeign {
				return used, 0
			}
			continue
		}
		// MSG_TRUNC: netlink returns the datagram's whole length.
		n, cut := int(got), false
		if n > Datagram {
			n, cut = Datagram, true
		}
		if n < 0 || n > len(rest) {
			n = len(rest)
		}
		i := r.First + r.Count
		if i < 0 || i >= len(q.Lens) {
			return used, 0
		}
		r.Count++
		q.Lens[i], q.Cut[i] = n, cut
		used += n
		if pid := genPID(rest[:n]); pid > 0 {
			return used, pid
		}
	}
	return used, 0
}

// readWriter reads the files of pid, the writer monitor id's commit
// named, into w, within the budgets.
//
//go:nosplit
//go:norace
func (q *WatchReader) readWriter(w *Snapshot, id uint32, pid int) {
	if q.prefix == nil {
		return
	}
	now := monotonic()
	b := &q.budgets[id&(budgetSlots-1)]
	if b.lastID == id && b.last == pid && now-b.lastAt < int64(SameWriter) {
		return
	}
	if now-b.second >= int64(time.Second) {
		b.second, b.reads = now, 0
	}
	if now-q.second >= int64(time.Second) {
		q.second, q.reads = now, 0
	}
	if b.reads >= MaxMonitorReads || q.reads >= MaxWriterReads {
		return
	}
	b.reads++
	q.reads++
	b.lastID, b.last, b.lastAt = id, pid, now
	w.PID = pid
	q.readFile(pid, statLeaf, &w.Stat)
	q.readFile(pid, cgroupLeaf, &w.Cgroup)
	q.readFile(pid, statLeaf, &w.Stat2)
	w.Parent.N, w.Parent.Err = 0, 0
	if st := &w.Stat; st.Err == 0 && st.N < len(st.buf) {
		if ppid := ppidOf(st.buf[:st.N]); ppid > 0 {
			q.readFile(ppid, statLeaf, &w.Parent)
		}
	}
}

// sender is a datagram's sender as recvfrom gives it; here because the
// quiet path's stack is bounded.
type sender struct {
	from    unix.RawSockaddrNetlink
	fromLen uint32
}

// recv receives one datagram from fd into b (recvfrom), its sender into
// s.
//
//go:nosplit
//go:norace
func (s *sender) recv(fd int, b []byte, flags int) (uintptr, syscall.Errno) {
	if len(b) == 0 {
		return 0, unix.EINVAL
	}
	s.fromLen = unix.SizeofSockaddrNetlink
	r, _, e := syscall.RawSyscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(flags),
		uintptr(unsafe.Pointer(&s.from)), uintptr(unsafe.Pointer(&s.fromLen)))
	return r, e
}

// foreign tells whether the datagram recv received was sent by a process,
// not the kernel (port 0): with CAP_NET_ADMIN in the socket's network
// namespace one can send a datagram to the socket's group (to its port
// too, were it not connected to the kernel). Another socket family's
// sender (a test's stand-in) is not a netlink port.
//
//go:nosplit
//go:norace
func (s *sender) foreign() bool {
	return s.fromLen >= unix.SizeofSockaddrNetlink && s.from.Family == unix.AF_NETLINK && s.from.Pid != 0
}

// genPID is the pid a commit's end in the datagram b names, 0 when it
// holds none (or cannot be framed up to one).
//
//go:nosplit
//go:norace
func genPID(b []byte) int {
	for len(b) >= unix.NLMSG_HDRLEN {
		l := int(binary.NativeEndian.Uint32(b[0:4]))
		typ := binary.NativeEndian.Uint16(b[4:6])
		if l < unix.NLMSG_HDRLEN || l > len(b) {
			return 0
		}
		if typ == nftNewGen && l >= unix.NLMSG_HDRLEN+nfgenHdrLen {
			if pid := attrPID(b[unix.NLMSG_HDRLEN+nfgenHdrLen : l]); pid > 0 {
				return pid
			}
		}
		a := (l + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1)
		if a > len(b) {
			return 0
		}
		b = b[a:]
	}
	return 0
}

// attrPID is the NFTA_GEN_PROC_PID in a NEWGEN's attributes, 0 when
// absent.
//
//go:nosplit
//go:norace
func attrPID(b []byte) int {
	for len(b) >= nlaHdrLen {
		l := int(binary.NativeEndian.Uint16(b[0:2]))
		typ := binary.NativeEndian.Uint16(b[2:4]) & nlaTypeMask
		if l < nlaHdrLen || l > len(b) {
			return 0
		}
		if typ == nftaGenProcPID && l == nlaHdrLen+4 {
			return int(binary.BigEndian.Uint32(b[nlaHdrLen:l]))
		}
		a := (l + unix.NLA_ALIGNTO - 1) &^ (unix.NLA_ALIGNTO - 1)
		if a > len(b) {
			return 0
		}
		b = b[a:]
	}
	return 0
}

// ppidOf is the parent's pid in a stat file ("pid (comm) S ppid ..."; the
// command may hold spaces and parentheses: it ends at the last ')'), 0
// when it cannot be read.
//
//go:nosplit
//go:norace
func ppidOf(b []byte) int {
	end := -1
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == ')' {
			end = i
			break
		}
	}
	if end < 0 || end+4 > len(b) {
		return 0
	}
	rest := b[end+1:]
	if len(rest) < 4 || rest[0] != ' ' || rest[2] != ' ' {
		return 0
	}
	rest = rest[3:]
	v, n := 0, 0
	for n < len(rest) && n < 10 && rest[n] >= '0' && rest[n] <= '9' {
		v = v*10 + int(rest[n]-'0')
		n++
	}
	if n == 0 || (n < len(rest) && rest[n] != ' ') {
		return 0
	}
	return v
}
