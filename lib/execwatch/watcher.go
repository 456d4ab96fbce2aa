package execwatch

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/iptables-alerter/iptables-alerter/internal/execquiet"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/netns"
	"github.com/iptables-alerter/iptables-alerter/lib/watch"
)

// Defaults for Options' zero values.
const (
	// DefaultAckTimeout: the kernel answers a listen request at once, or
	// never (a requester outside the initial pid or user namespace).
	DefaultAckTimeout = time.Second
	// DefaultMaxPending bounds the tools running at once that the watch
	// keeps: a node runs a handful; past it the oldest is given up
	// (Stats.Evicted) and reported without a status.
	DefaultMaxPending = 256
	// readBuffer is the socket's kernel receive buffer: about 25,000 exec
	// and exit messages of a burst.
	readBuffer = 2 << 20
)

// ErrNoAck: the kernel did not answer the listen request; it ignores one
// from a process outside the initial pid and user namespaces (a container
// without hostPID). Events may still arrive (they do while anything else
// listens): they are never taken as the watch working.
var ErrNoAck = errors.New("the process events connector did not acknowledge the listen request: the agent is not in the host's pid namespace (hostPID) or user namespace")

// Options configure a Watcher.
type Options struct {
	// HostProc is the host's /proc: its 1/ns/net is the initial network
	// namespace, where the connector's kernel socket lives, tried when
	// the caller's own network namespace has no connector (a container
	// without hostNetwork). Never a stand-in's: the caller's own is tried
	// first, and a namespace without the connector refuses the socket.
	HostProc string
	// Proc is where the pids the kernel names are read ("/proc" for ""):
	// the caller's own /proc, which shows the host's processes exactly
	// when the kernel answers the listen request (the caller is in the
	// initial pid namespace).
	Proc string
	// Done receives every tool run that ended (or was given up:
	// Command.Exited false). Called on the watch's reader thread: it must
	// not block.
	Done func(Command)
	// Missed receives every tool run that ended before it could be read
	// (reason MissGone), or whose binary could not be (MissLongPath): its argv is at least the process's name, its
	// Writer what of it could still be read. Called on the reader thread:
	// it must not block.
	Missed func(cmd Command, reason string)
	// Failed hears that the socket failed (an error but ENOBUFS, which is
	// an overrun): the reader has stopped, and no command is seen until
	// the watch is opened again. Called once, on the reader thread.
	Failed func(error)
	// AckTimeout and MaxPending: DefaultAckTimeout and DefaultMaxPending
	// for 0.
	AckTimeout time.Duration
	MaxPending int
}

// Command is one run of an iptables tool.
type Command struct {
	PID int
	// Argv is the command line, bounded (MaxArgs, MaxArg); ArgvCut tells
	// that something was left out.
	Argv    []string
	ArgvCut bool
	// Exe is the binary's path, Backend its backend.
	Exe     string
	Backend string
	Shape   Shape
	// Netns is the inode of the tool's network namespace; 0 when it
	// could not be read.
	Netns uint64
	// Writer places the process: its parent and cgroup (container or
	// systemd unit), as the nftables watch's writers.
	Writer *findings.Writer
	// Started is when the kernel made the exec's event (when the tool
	// began, not when the watch got to it: the netns reuse check compares
	// it with a sandbox's making); Ended when its exit arrived.
	Started, Ended time.Time
	// Exited: the exit was seen, and Code or Signal is its status.
	Exited       bool
	Code, Signal int
	// NoNetAdmin: the process ran without CAP_NET_ADMIN in its effective
	// set (read at its exec; false when unknown), as in a container the
	// runtime grants none (CRI-O's and containerd's default): the kernel
	// refuses it every table, with the status of missing kernel support
	// (iptables-legacy 3, iptables-nft 4: "Permission denied (you must be
	// root)").
	NoNetAdmin bool

	// start is the process's start time as its exec was read (stat's
	// field 22), "" when unread: after an overrun its pid may be another
	// process's (recheck).
	start string
}

// Stats counts the watch's work since Open.
type Stats struct {
	// Execs counts exec events; Vanished those whose process was gone
	// before its binary could be read (what it was is not known);
	// Candidates those whose binary is a tool's; Tools the tool runs read
	// whole.
	Execs, Vanished, Candidates, Tools uint64
	// Missed counts candidates gone before they could be read: a tool
	// that ran unseen (Options.Missed heard of each).
	Missed uint64
	// Evicted counts tool runs given up without a status: past
	// MaxPending, or reaped while an overrun lost their exit (their pid
	// may have run another program since).
	Evicted uint64
	// Overruns counts the kernel dropping messages (ENOBUFS): execs and
	// exits were lost (the pending commands are looked at again: recheck).
	Overruns uint64
}

// Watcher listens to the connector until Close.
type Watcher struct {
	opts Options
	conn *netlink.Conn
	fd   int
	wake int
	done chan struct{}
	// realtime is why the reader runs at normal priority, nil when it has
	// SCHED_FIFO.
	realtime error
	// buffer is the socket's receive buffer, bytes.
	buffer int
	// filtered is whether the kernel took the event filter (execs and
	// exits only).
	filtered bool

	mu      sync.Mutex
	pending map[int]*Command
	order   []int
	// recent are the last runs that ended, oldest first (Lookup).
	recent []Command

	execs, vanished, candidates, tools, missed, evicted, overruns atomic.Uint64
	closeOnce                                                     sync.Once
}

// Open listens to the connector in HostProc's pid 1 network namespace and
// waits for the kernel's acknowledgement: ErrNoAck when none came within
// AckTimeout, another error when the kernel refused (EPERM without
// CAP_NET_ADMIN) or the socket could not be opened.
func Open(opts Options) (*Watcher, error) {
	if opts.AckTimeout <= 0 {
		opts.AckTimeout = DefaultAckTimeout
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = DefaultMaxPending
	}
	if opts.Done == nil {
		opts.Done = func(Command) {}
	}
	if opts.Missed == nil {
		opts.Missed = func(Command, string) {}
	}
	if opts.Proc == "" {
		opts.Proc = "/proc"
	}
	conn, err := dial(opts.HostProc)
	if err != nil {
		return nil, err
	}
	if err := kernelOnly(conn); err != nil {
		conn.Close()
		return nil, err
	}
	if err := attachFilter(conn, true); err != nil {
		conn.Close()
		return nil, err
	}
	w := &Watcher{opts: opts, conn: conn, done: make(chan struct{}), pending: map[int]*Command{}}
	if err := w.listen(); err != nil {
		conn.Close()
		return nil, err
	}
	if err := attachFilter(conn, false); err != nil {
		w.ignore()
		conn.Close()
		return nil, err
	}
	if err := w.start(); err != nil {
		w.ignore()
		conn.Close()
		return nil, err
	}
	return w, nil
}

// dial opens the connector's socket: in the caller's network namespace
// when the connector is there (the initial one: the systemd unit, a
// hostNetwork pod), else in HostProc's pid 1's, on a thread switched there
// for the socket() call only (netlink.Config.NetNS).
func dial(hostProc string) (*netlink.Conn, error) {
	conn, err := netlink.Dial(netlinkConnector, &netlink.Config{Groups: cnIdxProc})
	if err == nil || hostProc == "" {
		if err != nil {
			return nil, fmt.Errorf("open the process events connector: %w", err)
		}
		return conn, nil
	}
	own := err
	h, err := netns.Open(filepath.Join(hostProc, "1", "ns", "net"))
	if err != nil {
		return nil, fmt.Errorf("open the process events connector: %v here, and the initial network namespace: %w", own, err)
	}
	defer h.Close()
	conn, err = netlink.Dial(netlinkConnector, &netlink.Config{Groups: cnIdxProc, NetNS: h.Fd()})
	if err != nil {
		return nil, fmt.Errorf("open the process events connector in %s/1/ns/net: %w", hostProc, err)
	}
	return conn, nil
}

// kernelOnly connects the socket to the kernel (port 0): it then takes no
// process's unicast (the kernel refuses it), while the connector's
// multicast events still arrive. A process with CAP_NET_ADMIN in the
// host's network namespace can send to the group too, so the reader
// still drops what the kernel did not send.
func kernelOnly(conn *netlink.Conn) error {
	rc, err := conn.SyscallConn()
	if err != nil {
		return fmt.Errorf("open the process events connector: %w", err)
	}
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cerr = unix.Connect(int(fd), &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
	}); err != nil {
		return fmt.Errorf("open the process events connector: %w", err)
	}
	if cerr != nil {
		return fmt.Errorf("connect the process events socket to the kernel: %w", cerr)
	}
	return nil
}

// listen asks for events and waits for the answer. The ack is multicast
// to every listener, so it is told apart by the request's ack number
// (random), answered plus one; its seq is not the request's (send_msg
// numbers every message per CPU, acks too, on this 6.18 kernel).
func (w *Watcher) listen() error {
	if err := w.listenFor(0); err != nil {
		return err
	}
	if filterKernel(release()) {
		// Then the filter, on the socket that listens already (the
		// kernel counts it as one listener, and one ignore undoes both).
		// Its ack is an event of kind none, which the filter itself
		// drops (measured here on 6.18), so none is waited for; a kernel
		// older than 6.6 ignores the request and sends everything.
		msg := netlink.Message{Header: netlink.Header{Type: netlink.Done}, Data: listenRequest(0, 0, mcastListen, wanted)}
		if _, err := w.conn.Send(msg); err == nil {
			w.filtered = true
		}
	}
	return nil
}

// listenFor sends one listen request for events (0: every event) and waits
// for its ack.
func (w *Watcher) listenFor(events uint32) error {
	var r [8]byte
	if _, err := rand.Read(r[:]); err != nil {
		return err
	}
	seq, ack := binary.NativeEndian.Uint32(r[:]), binary.NativeEndian.Uint32(r[4:])&0x7fffffff
	msg := netlink.Message{Header: netlink.Header{Type: netlink.Done}, Data: listenRequest(seq, ack, mcastListen, events)}
	if _, err := w.conn.Send(msg); err != nil {
		return fmt.Errorf("send the listen request: %w", err)
	}
	deadline := time.Now().Add(w.opts.AckTimeout)
	if err := w.conn.SetReadDeadline(deadline); err != nil {
		return err
	}
	defer w.conn.SetReadDeadline(time.Time{})
	for {
		msgs, err := w.conn.Receive()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return ErrNoAck
		}
		if err != nil {
			if errors.Is(err, unix.ENOBUFS) {
				continue
			}
			return fmt.Errorf("read the connector: %w", err)
		}
		for _, m := range msgs {
			ev, err := Decode(m.Data)
			if err != nil || ev.Kind != KindAck || ev.Ack != ack+1 {
				continue
			}
			if ev.Err != 0 {
				return fmt.Errorf("the process events connector refused to listen: %w", unix.Errno(ev.Err))
			}
			return nil
		}
		if time.Now().After(deadline) {
			return ErrNoAck
		}
	}
}

// ignore undoes the listen request: kernels before 6.6 count listeners
// only by these requests, and keep announcing every exec to nobody.
func (w *Watcher) ignore() {
	data := listenRequest(0, 0, mcastIgnore, 0)
	msg := netlink.Message{Header: netlink.Header{Type: netlink.Done, Length: uint32(unix.NLMSG_HDRLEN + len(data))}, Data: data}
	if w.conn != nil {
		_, _ = w.conn.Send(msg)
		return
	}
	// The reader's duplicate, once the original is closed (start).
	if b, err := msg.MarshalBinary(); err == nil {
		_ = unix.Sendto(w.fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
	}
}

// start runs the reader on a thread of its own. It reads a duplicate of
// the socket with poll and recvfrom, not through Go's netpoller, so that
// at real-time priority its wake preempts the tool that just executed:
// the tool's /proc is read before it can end (see lib/watch's reader).
func (w *Watcher) start() error {
	rc, err := w.conn.SyscallConn()
	if err != nil {
		return err
	}
	var derr error
	if err := rc.Control(func(fd uintptr) {
		w.fd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return err
	}
	if derr != nil {
		return derr
	}
	// SO_RCVBUFFORCE (CAP_NET_ADMIN, which listening needs) is not capped
	// by net.core.rmem_max (about 200 KiB by default).
	if unix.SetsockoptInt(w.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, readBuffer) != nil {
		_ = unix.SetsockoptInt(w.fd, unix.SOL_SOCKET, unix.SO_RCVBUF, readBuffer)
	}
	// The kernel doubles the value asked for (its bookkeeping): half of
	// it is the room for messages.
	if n, err := unix.GetsockoptInt(w.fd, unix.SOL_SOCKET, unix.SO_RCVBUF); err == nil {
		w.buffer = n / 2
	}
	if w.wake, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		unix.Close(w.fd)
		return err
	}
	ready := make(chan struct{})
	go w.read(ready)
	<-ready
	// The original socket is registered with Go's netpoller, which would
	// wake one of the runtime's threads at every message for nobody: the
	// duplicate is all the reader needs.
	w.conn.Close()
	w.conn = nil
	return nil
}

// Realtime tells whether the reader runs at real-time priority, and if
// not why (no CAP_SYS_NICE): tools are then more often gone before read.
func (w *Watcher) Realtime() error { return w.realtime }

// ReadBuffer is the socket's receive buffer for messages, in bytes: a
// burst of execs and exits larger than it is an overrun (Stats.Overruns).
func (w *Watcher) ReadBuffer() int { return w.buffer }

// Filtered reports whether the kernel sends only execs and exits (6.6 and
// later), rather than every process event.
func (w *Watcher) Filtered() bool { return w.filtered }

// Close stops listening and ends the reader; commands still running are
// dropped unreported.
func (w *Watcher) Close() error {
	w.closeOnce.Do(func() {
		var one [8]byte
		binary.NativeEndian.PutUint64(one[:], 1)
		_, _ = unix.Write(w.wake, one[:])
		<-w.done
		w.ignore()
		unix.Close(w.fd)
		unix.Close(w.wake)
	})
	return nil
}

// Stats gives the counters.
func (w *Watcher) Stats() Stats {
	return Stats{Execs: w.execs.Load(), Vanished: w.vanished.Load(), Candidates: w.candidates.Load(), Tools: w.tools.Load(),
		Missed: w.missed.Load(), Evicted: w.evicted.Load(), Overruns: w.overruns.Load()}
}

// Lookup gives the tool run with that pid, running or among the last
// maxRecent ended (the nftables watch joins a commit's writer to it, up to
// its debounce window after the commit: the tool has often ended then).
func (w *Watcher) Lookup(pid int) (Command, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c, ok := w.pending[pid]; ok {
		return *c, true
	}
	for i := len(w.recent) - 1; i >= 0; i-- {
		if w.recent[i].PID == pid {
			return w.recent[i], true
		}
	}
	return Command{}, false
}

// maxRecent bounds the ended runs Lookup finds.
const maxRecent = 32

// recentHog is the index in w.recent of the oldest run of the owner
// (shareOf) holding most of them, the oldest of all where none holds
// more than one: a pod ending tools in parallel loops does not push
// another pod's run out before the nftables watch joins it to its commit;
// w.mu held, w.recent full.
func (w *Watcher) recentHog() int {
	return oldestOfMost(len(w.recent), func(i int) string { return shareOf(&w.recent[i]) })
}

func (w *Watcher) read(ready chan<- struct{}) {
	defer close(w.done)
	runtime.LockOSThread()
	// The thread ends with the reader: its priority goes with it.
	w.realtime = watch.RealtimeThread()
	close(ready)
	q := execquiet.NewReader(w.fd, w.wake, w.opts.Proc)
	// overrun is when the first overrun not rechecked yet came.
	var overrun time.Time
	for {
		if q.ReportDrained && time.Since(overrun) > time.Second {
			q.ReportDrained = false
			w.recheck()
		}
		// One system call while the messages need nothing of Go
		// (internal/execquiet). The pending tools change only here, on
		// the reader.
		q.Pending = w.order
		res, off, n, dismissed := q.Wait()
		w.execs.Add(dismissed)
		switch res {
		case execquiet.Stop:
			if q.Errno != 0 && w.opts.Failed != nil {
				w.opts.Failed(fmt.Errorf("process events socket: %w", q.Errno))
			}
			return
		case execquiet.Overrun:
			// The kernel says so before the datagrams queued ahead of
			// the drop, the exits of pending commands among them: look
			// at the pending once those are read (Drained), or a
			// second on if a storm keeps the socket full.
			w.overruns.Add(1)
			if !q.ReportDrained {
				q.ReportDrained, overrun = true, time.Now()
			}
		case execquiet.Drained:
			q.ReportDrained = false
			w.recheck()
		case execquiet.Message:
			w.datagram(q.Buf[off:n], &q.Snap)
		}
	}
}

// datagram handles the messages of one datagram.
func (w *Watcher) datagram(b []byte, snap *execquiet.Snapshot) {
	msgs, err := syscall.ParseNetlinkMessage(b)
	if err != nil {
		return
	}
	for _, m := range msgs {
		ev, err := Decode(m.Data)
		if err != nil {
			continue
		}
		switch ev.Kind {
		case KindExec:
			w.exec(ev.TGID, ev.Mono, snap)
		case KindExit:
			// Exits come per thread; the process's status is its
			// leader's.
			if ev.PID == ev.TGID {
				w.exit(ev.TGID, ev.Status)
			}
		}
	}
}

// exec reads a new program as its event arrives: one readlink of its binary
// for any exec (one syscall, no fd: cheaper than reading /proc/PID/comm,
// BenchmarkDecide), the rest only for a tool, its netns first (without it
// the command is placed nowhere). A program that ended before its binary
// could be read is a zombie until its parent reaps it, whose name still
// reads: a tool's name makes it a missed tool run (Options.Missed), never
// a silent one; only a process reaped too stays unknown (Stats.Vanished).
// snap is what the quiet path read of the process as its exec arrived,
// used instead of /proc when it is this pid's; mono is the event's kernel
// time (Event.Mono).
func (w *Watcher) exec(pid int, mono int64, snap *execquiet.Snapshot) {
	w.execs.Add(1)
	root := w.opts.Proc
	p := procOf(root, pid, snap)
	if p.snap != nil {
		// Once: a later exec of this pid is another program.
		defer func() { snap.PID = 0 }()
	}
	path, err := p.exe()
	long := errors.Is(err, unix.ENAMETOOLONG)
	c := ""
	if err != nil {
		// Ended already, no ptrace access to it (EACCES: the agent
		// lacks CAP_SYS_PTRACE), or a path too long to read whole: its
		// name decides, then its argv[0].
		var cerr error
		if c, cerr = p.comm(); cerr != nil {
			// Reaped already: whatever it ran is not known.
			w.vanished.Add(1)
			w.forget(p)
			return
		}
		if !commCandidate(c) {
			w.forget(p)
			return
		}
		if errors.Is(err, unix.ENOENT) {
			// A zombie: its command line and namespaces are gone, and
			// its parent reaps it any moment; what still places it, its
			// cgroup, is read at once (miss), or the run is the node's
			// loss, not its pod's.
			w.candidates.Add(1)
			w.miss(p, &Command{PID: pid, Started: eventTime(mono)}, c)
			return
		}
	} else if _, ok := toolOf(path); !ok {
		// A tool that executes something else is no longer one.
		w.forget(p)
		return
	}
	w.candidates.Add(1)
	cmd := &Command{PID: pid, Exe: path, Started: eventTime(mono)}
	cmd.Netns, _ = p.netns()
	argv, cut, err := p.cmdline()
	if err != nil {
		w.miss(p, cmd, c)
		return
	}
	cmd.Argv, cmd.ArgvCut = argv, cut != 0
	if path == "" {
		path = cmd.Argv[0]
	}
	backend, ok := toolOf(path)
	if !ok && long {
		// Its name is a tool's, its binary's path too long to read and
		// its argv[0] no tool's (a path longer than MaxArg is cut): a
		// missed run, not a silent one. (Unread for want of ptrace
		// access, a wrapper script named as a tool has the
		// interpreter's argv[0]: no tool, as it runs one.)
		w.missWhy(p, cmd, c, MissLongPath)
		return
	}
	if !ok {
		w.forget(p)
		return
	}
	if c == "" {
		if c, err = p.comm(); err != nil {
			w.miss(p, cmd, c)
			return
		}
	}
	cmd.NoNetAdmin = p.noNetAdmin()
	cmd.Backend = backend
	cmd.Shape = ParseRun(path, cmd.Argv, cut&argsLeftOut != 0)
	cmd.Writer = p.writer(c)
	cmd.start = p.start()
	w.tools.Add(1)
	w.add(cmd)
}

// eventTime is the wall-clock time of a kernel event made at mono
// (CLOCK_MONOTONIC ns): the reader may get to it milliseconds later under
// load, and a sandbox made in between must not look older than the
// command. Now when mono is unknown or ahead of the clock. The monotonic
// clock is read before the wall clock: a preemption between the two reads
// then makes the time later, never earlier than the command, which
// madeAfter would take for a command of a netns made after it (a command
// run right after its netns was made, placed nowhere).
func eventTime(mono int64) time.Time {
	var ts unix.Timespec
	if mono <= 0 || unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		return time.Now()
	}
	now := time.Now()
	ago := ts.Nano() - mono
	if ago < 0 {
		return now
	}
	return now.Add(-time.Duration(ago))
}

// Options.Missed's reasons: a tool run that ended before it could be
// read, or one whose binary's path is too long to read and whose argv[0]
// names no tool (its name does).
const (
	MissGone     = "gone before read"
	MissLongPath = "binary path too long"
)

// miss gives up a tool run that ended before it was read whole: counted
// and handed to Options.Missed with what could be read (its name, and its
// cgroup, which a zombie keeps: the container that ran it). p is its
// process (forget).
func (w *Watcher) miss(p proc, cmd *Command, name string) { w.missWhy(p, cmd, name, MissGone) }

// missWhy is miss for another reason.
func (w *Watcher) missWhy(p proc, cmd *Command, name, why string) {
	w.missed.Add(1)
	w.forget(p)
	// The quiet path's snapshot first, where it read the process: a
	// zombie reaped since has no /proc left to name it or its pod.
	if name == "" {
		name, _ = p.comm()
	}
	if name != "" {
		cmd.Writer = p.writer(name)
		if cmd.Argv == nil {
			cmd.Argv = []string{name}
		}
	}
	w.opts.Missed(*cmd, why)
}

// add makes cmd pending. A full table gives up the oldest command of the
// owner (shareOf) with the most pending, not the oldest of all: a pod starting tools
// that never end (a sleep named iptables) must not push every other pod's
// running commands, and their failures, out.
func (w *Watcher) add(cmd *Command) {
	w.mu.Lock()
	var evicted, replaced *Command
	if old, ok := w.pending[cmd.PID]; ok {
		replaced = old
	} else {
		if len(w.order) >= w.opts.MaxPending {
			evicted = w.drop(w.hog())
		}
		w.order = append(w.order, cmd.PID)
	}
	w.pending[cmd.PID] = cmd
	w.mu.Unlock()
	if evicted != nil {
		w.giveUp(evicted)
	}
	if replaced != nil {
		w.replaced(replaced, cmd.start)
	}
}

// giveUp reports a pending command that will get no status: counted
// (Stats.Evicted) and handed to Done with Exited false, never dropped
// silently.
func (w *Watcher) giveUp(c *Command) {
	w.evicted.Add(1)
	w.opts.Done(*c)
}

// replaced handles a pending command whose pid executed another program,
// whose process started at start ("" when unread). The same process
// (the start times agree) became that program: the command has no
// status of its own. Another process (its start time another, or not
// known) took the pid after the command ended unheard (an overrun lost
// its exit before recheck ran): the command is given up, as recheck
// does, not silently replaced.
func (w *Watcher) replaced(old *Command, start string) {
	if old.start != "" && old.start == start {
		return
	}
	w.giveUp(old)
}

// recheck looks at the pending commands after an overrun, whose lost
// messages may be their exits: a command that ended is a zombie until
// reaped, whose status /proc still gives; one already reaped is given up
// without a status (Done, Exited false), never kept waiting for an exit
// that will not come. A pid whose process started at another time than
// the command's is another process's (the command's exit lost, the
// command reaped, the pid taken since): given up too, never kept for that
// process's exit nor given its status.
func (w *Watcher) recheck() {
	w.mu.Lock()
	type run struct {
		pid   int
		start string
	}
	runs := make([]run, 0, len(w.order))
	for _, pid := range w.order {
		runs = append(runs, run{pid, w.pending[pid].start})
	}
	w.mu.Unlock()
	for _, r := range runs {
		pid, start := r.pid, r.start
		raw, now, err := zombieStatus(w.opts.Proc, pid)
		switch {
		case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) || start != "" && now != "" && now != start:
			if c := w.take(pid); c != nil {
				w.giveUp(c)
			}
		case err == nil:
			w.exit(pid, raw)
		}
	}
}

// take removes pid's pending command.
func (w *Watcher) take(pid int) *Command {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.drop(slices.Index(w.order, pid))
}

// drop removes the pending command at w.order[i] (none for -1); w.mu
// held.
func (w *Watcher) drop(i int) *Command {
	if i < 0 {
		return nil
	}
	pid := w.order[i]
	c := w.pending[pid]
	delete(w.pending, pid)
	w.order = append(w.order[:i], w.order[i+1:]...)
	return c
}

// shareOf is whose a pending command is, for the table's fair share: its
// container (the first the cgroup names under kubepods, which a pod
// nesting cgroups of its own cannot change), or its host unit, else its
// netns. Not the netns first: a pod allowed user namespaces can run each
// of its never-ending tools in a fresh netns of its own (unshare -rn),
// each then holding one, and the full table would give up other pods'
// commands at random.
func shareOf(c *Command) string {
	if w := c.Writer; w != nil && w.ContainerID != "" {
		return "container " + w.ContainerID
	}
	if w := c.Writer; w != nil && w.Unit != "" {
		return "unit " + w.Unit
	}
	return "netns " + strconv.FormatUint(c.Netns, 10)
}

// hog is the index in w.order of the oldest pending command of the owner
// with the most; w.mu held, the table not empty. Counted here, when the
// table is full, not kept up at every add and drop.
func (w *Watcher) hog() int {
	return oldestOfMost(len(w.order), func(i int) string { return shareOf(w.pending[w.order[i]]) })
}

// oldestOfMost is the first of n entries, oldest first, whose owner
// (owner(i)) holds the most of them.
func oldestOfMost(n int, owner func(i int) string) int {
	count := map[string]int{}
	most := 0
	for i := range n {
		k := owner(i)
		if count[k]++; count[k] > most {
			most = count[k]
		}
	}
	for i := range n {
		if count[owner(i)] == most {
			return i
		}
	}
	return 0
}

// forget drops the pending command of p's pid, which executed another
// program: that command's status is not its (replaced). Every exec that
// is no tool's comes here: p's start time is read only for a pid that
// has a pending command.
func (w *Watcher) forget(p proc) {
	if c := w.take(p.pid); c != nil {
		w.replaced(c, p.start())
	}
}

func (w *Watcher) exit(pid int, raw uint32) {
	c := w.take(pid)
	if c == nil {
		return
	}
	c.Exited, c.Ended = true, time.Now()
	c.Code, c.Signal = ExitStatus(raw)
	w.mu.Lock()
	if len(w.recent) == maxRecent {
		i := w.recentHog()
		w.recent = append(w.recent[:i], w.recent[i+1:]...)
	}
	w.recent = append(w.recent, *c)
	w.mu.Unlock()
	w.opts.Done(*c)
}
