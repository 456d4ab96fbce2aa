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
// wait is quiet too: it waits, reads the first ready monitor socket's
// datagrams up to a commit's end, and reads that writer's stat and cgroup
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

// MaxDatagrams bounds the datagrams one Wait reads.
const MaxDatagrams = 32

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
	// Buf holds the datagrams Wait read from one socket, one after
	// another: Lens[:Count] long, Cut[i] when the kernel's was longer.
	Buf  []byte
	Lens [MaxDatagrams]int
	Cut  [MaxDatagrams]bool
	// Writer is what Wait read of the process a read commit's end named
	// (PID; Stat, Cgroup and Stat2 as lib/watch reads them), PID 0 for
	// none.
	Writer Snapshot

	epfd int
	procFiles
	// last is the pid whose files were read last: a process committing
	// in a flood is read once, the Go path then reading /proc or its
	// window's description. reads counts the writers read since second
	// began (MaxWriterReads).
	last   int
	reads  int
	second int64
	gen    atomic.Uint64
}

// MaxWriterReads bounds the writers the quiet wait reads a second, every
// monitor together (four files each, about 30 µs): past it, pods that
// commit from ever new processes are described by the Go path, within
// its own bounds (lib/watch's MaxWriters a window).
const MaxWriterReads = 200

// WatchResult is why Wait returned.
type WatchResult struct {
	// N events are in Events.
	N int
	// Failed is epoll_wait's error (only a bad epoll descriptor).
	Failed syscall.Errno
	// Read is the index in Events of the socket read, -1 for none;
	// Count datagrams were read from it, and Errno is the error that
	// ended the reading (0 or EAGAIN: none waits; ENOBUFS: the kernel
	// dropped announcements after those; any other: the socket failed).
	Read  int
	Count int
	Errno syscall.Errno
}

// NewWatchReader waits on the epoll set epfd; writers are read under root
// ("" or longer than MaxRoot: never).
func NewWatchReader(epfd int, root string) *WatchReader {
	q := &WatchReader{Events: make([]unix.EpollEvent, 32), Buf: make([]byte, 2*Datagram), epfd: epfd}
	q.setRoot(root)
	q.Writer.Stat.buf = make([]byte, MaxProc+1)
	q.Writer.Cgroup.buf = make([]byte, MaxProc+1)
	q.Writer.Stat2.buf = make([]byte, MaxProc+1)
	q.Writer.Parent.buf = make([]byte, MaxProc+1)
	return q
}

// Gen counts Wait's entries and returns: odd while one runs. A socket
// taken out of the epoll set while it is odd may still be read until it
// changes (wake the reader meanwhile).
func (q *WatchReader) Gen() uint64 { return q.gen.Load() }

// Wait blocks until an epoll event is ready; the first monitor socket
// ready is read as WatchResult says.
func (q *WatchReader) Wait() WatchResult {
	q.Writer.PID = 0
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
		return WatchResult{Read: -1, Failed: unix.EINVAL}
	}
	for {
		// epoll_pwait with no mask: epoll_wait, which arm64 lacks.
		r, _, e := syscall.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(q.epfd), uintptr(unsafe.Pointer(&ev[0])), uintptr(len(ev)), ^uintptr(0), 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return WatchResult{Read: -1, Failed: e}
		}
		res := WatchResult{N: int(r), Read: -1}
		if res.N > len(ev) {
			res.N = len(ev)
		}
		for i := 0; i < res.N && i < len(ev); i++ {
			if ev[i].Pad != 0 {
				res.Read = i
				res.Count, res.Errno = q.read(int(ev[i].Fd))
				break
			}
		}
		return res
	}
}

// read reads fd's datagrams into Buf until one ends a commit, none waits,
// or Buf or Lens is full; the commit's writer is read as it arrives.
//
//go:nosplit
//go:norace
func (q *WatchReader) read(fd int) (count int, errno syscall.Errno) {
	rest := q.Buf
	for count < MaxDatagrams && len(rest) >= Datagram {
		r, _, e := syscall.RawSyscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&rest[0])), Datagram, unix.MSG_DONTWAIT|unix.MSG_TRUNC, 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return count, e
		}
		// MSG_TRUNC: netlink returns the datagram's whole length.
		n, cut := int(r), false
		if n > Datagram {
			n, cut = Datagram, true
		}
		if n < 0 || n > len(rest) {
			n = len(rest)
		}
		q.Lens[count], q.Cut[count] = n, cut
		count++
		pid := genPID(rest[:n])
		rest = rest[n:]
		if pid > 0 {
			if pid != q.last && q.prefix != nil && q.budget() {
				q.last = pid
				q.Writer.PID = pid
				q.readFile(pid, statLeaf, &q.Writer.Stat)
				q.readFile(pid, cgroupLeaf, &q.Writer.Cgroup)
				q.readFile(pid, statLeaf, &q.Writer.Stat2)
				q.Writer.Parent.N = 0
				if st := &q.Writer.Stat; st.Err == 0 && st.N < len(st.buf) {
					if ppid := ppidOf(st.buf[:st.N]); ppid > 0 {
						q.readFile(ppid, statLeaf, &q.Writer.Parent)
					}
				}
			}
			return count, 0
		}
	}
	return count, 0
}

// budget takes one of the second's MaxWriterReads, false when none is
// left.
//
//go:nosplit
//go:norace
func (q *WatchReader) budget() bool {
	if now := monotonic(); now-q.second >= int64(time.Second) {
		q.second, q.reads = now, 0
	}
	if q.reads >= MaxWriterReads {
		return false
	}
	q.reads++
	return true
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
