package execquiet

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// raceDetector: built with -race (race_test.go).
var raceDetector bool

// message is one netlink message holding a connector event.
func message(what uint32, pid, tgid int, status uint32) []byte {
	ne := binary.NativeEndian
	data := make([]byte, ProcEventHdr+12)
	ne.PutUint32(data, what)
	ne.PutUint32(data[ProcEventHdr:], uint32(pid))
	ne.PutUint32(data[ProcEventHdr+4:], uint32(tgid))
	ne.PutUint32(data[ProcEventHdr+8:], status)
	cn := make([]byte, CnMsgLen, CnMsgLen+len(data))
	ne.PutUint32(cn[0:], CnIdxProc)
	ne.PutUint32(cn[4:], CnValProc)
	ne.PutUint16(cn[16:], uint16(len(data)))
	cn = append(cn, data...)
	m := make([]byte, unix.NLMSG_HDRLEN, unix.NLMSG_HDRLEN+len(cn))
	ne.PutUint32(m, uint32(unix.NLMSG_HDRLEN+len(cn)))
	ne.PutUint16(m[4:], unix.NLMSG_DONE)
	return append(m, cn...)
}

// toolNamed runs sleep under a tool's name, ended with the test.
func toolNamed(t *testing.T, name string) int {
	t.Helper()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep")
	}
	bin := filepath.Join(t.TempDir(), name)
	data, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// Its exe names the copy once it has executed.
	for deadline := time.Now().Add(5 * time.Second); ; {
		if l, err := os.Readlink("/proc/" + itoa(cmd.Process.Pid) + "/exe"); err == nil && filepath.Base(l) == name {
			return cmd.Process.Pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never executed", name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func itoa(v int) string {
	b := make([]byte, 20)
	return string(b[:putUint(b, 0, uint64(v))])
}

func TestDismiss(t *testing.T) {
	self := os.Getpid()
	tool := toolNamed(t, "iptables-nft")
	gone := 1 << 30 // above pid_max: no such process
	for _, c := range []struct {
		name    string
		root    string
		pending []int
		msgs    [][]byte
		off     int // index of the first message left to Go; len(msgs) for none
		execs   uint64
	}{
		{"a non-tool's exec", "/proc", nil, [][]byte{message(ProcEventExec, self, self, 0)}, 1, 1},
		{"a tool's exec", "/proc", nil, [][]byte{message(ProcEventExec, self, self, 0), message(ProcEventExec, tool, tool, 0)}, 1, 1},
		{"an exec whose binary cannot be read", "/proc", nil, [][]byte{message(ProcEventExec, gone, gone, 0)}, 0, 0},
		{"a pending tool executing anything", "/proc", []int{self}, [][]byte{message(ProcEventExec, self, self, 0)}, 0, 0},
		{"no root", "", nil, [][]byte{message(ProcEventExec, self, self, 0)}, 0, 0},
		{"a root too long", "/" + string(make([]byte, MaxRoot)), nil, [][]byte{message(ProcEventExec, self, self, 0)}, 0, 0},
		{"exits of processes not pending and threads", "/proc", []int{7}, [][]byte{message(ProcEventExit, 5, 5, 0), message(ProcEventExit, 8, 7, 0)}, 2, 0},
		{"a pending tool's exit", "/proc", []int{3, 7}, [][]byte{message(ProcEventExit, 5, 5, 0), message(ProcEventExit, 7, 7, 256)}, 1, 0},
		{"an acknowledgement", "/proc", nil, [][]byte{message(ProcEventNone, 0, 0, 0)}, 0, 0},
		{"another event", "/proc", nil, [][]byte{message(1 /* fork */, 5, 5, 0)}, 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := NewReader(-1, -1, c.root)
			q.Pending = c.pending
			var b []byte
			offs := []int{}
			for _, m := range c.msgs {
				offs = append(offs, len(b))
				b = append(b, m...)
			}
			offs = append(offs, len(b))
			off, execs := q.dismiss(b)
			if off != offs[c.off] || execs != c.execs {
				t.Errorf("dismiss: offset %d, %d execs; want %d (message %d), %d", off, execs, offs[c.off], c.off, c.execs)
			}
			// A possible tool's exec is marked for its snapshot.
			if want := c.name == "a tool's exec"; (q.Snap.PID == tool) != want {
				t.Errorf("snapshot of pid %d, want one of the tool: %v", q.Snap.PID, want)
			}
		})
	}
}

func TestDismissMalformed(t *testing.T) {
	q := NewReader(-1, -1, "/proc")
	ok := message(ProcEventExit, 5, 5, 0)
	short := message(ProcEventExit, 5, 5, 0)
	binary.NativeEndian.PutUint16(short[unix.NLMSG_HDRLEN+16:], 200) // says more than it holds
	long := append([]byte(nil), ok...)
	binary.NativeEndian.PutUint32(long, 4096) // past the datagram
	for _, c := range []struct {
		name string
		b    []byte
		want int
	}{
		{"cut header", append(append([]byte(nil), ok...), 1, 2, 3), len(ok)},
		{"length past the datagram", append(append([]byte(nil), ok...), long...), len(ok)},
		{"event longer than its message", append(append([]byte(nil), ok...), short...), len(ok)},
		{"length below a header", []byte{4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0},
	} {
		if off, _ := q.dismiss(c.b); off != c.want {
			t.Errorf("%s: offset %d, want %d", c.name, off, c.want)
		}
	}
}

func TestPut(t *testing.T) {
	b := make([]byte, 12)
	n := put(b, 0, []byte("/proc/"))
	n = putUint(b, n, 4194304)
	if n != -1 {
		t.Errorf("13 bytes fit in 12: %d %q", n, b)
	}
	n = putUint(b, put(b, 0, []byte("/p/")), 4194304)
	n = put(b, n, []byte("/e"))
	if string(b[:n]) != "/p/4194304/e" {
		t.Errorf("got %q", b[:max(n, 0)])
	}
	if putUint(b, 0, 0) != 1 || b[0] != '0' {
		t.Errorf("zero: %q", b[:1])
	}
	if put(b, -1, nil) != -1 || putUint(b, -1, 1) != -1 || put(b, 13, nil) != -1 {
		t.Error("a failed put must stay failed")
	}
}

func TestBaseHolds(t *testing.T) {
	for path, want := range map[string]bool{
		"/usr/sbin/xtables-nft-multi":       true,
		"/usr/sbin/iptables":                true,
		"/usr/sbin/ebtables-legacy":         true,
		"/usr/sbin/ip6tables-restore":       true,
		"/usr/bin/bash":                     false,
		"/opt/tables/bin/sh":                false,
		"tables":                            true,
		"/usr/sbin/iptables-nft (deleted)":  true,
		"/usr/bin/table":                    false,
		"":                                  false,
		"/usr/local/bin/mytablesync-worker": true,
	} {
		if got := baseHolds([]byte(path), "tables"); got != want {
			t.Errorf("%q: %v, want %v", path, got, want)
		}
	}
}

// pair is a datagram socket pair standing in for the connector's socket,
// and an eventfd for stop.
func pair(t *testing.T) (q *Reader, send func(...[]byte), stop func()) {
	t.Helper()
	q, peer, stop := pairFD(t)
	send = func(msgs ...[]byte) {
		var b []byte
		for _, m := range msgs {
			b = append(b, m...)
		}
		if _, err := unix.Write(peer, b); err != nil {
			t.Fatal(err)
		}
	}
	return q, send, stop
}

// pairFD is pair with the peer's socket, for a test that sends its own way.
func pairFD(t *testing.T) (q *Reader, peer int, stop func()) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]); unix.Close(wake) })
	stop = func() {
		var one [8]byte
		binary.NativeEndian.PutUint64(one[:], 1)
		unix.Write(wake, one[:])
	}
	return NewReader(fds[0], wake, "/proc"), fds[1], stop
}

type waited struct {
	res       Result
	off, n    int
	dismissed uint64
}

func waitAsync(q *Reader) chan waited {
	ch := make(chan waited, 1)
	go func() {
		var w waited
		w.res, w.off, w.n, w.dismissed = q.Wait()
		ch <- w
	}()
	return ch
}

func within(t *testing.T, ch chan waited, d time.Duration) waited {
	t.Helper()
	select {
	case w := <-ch:
		return w
	case <-time.After(d):
		t.Fatalf("Wait did not return within %s", d)
	}
	return waited{}
}

// collects fails unless the runtime collects garbage three times within
// 10 s, while a Wait holds no P.
func collects(t *testing.T) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		for range 3 {
			_ = make([]byte, 1<<20)
			runtime.GC()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("garbage collection stalled while Wait had no P")
	}
}

// TestWait runs the quiet path for real, in its system call: what it dismisses,
// what it returns for, and that the Go runtime (a garbage collection, other
// goroutines, the race detector under make test) goes on meanwhile.
func TestWait(t *testing.T) {
	if raceDetector && testing.CoverMode() != "" {
		// The package's own coverage counters are atomic adds, calls
		// into the race detector that need a P (the package doc).
		t.Skip("coverage of this package under the race detector: its counters need a P")
	}
	self := os.Getpid()
	q, send, stop := pair(t)

	ch := waitAsync(q)
	sent := time.Now()
	send(message(ProcEventExec, self, self, 0), message(ProcEventExit, 9, 9, 0))
	send(message(ProcEventExec, self, self, 0))
	// Dismissed without a return: the runtime collects meanwhile.
	collects(t)
	var counted uint64
	select {
	case w := <-ch:
		// Only the count owed at PublishEvery, where a loaded machine's
		// collections took that long.
		if w.res != Publish || time.Since(sent) < PublishEvery-100*time.Millisecond {
			t.Fatalf("returned for dismissed messages: %+v", w)
		}
		counted = w.dismissed
		ch = waitAsync(q)
	case <-time.After(100 * time.Millisecond):
	}
	tool := message(ProcEventExec, 1<<30, 1<<30, 0)
	exit := message(ProcEventExit, 9, 9, 0)
	send(exit, tool)
	w := within(t, ch, 5*time.Second)
	if w.res != Message || w.off != len(exit) || w.n != len(exit)+len(tool) || counted+w.dismissed != 2 {
		t.Errorf("a message for Go: %+v (%d counted before), want Message at %d of %d, 2 dismissed", w, counted, len(exit), len(exit)+len(tool))
	}

	// Dismissed execs are counted back within PublishEvery, with nothing
	// else arriving.
	start := time.Now()
	ch = waitAsync(q)
	send(message(ProcEventExec, self, self, 0))
	w = within(t, ch, PublishEvery+5*time.Second)
	if w.res != Publish || w.dismissed != 1 {
		t.Errorf("publish: %+v", w)
	}
	if e := time.Since(start); e < PublishEvery-100*time.Millisecond {
		t.Errorf("published after %s, before PublishEvery", e)
	}

	ch = waitAsync(q)
	stop()
	if w := within(t, ch, 5*time.Second); w.res != Stop {
		t.Errorf("stop: %+v", w)
	}
}

// TestWaitStopsDuringFlood: with execs it dismisses queued faster than
// it drains them (each costs it an exe look-up), Wait still sees a stop
// (MaxRun); without the bound it read on until the flood ended.
func TestWaitStopsDuringFlood(t *testing.T) {
	if raceDetector && testing.CoverMode() != "" {
		t.Skip("coverage of this package under the race detector: its counters need a P")
	}
	q, peer, stop := pairFD(t)
	self := os.Getpid()
	// Datagrams as long as Wait reads, from two senders, so that the
	// queue (10 datagrams: net.unix.max_dgram_qlen, with room for them in
	// the send buffer) stays full while one of them is descheduled.
	if err := unix.SetsockoptInt(peer, unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20); err != nil {
		t.Fatal(err)
	}
	m := message(ProcEventExec, self, self, 0)
	b := bytes.Repeat(m, len(q.Buf)/len(m))
	var done atomic.Bool
	var flooding sync.WaitGroup
	for range 2 {
		flooding.Go(func() {
			for !done.Load() {
				if _, err := unix.SendmsgN(peer, b, nil, nil, unix.MSG_DONTWAIT); err != nil {
					runtime.Gosched() // the queue is full
				}
			}
		})
	}
	defer func() { done.Store(true); flooding.Wait() }()

	ch := waitAsync(q)
	time.Sleep(200 * time.Millisecond) // the flood under way
	stop()
	// A loaded machine may let PublishEvery pass first: a publish is a
	// return too, and the next Wait sees the stop.
	for range 3 {
		w := within(t, ch, 5*time.Second)
		if w.res == Stop {
			return
		}
		if w.res != Publish {
			t.Fatalf("during the flood: %+v, want Stop", w)
		}
		ch = waitAsync(q)
	}
	t.Fatal("no Stop in three returns during the flood")
}

// TestWaitForeign: an event another process sent to the socket's port
// (one with CAP_NET_ADMIN in the host's network namespace can) is
// dropped: a forged acknowledgement, which the Go path would take, is not
// returned; a flood of them holds the reader for MaxForeign receives at
// most before it polls again.
func TestWaitForeign(t *testing.T) {
	if raceDetector && testing.CoverMode() != "" {
		t.Skip("coverage of this package under the race detector: its counters need a P")
	}
	sock, port := userSocket(t)
	forger, _ := userSocket(t)
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(wake) })
	q := NewReader(sock, wake, "/proc")
	ch := waitAsync(q)
	forge(t, forger, port, message(ProcEventNone, 0, 0, 0))
	select {
	case w := <-ch:
		t.Fatalf("returned for a forged event: %+v", w)
	case <-time.After(200 * time.Millisecond):
	}
	if _, err := unix.Write(wake, binary.NativeEndian.AppendUint64(nil, 1)); err != nil {
		t.Fatal(err)
	}
	if w := within(t, ch, 5*time.Second); w.res != Stop {
		t.Errorf("stop: %+v", w)
	}

	// A flood of them ends a receive at MaxForeign, back to the poll
	// (which sees a stop), the rest still waiting.
	for range MaxForeign + 8 {
		forge(t, forger, port, message(ProcEventNone, 0, 0, 0))
	}
	if _, _, _, d, ret := q.receive(); ret || d != 0 {
		t.Errorf("a flood: receive returned %v with %d dismissed, want back to the poll", ret, d)
	}
	left := 0
	for {
		if _, _, err := unix.Recvfrom(sock, q.Buf, unix.MSG_DONTWAIT); err != nil {
			break
		}
		left++
	}
	if left != 8 {
		t.Errorf("%d datagrams left after a flood's receive, want 8", left)
	}
}

// userSocket is a NETLINK_USERSOCK socket bound to a port of its own.
func userSocket(t *testing.T) (fd int, port uint32) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_USERSOCK)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fd, sa.(*unix.SockaddrNetlink).Pid
}

// forge sends b from the socket fd to port, as a process would.
func forge(t *testing.T, fd int, port uint32, b []byte) {
	t.Helper()
	if err := unix.Sendto(fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Pid: port}); err != nil {
		if os.Geteuid() != 0 && errors.Is(err, unix.EPERM) {
			t.Skip("a netlink unicast needs root here")
		}
		t.Fatal(err)
	}
}

// The snapshot reads what the Go path would read of a live process.
func TestSnapshotOf(t *testing.T) {
	self := os.Getpid()
	s := SnapshotOf("/proc", self)
	exe, _ := os.Readlink("/proc/self/exe")
	cmdline, _ := os.ReadFile("/proc/self/cmdline")
	comm, _ := os.ReadFile("/proc/self/comm")
	cgroup, _ := os.ReadFile("/proc/self/cgroup")
	netns, _ := os.Readlink("/proc/self/ns/net")
	for name, c := range map[string]struct {
		f    *File
		want string
	}{"exe": {&s.Exe, exe}, "cmdline": {&s.Cmdline, string(cmdline)}, "comm": {&s.Comm, string(comm)}, "cgroup": {&s.Cgroup, string(cgroup)}, "ns/net": {&s.Netns, netns}} {
		if c.f.Err != 0 || string(c.f.Bytes()) != c.want {
			t.Errorf("%s: %q (%v), want %q", name, c.f.Bytes(), c.f.Err, c.want)
		}
	}
	if s.PID != self || s.Stat.Err != 0 || s.Stat2.Err != 0 || !strings.HasPrefix(string(s.Stat.Bytes()), itoa(self)+" (") {
		t.Errorf("pid %d stat %q (%v) again %v", s.PID, s.Stat.Bytes(), s.Stat.Err, s.Stat2.Err)
	}
	// status changes as the process runs; its capabilities do not.
	status, _ := os.ReadFile("/proc/self/status")
	capEff := func(b []byte) string {
		_, v, _ := strings.Cut(string(b), "\nCapEff:")
		v, _, _ = strings.Cut(v, "\n")
		return v
	}
	if s.Status.Err != 0 || capEff(s.Status.Bytes()) == "" || capEff(s.Status.Bytes()) != capEff(status) {
		t.Errorf("status: CapEff %q (%v), want %q", capEff(s.Status.Bytes()), s.Status.Err, capEff(status))
	}
	if s := SnapshotOf("/proc", 1<<30); s.PID != 0 {
		t.Errorf("a pid that is not: %+v", s.PID)
	}
	// A file larger than its buffer fills it: the caller tells it was cut.
	q := NewReader(-1, -1, "/proc")
	f := File{buf: make([]byte, 8)}
	q.readFile(self, cmdlineLeaf, &f)
	if f.N != 8 || f.Err != 0 {
		t.Errorf("cut read: %d bytes, %v", f.N, f.Err)
	}
	q.readFile(1<<30, cmdlineLeaf, &f)
	if f.N != 0 || f.Err != unix.ENOENT {
		t.Errorf("gone: %d bytes, %v", f.N, f.Err)
	}
}
