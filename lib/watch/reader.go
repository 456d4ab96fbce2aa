package watch

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iptables-alerter/iptables-alerter/internal/execquiet"
)

// The reader: one OS thread reads every monitor's socket and describes each
// commit's writer, at the real-time priority SCHED_FIFO 1 when the process
// may take it (CAP_SYS_NICE). Why: a one-shot iptables exits, and its
// parent reaps it, within a few hundred microseconds of its commit; a
// reader woken through Go's netpoller at normal priority found 8 to 22 of
// 100 such writers gone on a loaded two-core machine, a thread of its own
// at SCHED_FIFO 0 of 100, loaded or not (its wake preempts the writer
// before it can exit). One thread for all monitors, not one each: a
// thousand watched pods cost one thread, and its work per commit is bounded
// (a few /proc reads per distinct writer and window, Options.MaxWriters).
// It never waits for a caller: a monitor's queue that is full turns into
// an Overrun (see Monitor.enqueue). Its wait is quiet
// (execquiet.WatchReader): it reads up to four ready sockets, each up to a
// commit's end, and those writers' files, before it returns to the Go
// runtime, whose processors the agent's own work may hold for
// milliseconds (a collection's idle workers, scans); the other ready
// sockets, and what follows a commit's end, are read after, in Go.
type reader struct {
	epfd int
	// wake (an eventfd) wakes the thread: to end once ending is set (its
	// last monitor closed), else to leave a quiet wait (quiesce).
	wake   int
	ending atomic.Bool
	done   chan struct{}
	// q is the thread's quiet wait: it reads ready sockets up to a
	// commit's end, and the writers' files under root, before the thread
	// returns to Go (internal/execquiet).
	q    *execquiet.WatchReader
	root string

	// mu is held while one monitor's socket is read: Close waits for it
	// before its socket can close.
	mu   sync.Mutex
	mons map[uint32]*Monitor
}

var (
	// readerMu guards cur and users: the reader runs while monitors are
	// open, and ends (its fds closed) when the last one closes.
	readerMu sync.Mutex
	cur      *reader
	users    int
	lastID   uint32
	// priority is why the newest reader thread runs at normal priority;
	// nil when it has SCHED_FIFO.
	priority error
)

// wakeID is the eventfd's id; monitors' ids start at 1.
const wakeID = 0

// budgetSlots is internal/execquiet's count of writer-read budgets, kept
// by monitor id modulo it (unexported there): register gives open
// monitors ids in distinct slots while it can.
const budgetSlots = 256

// perTurn bounds the datagrams read from one socket before the next ready
// socket gets its turn: a pod flooding announcements delays no other.
const perTurn = 64

// Realtime tells whether the reader thread runs at real-time priority, and
// if not why (no CAP_SYS_NICE, a cgroup without real-time runtime):
// without it a writer that exits at once is more often gone before it is
// read. Known once a monitor was opened.
func Realtime() (bool, error) {
	readerMu.Lock()
	defer readerMu.Unlock()
	return priority == nil, priority
}

// CheckRealtime tells whether this process may run the reader at real-time
// priority, before any monitor opens: it tries on a thread of its own, which
// ends with it.
func CheckRealtime() error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		ch <- realtime()
	}()
	return <-ch
}

// register adds m's socket to the reader, starting it for the first
// monitor.
func register(m *Monitor) error {
	readerMu.Lock()
	defer readerMu.Unlock()
	if cur == nil {
		r, err := startReader(m.opt.Proc)
		if err != nil {
			return err
		}
		cur = r
	}
	users++
	cur.mu.Lock()
	// Ids are 32 bits (an epoll event holds the socket and the id); one
	// wrapped round to a monitor still open is skipped. The quiet wait
	// keeps the writers' read budgets by id modulo budgetSlots, so while
	// a slot is free an id whose slot an open monitor holds is skipped
	// too: else, after pods came and went, two open pods would share one
	// budget, and one committing from ever new processes would spend the
	// other's.
	var held [budgetSlots]bool
	for id := range cur.mons {
		held[id%budgetSlots] = true
	}
	spare := len(cur.mons) < budgetSlots
	for lastID++; lastID == wakeID || cur.mons[lastID] != nil || spare && held[lastID%budgetSlots]; lastID++ {
	}
	m.id = lastID
	cur.mons[m.id] = m
	cur.mu.Unlock()
	if err := unix.EpollCtl(cur.epfd, unix.EPOLL_CTL_ADD, m.fd, event(m.fd, m.id)); err != nil {
		cur.mu.Lock()
		delete(cur.mons, m.id)
		cur.mu.Unlock()
		release()
		return fmt.Errorf("watch nftables monitor: %w", err)
	}
	return nil
}

// unregister takes m's socket from the reader: once it returns, the
// reader no longer reads it, and the socket may close. The last monitor
// ends the reader.
func unregister(m *Monitor) {
	readerMu.Lock()
	defer readerMu.Unlock()
	cur.mu.Lock()
	if cur.mons[m.id] == m {
		delete(cur.mons, m.id)
		_ = unix.EpollCtl(cur.epfd, unix.EPOLL_CTL_DEL, m.fd, nil)
	}
	cur.mu.Unlock()
	cur.quiesce()
	release()
}

// quiesce returns once no quiet wait that began before it runs: one may
// hold an event of a socket taken out of the epoll set since, and read
// it (a closed socket's number may be another's by then). Not under mu.
func (r *reader) quiesce() {
	g := r.q.Gen()
	if g%2 == 0 {
		return
	}
	r.poke()
	for r.q.Gen() == g {
		time.Sleep(20 * time.Microsecond)
	}
}

// poke wakes the thread: an eventfd takes an 8-byte count, any non-zero
// one makes it readable.
func (r *reader) poke() {
	_, _ = unix.Write(r.wake, binary.NativeEndian.AppendUint64(nil, 1))
}

// release drops one user, ending the reader after the last; readerMu held.
func release() {
	if users--; users > 0 {
		return
	}
	cur.ending.Store(true)
	cur.poke()
	<-cur.done
	cur = nil
}

// event is a socket's epoll event: the descriptor the quiet wait reads,
// and the monitor's id (execquiet.WatchReader).
func event(fd int, id uint32) *unix.EpollEvent {
	return &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd), Pad: int32(id)}
}

func eventID(ev unix.EpollEvent) uint32 { return uint32(ev.Pad) }

func startReader(root string) (*reader, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("watch nftables monitors: %w", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("watch nftables monitors: %w", err)
	}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wake, event(wake, wakeID)); err != nil {
		unix.Close(epfd)
		unix.Close(wake)
		return nil, fmt.Errorf("watch nftables monitors: %w", err)
	}
	r := &reader{epfd: epfd, wake: wake, done: make(chan struct{}), q: execquiet.NewWatchReader(epfd, root), root: root, mons: map[uint32]*Monitor{}}
	started := make(chan error, 1)
	go r.run(started)
	priority = <-started
	return r, nil
}

// run is the reader's thread: locked to it and never unlocked, so the
// runtime ends the thread (and its priority) with the goroutine.
func (r *reader) run(started chan<- error) {
	runtime.LockOSThread()
	started <- realtime()
	defer close(r.done)
	defer unix.Close(r.wake)
	defer unix.Close(r.epfd)
	// The Go path reads into the quiet wait's buffer once the datagrams
	// the wait read there are taken.
	buf := r.q.Buf[:datagram]
	for {
		res := r.q.Wait()
		if res.Failed != 0 {
			// Only a bad epoll fd fails here, which this reader owns.
			panic(fmt.Sprintf("watch: epoll_wait: %v", res.Failed))
		}
		r.mu.Lock()
		for i := range res.Reads {
			rd := &r.q.Reads[i]
			if m := r.mons[eventID(r.q.Events[rd.Event])]; m != nil && !m.arrived(r.q, rd, r.root) {
				r.failed(m)
			}
		}
		for _, ev := range r.q.Events[:res.N] {
			id := eventID(ev)
			if id == wakeID {
				var b [8]byte
				_, _ = unix.Read(r.wake, b[:])
				if r.ending.Load() {
					r.mu.Unlock()
					return
				}
				continue
			}
			if m := r.mons[id]; m != nil && !m.receive(buf) {
				r.failed(m)
			}
		}
		r.mu.Unlock()
	}
}

// failed stops reading m's socket, which failed; Close unregisters. Under
// mu.
func (r *reader) failed(m *Monitor) {
	delete(r.mons, m.id)
	_ = unix.EpollCtl(r.epfd, unix.EPOLL_CTL_DEL, m.fd, nil)
}

// realtime puts the calling thread at SCHED_FIFO 1, the lowest real-time
// priority (above every normal process, below every real-time one the
// node runs), reset in any child (none is made).
func realtime() error {
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 1, Flags: unix.SCHED_FLAG_RESET_ON_FORK}
	if err := unix.SchedSetAttr(0, &attr, 0); err != nil {
		return fmt.Errorf("set the watch's reader to SCHED_FIFO: %w", err)
	}
	return nil
}

// RealtimeThread raises the calling, locked thread to the reader's
// priority (SCHED_FIFO 1, reset on fork); the exec watch's reader
// (lib/execwatch) races one-shot tools the same way.
func RealtimeThread() error { return realtime() }
