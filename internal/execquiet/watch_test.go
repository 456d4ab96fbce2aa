package execquiet

import (
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// nftMessage is one nf_tables netlink message of type typ (subsystem and
// message) holding attrs.
func nftMessage(typ uint16, attrs ...[]byte) []byte {
	ne := binary.NativeEndian
	b := make([]byte, unix.NLMSG_HDRLEN+nfgenHdrLen)
	ne.PutUint16(b[4:], typ)
	for _, a := range attrs {
		b = append(b, a...)
	}
	ne.PutUint32(b, uint32(len(b)))
	return b
}

// attr is one netlink attribute, padded.
func attr(typ uint16, v []byte) []byte {
	b := make([]byte, nlaHdrLen, nlaHdrLen+len(v)+3)
	binary.NativeEndian.PutUint16(b, uint16(nlaHdrLen+len(v)))
	binary.NativeEndian.PutUint16(b[2:], typ)
	b = append(b, v...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

// newGen is a commit's end as nf_tables announces it: generation, pid,
// command.
func newGen(pid uint32) []byte {
	return nftMessage(nftNewGen, attr(1, be32(7)), attr(nftaGenProcPID, be32(pid)), attr(3, []byte("iptables-nft\x00")))
}

func TestGenPID(t *testing.T) {
	rule := nftMessage(10<<8|6, attr(1, []byte("filter\x00")))
	cut := newGen(4242)
	binary.NativeEndian.PutUint32(cut, uint32(len(cut)+4))
	badAttr := nftMessage(nftNewGen, attr(1, be32(7)))
	binary.NativeEndian.PutUint16(badAttr[unix.NLMSG_HDRLEN+nfgenHdrLen:], 200)
	for _, c := range []struct {
		name string
		b    []byte
		want int
	}{
		{"a rule, then the commit's end", append(append([]byte{}, rule...), newGen(4242)...), 4242},
		{"the end alone", newGen(1), 1},
		{"no end", rule, 0},
		{"an end without its pid", nftMessage(nftNewGen, attr(1, be32(7))), 0},
		{"a pid of the wrong length", nftMessage(nftNewGen, attr(nftaGenProcPID, []byte{0, 0, 1})), 0},
		{"another subsystem's message 15", nftMessage(11<<8|15, attr(nftaGenProcPID, be32(9))), 0},
		{"a message longer than the datagram", cut, 0},
		{"an attribute longer than its message", badAttr, 0},
		{"a header cut short", newGen(5)[:10], 0},
		{"empty", nil, 0},
	} {
		if got := genPID(c.b); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

func TestPPIDOf(t *testing.T) {
	for stat, want := range map[string]int{
		"42 (sh) S 7 42 42 0 -1":       7,
		"42 (a) b) (c) R 1234 1 1 0":   1234,
		"42 (sh) S 7":                  7,
		"42 (sh) S x 42":               0,
		"42 (sh) S 12x 42":             0,
		"42 (sh) S ":                   0,
		"42 sh S 7 42":                 0,
		"42 (sh)":                      0,
		"42 (sh) S 99999999999999 1 1": 0,
		"":                             0,
	} {
		if got := ppidOf([]byte(stat)); got != want {
			t.Errorf("ppidOf(%q) = %d, want %d", stat, got, want)
		}
	}
}

// watchSet is an epoll set holding two datagram sockets standing for
// monitors' (ids 1 and 2: send writes to them) and a wake-up eventfd (no
// id), with a WatchReader over it.
type watchSet struct {
	t    *testing.T
	q    *WatchReader
	in   [2][2]int
	wake int
}

func newWatchSet(t *testing.T) *watchSet { return newWatchSetIDs(t, 1, 2) }

// newWatchSetIDs is newWatchSet with the two monitors' ids given.
func newWatchSetIDs(t *testing.T, ids ...int32) *watchSet {
	t.Helper()
	w := &watchSet{t: t}
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(epfd) })
	add := func(fd int, id int32) {
		t.Helper()
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd), Pad: id}
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
			t.Fatal(err)
		}
	}
	for i := range w.in {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]) })
		w.in[i] = [2]int{fds[0], fds[1]}
		add(fds[0], ids[i])
	}
	if w.wake, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(w.wake) })
	add(w.wake, 0)
	w.q = NewWatchReader(epfd, "/proc")
	return w
}

// send writes b to monitor id's socket.
func (w *watchSet) send(id int, b []byte) {
	w.t.Helper()
	if _, err := unix.Write(w.in[id-1][1], b); err != nil {
		w.t.Fatal(err)
	}
}

func (w *watchSet) start() chan WatchResult {
	ch := make(chan WatchResult, 1)
	go func() { ch <- w.q.Wait() }()
	return ch
}

func (w *watchSet) within(ch chan WatchResult) WatchResult {
	w.t.Helper()
	select {
	case res := <-ch:
		return res
	case <-time.After(5 * time.Second):
		w.t.Fatal("Wait did not return within 5s")
	}
	return WatchResult{}
}

// wait runs one Wait, which must read exactly the monitors ids (in any
// order); it returns their reads.
func (w *watchSet) wait(ids ...int) []*SocketRead {
	w.t.Helper()
	res := w.within(w.start())
	var reads []*SocketRead
	var got []int
	for i := range res.Reads {
		r := &w.q.Reads[i]
		reads = append(reads, r)
		got = append(got, int(w.q.Events[r.Event].Pad))
	}
	slices.Sort(got)
	if !slices.Equal(got, ids) {
		w.t.Fatalf("Wait read monitors %v, want %v (%v)", got, ids, res)
	}
	return reads
}

// String is r in a test's message, without its files' buffers.
func (r *SocketRead) String() string {
	return fmt.Sprintf("{event %d, datagrams %d+%d at %d, foreign %d, errno %v, writer %d}", r.Event, r.First, r.Count, r.Off, r.Foreign, r.Errno, r.Writer.PID)
}

// TestWatchWait runs the quiet wait for real, in its system call, over
// datagram sockets standing for monitors': it reads up to the commit's
// end and no further, reads the writer's files before it returns, reads
// one process committing in a flood once, leaves a descriptor whose
// event has no id alone, and the runtime goes on meanwhile.
func TestWatchWait(t *testing.T) {
	if raceDetector && testing.CoverMode() != "" {
		t.Skip("coverage of this package under the race detector: its counters need a P")
	}
	w := newWatchSet(t)
	q := w.q
	self := os.Getpid()

	// Blocked in its system call: the runtime collects meanwhile. Then a
	// descriptor without an id is returned, never read.
	ch := w.start()
	collects(t)
	if q.Gen()%2 != 1 {
		t.Errorf("Gen %d while Wait runs, want odd", q.Gen())
	}
	if _, err := unix.Write(w.wake, binary.NativeEndian.AppendUint64(nil, 1)); err != nil {
		t.Fatal(err)
	}
	if res := w.within(ch); res.N != 1 || res.Reads != 0 || q.Events[0].Fd != int32(w.wake) {
		t.Errorf("wake: %v", res)
	}
	if q.Gen()%2 != 0 {
		t.Errorf("Gen %d after Wait, want even", q.Gen())
	}
	var drain [8]byte
	_, _ = unix.Read(w.wake, drain[:])

	// Read up to the commit's end, its writer with it.
	rule := nftMessage(10<<8|6, attr(1, []byte("filter\x00")))
	later := nftMessage(10<<8 | 6)
	w.send(1, rule)
	w.send(1, newGen(uint32(self)))
	w.send(1, later)
	r := w.wait(1)[0]
	if r.First != 0 || r.Off != 0 || r.Count != 2 || r.Errno != 0 || q.Lens[0] != len(rule) || q.Lens[1] != len(newGen(0)) || q.Cut[0] || q.Cut[1] {
		t.Errorf("read %v, lens %v: want the two datagrams up to the commit's end", r, q.Lens[:2])
	}
	if r.Writer.PID != self || !strings.HasPrefix(string(r.Writer.Stat.Bytes()), itoa(self)+" (") ||
		r.Writer.Cgroup.N == 0 || string(r.Writer.Stat2.Bytes()) == "" {
		t.Errorf("writer %d read: stat %q, cgroup %d bytes", r.Writer.PID, r.Writer.Stat.Bytes(), r.Writer.Cgroup.N)
	}
	if p := string(r.Writer.Parent.Bytes()); !strings.HasPrefix(p, itoa(os.Getppid())+" (") {
		t.Errorf("parent's stat %q, want pid %d's", p, os.Getppid())
	}

	// The datagram after the end was left; then none waits (EAGAIN).
	if r = w.wait(1)[0]; r.Count != 1 || q.Lens[0] != len(later) || r.Errno != unix.EAGAIN || r.Writer.PID != 0 {
		t.Errorf("the datagram left: %v", r)
	}
	// The same writer of the same monitor within SameWriter is read once;
	// another monitor's is read.
	w.send(1, newGen(uint32(self)))
	if r = w.wait(1)[0]; r.Count != 1 || r.Writer.PID != 0 {
		t.Errorf("the same writer again: %v, read again", r)
	}
	w.send(2, newGen(uint32(self)))
	if r = w.wait(2)[0]; r.Writer.PID != self {
		t.Errorf("the same writer in another monitor: %v, not read", r)
	}
	q.budgets[1].lastAt -= int64(SameWriter)
	w.send(1, newGen(uint32(self)))
	if r = w.wait(1)[0]; r.Writer.PID != self {
		t.Errorf("the same writer past SameWriter: %v, not read", r)
	}

	// Past MaxMonitorReads in a second, that monitor's writers are not
	// read, the other's are; past MaxWriterReads, nobody's; the next
	// second they are again.
	q.budgets[1].reads = MaxMonitorReads
	w.send(1, newGen(uint32(os.Getppid())))
	if r = w.wait(1)[0]; r.Writer.PID != 0 {
		t.Errorf("past the monitor's budget: %v, read", r)
	}
	w.send(2, newGen(uint32(os.Getppid())))
	if r = w.wait(2)[0]; r.Writer.PID != os.Getppid() {
		t.Errorf("the other monitor: %v, not read", r)
	}
	q.reads = MaxWriterReads
	q.budgets[2].last = 0
	w.send(2, newGen(uint32(os.Getppid())))
	if r = w.wait(2)[0]; r.Writer.PID != 0 {
		t.Errorf("past every monitor's budget: %v, read", r)
	}
	q.second -= int64(2 * time.Second)
	q.budgets[1].second -= int64(2 * time.Second)
	w.send(1, newGen(uint32(os.Getppid())))
	if r = w.wait(1)[0]; r.Writer.PID != os.Getppid() {
		t.Errorf("the next second: %v, want %d read", r, os.Getppid())
	}

	// Two sockets ready are both read, each up to its commit's end with
	// its writer; the next Wait starts with the event after the first
	// one read (epoll orders the events itself).
	q.budgets = [budgetSlots]budget{}
	w.send(1, rule)
	w.send(1, newGen(uint32(self)))
	w.send(2, newGen(uint32(os.Getppid())))
	reads := w.wait(1, 2)
	byID := map[int32]*SocketRead{}
	for _, r := range reads {
		byID[q.Events[r.Event].Pad] = r
	}
	if a, b := byID[1], byID[2]; a.Count != 2 || a.Writer.PID != self || b.Count != 1 || b.Writer.PID != os.Getppid() ||
		reads[1].First != reads[0].Count || reads[1].Off != q.Lens[0]+q.Lens[1]*(reads[0].Count-1) {
		t.Errorf("two sockets: %v, %v", reads[0], reads[1])
	}
	w.send(1, later)
	w.send(2, later)
	turn := (reads[0].Event + 1) % 2
	if reads = w.wait(1, 2); reads[0].Event != turn || reads[0].Count != 1 || reads[1].Count != 1 {
		t.Errorf("the next turn: %v, %v, want event %d first", reads[0], reads[1], turn)
	}
	// A datagram longer than Datagram is read cut.
	w.send(1, append(newGen(1), make([]byte, Datagram)...))
	if r = w.wait(1)[0]; r.Count != 1 || !q.Cut[0] || q.Lens[0] != Datagram {
		t.Errorf("a long datagram: %v, cut %v, len %d", r, q.Cut[0], q.Lens[0])
	}
}

// TestWatchWaitForeign: a datagram another process sent to the monitor's
// port (any process with CAP_NET_ADMIN in the pod's network namespace
// can) is dropped, a forged commit's end with it, and a flood of them
// ends the read at MaxDatagrams.
func TestWatchWaitForeign(t *testing.T) {
	if raceDetector && testing.CoverMode() != "" {
		t.Skip("coverage of this package under the race detector: its counters need a P")
	}
	mon, port := userSocket(t)
	forger, _ := userSocket(t)
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(epfd) })
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, mon, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(mon), Pad: 1}); err != nil {
		t.Fatal(err)
	}
	q := NewWatchReader(epfd, "/proc")
	forge := func(n int) {
		t.Helper()
		for range n {
			forge(t, forger, port, newGen(uint32(os.Getpid())))
		}
	}
	forge(1)
	res := q.Wait()
	if r := q.Reads[0]; res.Reads != 1 || r.Count != 1 || r.Foreign != 1 || q.Lens[0] != 0 || r.Writer.PID != 0 || r.Errno != unix.EAGAIN {
		t.Errorf("a forged commit's end: %v, read %v, len %d", res, &r, q.Lens[0])
	}
	forge(MaxDatagrams + 8)
	res = q.Wait()
	if r := q.Reads[0]; res.Reads != 1 || r.Count != MaxDatagrams || r.Foreign != MaxDatagrams || r.Errno != 0 {
		t.Errorf("a flood of them: %v, read %v", res, &r)
	}
	if res = q.Wait(); q.Reads[0].Foreign != 8 {
		t.Errorf("the rest: %v, read %v", res, &q.Reads[0])
	}
}

// TestWatchWaitSharedSlot: two monitors whose ids share a budget slot
// share its MaxMonitorReads (neither resets the other's count), while the
// same writer is skipped only within one monitor.
func TestWatchWaitSharedSlot(t *testing.T) {
	if raceDetector && testing.CoverMode() != "" {
		t.Skip("coverage of this package under the race detector: its counters need a P")
	}
	w := newWatchSetIDs(t, 1, 1+budgetSlots)
	q := w.q
	// A second that does not end during the test, whatever the load.
	q.budgets[1].second = monotonic() + int64(time.Hour)
	q.second = q.budgets[1].second
	read := 0
	for i := range MaxMonitorReads + 6 {
		id := []int{1, 1 + budgetSlots}[i%2]
		w.send(i%2+1, newGen(uint32(os.Getpid())))
		if r := w.wait(id)[0]; r.Writer.PID != 0 {
			read++
		}
	}
	if read != MaxMonitorReads {
		t.Errorf("%d writers read by two monitors sharing a slot, want %d", read, MaxMonitorReads)
	}
}
