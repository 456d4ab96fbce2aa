package watch

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/iptables-alerter/iptables-alerter/internal/execquiet"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// nfnlgrpNftables is NFNLGRP_NFTABLES, the group nf_tables announces
// committed changes on.
const nfnlgrpNftables = 7

// Defaults for Options' zero values.
const (
	// DefaultReadBuffer is the kernel's receive buffer: about 4,000 rule
	// announcements. Kernel memory is charged only while announcements
	// wait, and an overrun costs a full scan, never a miss.
	DefaultReadBuffer = 1 << 20
	// DefaultQueue bounds the Changes waiting for the caller's Take; past
	// it an Overrun stands for the rest (the reader never waits). An
	// idle monitor holds none; a full queue about 20 KB with writers.
	DefaultQueue = 64
	// DefaultWriterWindow and DefaultMaxWriters bound the /proc reads a
	// monitor makes: each distinct writer (pid and command) is described
	// once a window, and at most DefaultMaxWriters of them; a pod
	// committing in a flood costs a few reads, not a few per commit.
	DefaultWriterWindow = 50 * time.Millisecond
	DefaultMaxWriters   = 8
	// datagram is the reader's one buffer: nf_tables batches
	// announcements into datagrams of at most a page or two, and a longer
	// one is seen (MSG_TRUNC) and taken as touching iptables' tables.
	datagram = execquiet.Datagram
)

// Change is one commit (or, with Overrun, an unknown number of them).
type Change struct {
	// Gen is the generation the commit made (NFTA_GEN_ID).
	Gen uint32
	// PID (in the host's pid namespace) and Comm are the committing
	// process as the kernel names it; Comm is the process's choice.
	PID  int
	Comm string
	// Tables are the iptables-shaped tables the commit touched, "family
	// name", sorted: those read, where an announcement could not be read
	// whole (the change is delivered then, unsure, with what was read).
	Tables []string
	// Objects counts the objects the commit announced, of any table.
	Objects int
	// Overrun: the kernel dropped announcements (ENOBUFS), or the caller
	// fell behind (Options.Queue); what changed is not known, only that
	// something may have.
	Overrun bool
	// Writer is Options.Writer's description of PID, read as the commit's
	// end arrived; nil without Options.Writer. Past Options.MaxWriters in
	// a window, only PID and Comm.
	Writer *findings.Writer
}

// Options tune a Monitor; the zero value takes the defaults.
type Options struct {
	ReadBuffer int
	Queue      int
	// Writer, when set, describes the committing process; called by the
	// reader thread as soon as the commit's end arrives, and only for
	// commits that are delivered. It must not wait for the monitor's
	// caller. f holds the process's files when the reader read them as the
	// commit's end arrived (Proc), else nil: read /proc now (Proc.Describe).
	// f's bytes are the reader's buffers, valid only during the call.
	Writer func(pid int, comm string, f *Files) *findings.Writer
	// Proc, when set, is the /proc the commits' pids live in (the
	// host's): the reader reads the writer's stat, cgroup and stat again,
	// and its parent's stat, there the moment a commit's end arrives,
	// before it returns to the Go runtime, which may keep it waiting for
	// a processor while the writer exits (within execquiet's budgets:
	// MaxMonitorReads, MaxWriterReads, SameWriter). One root a process:
	// a monitor whose Proc is not that of the monitor that started the
	// reader gets f nil (its reads spent all the same); a root longer
	// than execquiet.MaxRoot reads nothing there.
	Proc string
	// WriterWindow and MaxWriters bound Writer's calls (see
	// DefaultWriterWindow).
	WriterWindow time.Duration
	MaxWriters   int
	// Notify, when set, is called by the reader thread, in place of a
	// receive on Ready, whenever Take has something to give. It runs
	// while the reader holds its lock: it may Take, never Close (nor
	// open a monitor), nor wait for anything that does.
	Notify func(*Monitor)
}

// Monitor listens to one network namespace's nftables commits. It holds
// no goroutine of its own: the reader thread queues, the caller takes when
// Ready or Options.Notify says (a watched pod costs no goroutine).
type Monitor struct {
	// fd is the monitor's socket, a duplicate of the one netlink.Dial
	// made in the namespace (see Open).
	fd   int
	id   uint32
	opt  Options
	once sync.Once

	// The reader thread's state of this socket (under reader.mu).
	cur       commit
	described []described
	window    time.Time
	// read is the writer the reader's quiet wait read, while the
	// datagrams it read with it are taken (arrived).
	read *readWriter
	// heard is the newest generation a commit made that the reader took
	// (any table's), with bit 32 set once one was: see Heard.
	heard atomic.Uint64

	// What waits for the caller: the reader appends, Take hands over.
	qmu     sync.Mutex
	queue   []Change
	overrun bool
	failed  bool
	closed  bool
	ready   chan struct{}
}

// Files are a writer's /proc files read as it was seen (Proc.Describe):
// stat, cgroup and stat again, and its parent's stat; nil for one not read
// whole (the parent's is then read at Describe).
type Files struct{ Stat, Cgroup, Again, Parent []byte }

// FilesOf are the files of a quiet path's snapshot (internal/execquiet);
// a stat or cgroup file longer than Proc reads counts as unread, as there.
func FilesOf(s *execquiet.Snapshot) *Files {
	whole := func(f *execquiet.File) []byte {
		if f.Err != 0 || f.N > execquiet.MaxProc {
			return nil
		}
		return f.Bytes()
	}
	f := &Files{Stat: whole(&s.Stat), Cgroup: whole(&s.Cgroup), Again: whole(&s.Stat2)}
	if s.Parent.N > 0 {
		f.Parent = whole(&s.Parent)
	}
	return f
}

// readWriter is a writer's pid and files as the quiet wait read them.
type readWriter struct {
	pid   int
	files *Files
}

// described is one writer read in the current window.
type described struct {
	pid    int
	comm   string
	writer findings.Writer
}

// Open starts a monitor in the network namespace fd refers to (which need
// not stay open: the socket holds the namespace until Close).
func Open(fd int, opt Options) (*Monitor, error) {
	if opt.ReadBuffer <= 0 {
		opt.ReadBuffer = DefaultReadBuffer
	}
	if opt.Queue <= 0 {
		opt.Queue = DefaultQueue
	}
	if opt.WriterWindow <= 0 {
		opt.WriterWindow = DefaultWriterWindow
	}
	if opt.MaxWriters <= 0 {
		opt.MaxWriters = DefaultMaxWriters
	}
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: fd})
	if err != nil {
		return nil, fmt.Errorf("open nftables monitor: %w", err)
	}
	if err := c.JoinGroup(nfnlgrpNftables); err != nil {
		c.Close()
		return nil, fmt.Errorf("join nftables group: %w", err)
	}
	if err := setReadBuffer(c, opt.ReadBuffer); err != nil {
		c.Close()
		return nil, err
	}
	rc, err := c.SyscallConn()
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("open nftables monitor: %w", err)
	}
	// The reader thread reads the socket itself, never through the
	// runtime's poller. The dialled socket is registered with that poller,
	// which would wake one of the runtime's threads at every commit burst
	// for nobody: a duplicate, the same socket (its group and buffer
	// kept), is all the reader needs, and the original closes now.
	sock, derr := -1, error(nil)
	if err := rc.Control(func(fd uintptr) { sock, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil || derr != nil {
		c.Close()
		if sock >= 0 {
			unix.Close(sock)
		}
		return nil, fmt.Errorf("open nftables monitor: %w", errors.Join(err, derr))
	}
	c.Close()
	// Connected to the kernel (port 0), the socket takes no process's
	// unicast (the kernel refuses it); the group's announcements still
	// arrive, and a process with CAP_NET_ADMIN in the namespace can
	// send to the group too, so the reader still drops what the kernel
	// did not send.
	if err := unix.Connect(sock, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(sock)
		return nil, fmt.Errorf("open nftables monitor: %w", err)
	}
	m := &Monitor{fd: sock, opt: opt, ready: make(chan struct{}, 1)}
	if err := register(m); err != nil {
		unix.Close(sock)
		return nil, err
	}
	return m, nil
}

// setReadBuffer sets the kernel's receive buffer: SO_RCVBUFFORCE (with
// CAP_NET_ADMIN, which the agent has) is not capped by net.core.rmem_max,
// whose default (about 200 KiB) a restore of a few hundred rules fills.
func setReadBuffer(c *netlink.Conn, n int) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("set monitor receive buffer: %w", err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, n)
	}); err != nil {
		return fmt.Errorf("set monitor receive buffer: %w", err)
	}
	if serr == nil {
		return nil
	}
	if err := c.SetReadBuffer(n); err != nil {
		return fmt.Errorf("set monitor receive buffer: %w", err)
	}
	return nil
}

// Ready receives when Take has something to give: changes, an overrun,
// or the socket's failure. One receive may stand for many changes. Never
// with Options.Notify.
func (m *Monitor) Ready() <-chan struct{} { return m.ready }

// Take hands over the commits that touched iptables-shaped tables, oldest
// first, an Overrun last for whatever could not wait; open is false once
// the socket failed (the changes before it are in this last Take) or the
// monitor was closed: nothing more will come.
func (m *Monitor) Take() (changes []Change, open bool) {
	m.qmu.Lock()
	defer m.qmu.Unlock()
	if m.closed {
		return nil, false
	}
	changes, m.queue = m.queue, nil
	if m.overrun {
		changes = append(changes, Change{Overrun: true})
		m.overrun = false
	}
	return changes, !m.failed
}

// Close stops the reading and closes the socket, releasing the namespace.
func (m *Monitor) Close() error {
	var err error
	m.once.Do(func() {
		unregister(m)
		m.qmu.Lock()
		m.closed, m.queue = true, nil
		m.qmu.Unlock()
		// After unregister: the reader no longer reads it.
		err = unix.Close(m.fd)
	})
	return err
}

// commit gathers one commit's announcements until its NEWGEN: a count and
// the iptables-shaped table names, never the objects.
type commit struct {
	objects int
	tables  []string
	// unsure: an announcement was cut or malformed, so whether the commit
	// touched iptables' tables is not known: taken as if it did.
	unsure bool
}

func (c *commit) add(m message) {
	c.objects++
	if m.xtTable != "" && !slices.Contains(c.tables, m.xtTable) {
		c.tables = append(c.tables, m.xtTable)
	}
}

// receive reads what waits on the socket into buf, at most perTurn
// datagrams (the reader comes back while more waits); on the reader
// thread. False when the socket failed (readFailed): an error other
// than ENOBUFS (an Overrun), EAGAIN (nothing more waits) or EINTR ends the
// monitor, the caller seeing Changes closed and reopening.
func (m *Monitor) receive(buf []byte) bool {
	for range perTurn {
		n, _, flags, from, err := unix.Recvmsg(m.fd, buf, nil, unix.MSG_DONTWAIT)
		if err != nil {
			if m.readFailed(err) {
				return false
			}
			if errors.Is(err, unix.ENOBUFS) {
				continue
			}
			return true
		}
		if !fromKernel(from) {
			continue
		}
		m.datagram(buf[:n], flags&unix.MSG_TRUNC != 0)
	}
	return true
}

// fromKernel tells whether a datagram came from the kernel (port 0): any
// process with CAP_NET_ADMIN in the pod's network namespace can send one
// to the monitor's group (a unicast is refused: the socket is connected
// to the kernel), a forged commit naming any pid among them.
func fromKernel(from unix.Sockaddr) bool {
	sa, ok := from.(*unix.SockaddrNetlink)
	return ok && sa.Pid == 0
}

// arrived takes the datagrams the reader's quiet wait read from this
// socket, with the writer it read (when read under the monitor's Proc);
// false when the socket failed, as receive. The wait dropped the
// datagrams another process sent.
func (m *Monitor) arrived(q *execquiet.WatchReader, rd *execquiet.SocketRead, root string) bool {
	// A read the quiet wait could not make (a file of a stand-in /proc
	// that is a link, which it does not follow) is made again at
	// Describe; a writer gone by then is gone either way.
	if w := &rd.Writer; w.PID != 0 && m.opt.Proc == root && w.Stat.Err == 0 && w.Cgroup.Err == 0 {
		m.read = &readWriter{pid: w.PID, files: FilesOf(w)}
		defer func() { m.read = nil }()
	}
	off := rd.Off
	for i := rd.First; i < rd.First+rd.Count && i < len(q.Lens); i++ {
		if n := q.Lens[i]; n > 0 {
			m.datagram(q.Buf[off:off+n], q.Cut[i])
			off += n
		}
	}
	if rd.Errno == 0 {
		return true
	}
	return !m.readFailed(rd.Errno)
}

// readFailed takes a read's error: true when the socket failed (every
// error but EAGAIN, EINTR and ENOBUFS, which is an Overrun).
func (m *Monitor) readFailed(err error) bool {
	switch {
	case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EINTR):
		return false
	case errors.Is(err, unix.ENOBUFS):
		// The commit in progress lost announcements; the overrun
		// stands for it and for whatever else was dropped.
		m.cur = commit{}
		m.enqueue(Change{Overrun: true})
		return false
	}
	m.qmu.Lock()
	m.failed = true
	m.qmu.Unlock()
	m.signal()
	return true
}

// datagram takes one datagram read, cut when the kernel's was longer.
func (m *Monitor) datagram(b []byte, cut bool) {
	if cut {
		m.cur.unsure = true
	}
	if ok := parse(b, m.message); !ok {
		m.cur.unsure = true
	}
}

// message takes one parsed message: an object counts into the commit, a
// NEWGEN ends it, delivered if it touched iptables' tables.
func (m *Monitor) message(msg message) {
	if !msg.gen {
		m.cur.add(msg)
		return
	}
	if len(m.cur.tables) > 0 || m.cur.unsure {
		ch := Change{Gen: msg.id, PID: int(msg.pid), Comm: msg.comm, Tables: m.cur.tables, Objects: m.cur.objects}
		slices.Sort(ch.Tables)
		ch.Writer = m.writer(ch.PID, ch.Comm)
		m.enqueue(ch)
	}
	// After the change was handed over (Notify runs within enqueue).
	m.heard.Store(1<<32 | uint64(msg.id))
	m.cur = commit{}
}

// Heard is the newest generation of a commit the monitor took, of any
// table, and whether it took one since it opened. With Options.Notify,
// every change up to it has been given to Notify: a look whose generation
// is newer holds commits not heard yet (the reader behind, a commit's end
// still on its way), whose writers are not known.
func (m *Monitor) Heard() (gen uint32, ok bool) {
	h := m.heard.Load()
	return uint32(h), h>>32 != 0
}

// writer describes the committing process, once per distinct writer and
// window, at most MaxWriters a window.
func (m *Monitor) writer(pid int, comm string) *findings.Writer {
	if m.opt.Writer == nil {
		return nil
	}
	if now := time.Now(); now.Sub(m.window) >= m.opt.WriterWindow {
		m.described, m.window = m.described[:0], now
	}
	for _, d := range m.described {
		if d.pid == pid && d.comm == comm {
			w := d.writer
			return &w
		}
	}
	if len(m.described) >= m.opt.MaxWriters {
		return &findings.Writer{PID: pid, Comm: comm}
	}
	var f *Files
	if m.read != nil && m.read.pid == pid {
		f = m.read.files
	}
	w := m.opt.Writer(pid, comm, f)
	if w == nil {
		return nil
	}
	m.described = append(m.described, described{pid: pid, comm: comm, writer: *w})
	return w
}

// enqueue queues ch for the caller without waiting: past Queue changes
// waiting, one Overrun stands for every later one until the caller took
// the queue.
func (m *Monitor) enqueue(ch Change) {
	m.qmu.Lock()
	switch {
	case m.overrun:
	case ch.Overrun || len(m.queue) >= m.opt.Queue:
		m.overrun = true
	default:
		m.queue = append(m.queue, ch)
	}
	m.qmu.Unlock()
	m.signal()
}

func (m *Monitor) signal() {
	if m.opt.Notify != nil {
		m.opt.Notify(m)
		return
	}
	select {
	case m.ready <- struct{}{}:
	default:
	}
}
