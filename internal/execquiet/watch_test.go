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

// watchSet is an epoll set holding datagram sockets standing for
// monitors' (send writes to the i-th, from 1) and a wake-up eventfd (no
// id), with a WatchReader over it.
type watchSet struct {
	t    *testing.T
	q    *WatchReader
	epfd int
	in   [][2]int
	wake int
}

func newWatchSet(t *testing.T) *watchSet { return newWatchSetIDs(t, 1, 2) }

// newWatchSetIDs is newWatchSet with a monitor a given id, in the order
// given.
func newWatchSetIDs(t *testing.T, ids ...int32) *watchSet {
	t.Helper()
	w := &watchSet{t: t}
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(epfd) })
	w.epfd = epfd
	for _, id := range ids {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]) })
		w.in = append(w.in, [2]int{fds[0], fds[1]})
		w.add(fds[0], id)
	}
	if w.wake, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(w.wake) })
	w.add(w.wake, 0)
	w.q = NewWatchReader(epfd, "/proc")
	return w
}

// add puts fd in the set as monitor id's socket (0: not one to read).
func (w *watchSet) add(fd int, id int32) {
	w.t.Helper()
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd), Pad: id}
	if err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		w.t.Fatal(err)
	}
}

// send writes b to the id-th socket (from 1).
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
	// its writer (TestWatchWaitTurns: more than MaxReads).
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
	if reads = w.wait(1, 2); reads[0].Count != 1 || reads[1].Count != 1 {
		t.Errorf("the next Wait: %v, %v", reads[0], reads[1])
	}
	// A datagram longer than Datagram is read cut.
	w.send(1, append(newGen(1), make([]byte, Datagram)...))
	if r = w.wait(1)[0]; r.Count != 1 || !q.Cut[0] || q.Lens[0] != Datagram {
		t.Errorf("a long datagram: %v, cut %v, len %d", r, q.Cut[0], q.Lens[0])
	}
}

// TestWatchWaitForeign: a datagram another process sent to the monitor's
// socket (any process with CAP_NET_ADMIN in the pod's network namespace
// can send to its group) is dropped, a forged commit's end with it; a
// flood of them ends that socket's read at MaxForeign and takes nothing
// from another socket's.
func TestWatchWaitForeign(t *testing.T) {
	if raceDetector && testing.CoverMode() != "" {
		t.Skip("coverage of this package under the race detector: its counters need a P")
	}
	w := newWatchSetIDs(t, 2)
	q := w.q
	mon, port := userSocket(t)
	forger, _ := userSocket(t)
	w.add(mon, 1)
	forge := func(n int) {
		t.Helper()
		for range n {
			forge(t, forger, port, newGen(uint32(os.Getpid())))
		}
	}
	forge(1)
	if r := w.wait(1)[0]; r.Count != 0 || r.Foreign != 1 || r.Writer.PID != 0 || r.Errno != unix.EAGAIN {
		t.Errorf("a forged commit's end: read %v", r)
	}
	// The flooded socket is read first (the other was read last).
	q.last = 2
	forge(MaxForeign + 8)
	w.send(1, newGen(uint32(os.Getpid())))
	reads := w.wait(1, 2)
	if f, r := reads[0], reads[1]; q.Events[f.Event].Pad != 1 || f.Count != 0 || f.Foreign != MaxForeign || f.Errno != 0 ||
		r.First != 0 || r.Off != 0 || r.Count != 1 || r.Writer.PID != os.Getpid() {
		t.Errorf("a flood of them, another socket behind: %v, %v", f, r)
	}
	if r := w.wait(1)[0]; r.Foreign != 8 || r.Errno != unix.EAGAIN {
		t.Errorf("the rest: %v", r)
	}
}

// TestWatchWaitTurns: of more sockets ready than MaxReads, a Wait reads
// MaxReads, their datagrams one after another in Buf; the next starts
// after the last one read, so every ready monitor is read within two.
func TestWatchWaitTurns(t *testing.T) {
	if raceDetector && testing.CoverMode() != "" {
		t.Skip("coverage of this package under the race detector: its counters need a P")
	}
	const monitors = MaxReads + 2
	var ids []int32
	var all []int
	for i := range monitors {
		ids = append(ids, int32(i+1))
		all = append(all, i+1)
	}
	w := newWatchSetIDs(t, ids...)
	q := w.q
	rule := nftMessage(10<<8|6, attr(1, []byte("filter\x00")))
	for i := range monitors {
		for range 2 {
			w.send(i+1, rule)
			w.send(i+1, newGen(uint32(os.Getpid())))
		}
	}
	seen := map[int]int{}
	for round := range 2 {
		res := w.within(w.start())
		if res.Reads != MaxReads {
			t.Fatalf("round %d: %d sockets read of %d ready, want %d", round, res.Reads, monitors, MaxReads)
		}
		first, off := 0, 0
		for _, r := range q.Reads[:res.Reads] {
			seen[int(q.Events[r.Event].Pad)]++
			if r.First != first || r.Off != off || r.Count != 2 || r.Errno != 0 {
				t.Errorf("round %d: read %v, want datagrams from %d at %d, two", round, &r, first, off)
			}
			first += r.Count
			off += q.Lens[r.First] + q.Lens[r.First+1]
		}
	}
	var read []int
	for id := range seen {
		read = append(read, id)
	}
	slices.Sort(read)
	if !slices.Equal(read, all) {
		t.Errorf("monitors read in two Waits %v, want every one of %v", read, all)
	}
}

// TestWatchWaitShares: while more sockets are to be read, the one read
// first keeps to its share of the datagrams (MaxDatagrams/MaxReads) and
// leaves room in Buf for a datagram each; its read is cut mid-commit
// (its writer not read), the sockets behind it are read whole, and the
// rest of the commit is read next.
func TestWatchWaitShares(t *testing.T) {
	if raceDetector && testing.CoverMode() != "" {
		t.Skip("coverage of this package under the race detector: its counters need a P")
	}
	self := uint32(os.Getpid())
	rule := nftMessage(10<<8|6, attr(1, []byte("filter\x00")))
	check := func(name string, long []byte, datagrams, want int) {
		t.Helper()
		w := newWatchSetIDs(t, 1, 2, 3, 4)
		q := w.q
		// Ready in this order, so read in this order (epoll's ready
		// list, no monitor read before).
		for range datagrams {
			w.send(1, long)
		}
		w.send(1, newGen(self))
		for id := 2; id <= MaxReads; id++ {
			w.send(id, newGen(self))
		}
		reads := w.wait(1, 2, 3, 4)
		if r := reads[0]; q.Events[r.Event].Pad != 1 || r.Count != want || r.Writer.PID != 0 || r.Errno != 0 {
			t.Errorf("%s: the first read %v, want %d datagrams, no writer", name, r, want)
		}
		for _, r := range reads[1:] {
			if r.Count != 1 || r.Writer.PID != int(self) || r.First < want || r.Off < want*len(long) {
				t.Errorf("%s: a read behind it %v, want its commit's end and writer", name, r)
			}
		}
		if r := w.wait(1)[0]; r.Count != datagrams+1-want || r.Writer.PID != int(self) {
			t.Errorf("%s: the rest %v, want %d datagrams and the writer", name, r, datagrams+1-want)
		}
	}
	check("datagrams", rule, MaxDatagrams, MaxDatagrams/MaxReads)
	// 30 KiB each: room for a Datagram is kept for the three behind.
	check("bytes", append(rule, make([]byte, 30<<10)...), 4, 3)
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
