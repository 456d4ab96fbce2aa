package execquiet

import (
	"encoding/binary"
	"os"
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

// TestWatchWait runs the quiet wait for real, in its system call, over a
// datagram socket standing for a monitor's: it reads up to the commit's
// end and no further, reads the writer's files before it returns, reads
// one process committing in a flood once, leaves a descriptor whose
// event has no id alone, and the runtime goes on meanwhile.
func TestWatchWait(t *testing.T) {
	if raceDetector && testing.CoverMode() != "" {
		t.Skip("coverage of this package under the race detector: its counters need a P")
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]); unix.Close(epfd); unix.Close(wake) })
	for _, ev := range []unix.EpollEvent{{Events: unix.EPOLLIN, Fd: int32(fds[0]), Pad: 1}, {Events: unix.EPOLLIN, Fd: int32(wake)}} {
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, int(ev.Fd), &ev); err != nil {
			t.Fatal(err)
		}
	}
	q := NewWatchReader(epfd, "/proc")
	send := func(b []byte) {
		t.Helper()
		if _, err := unix.Write(fds[1], b); err != nil {
			t.Fatal(err)
		}
	}
	wait := func() chan WatchResult {
		ch := make(chan WatchResult, 1)
		go func() { ch <- q.Wait() }()
		return ch
	}
	within := func(ch chan WatchResult) WatchResult {
		t.Helper()
		select {
		case res := <-ch:
			return res
		case <-time.After(5 * time.Second):
			t.Fatal("Wait did not return within 5s")
		}
		return WatchResult{}
	}
	self := os.Getpid()
	poke := func() {
		t.Helper()
		if _, err := unix.Write(wake, binary.NativeEndian.AppendUint64(nil, 1)); err != nil {
			t.Fatal(err)
		}
	}

	// Blocked in its system call: the runtime collects meanwhile. Then a
	// descriptor without an id is returned, never read.
	ch := wait()
	collects(t)
	if q.Gen()%2 != 1 {
		t.Errorf("Gen %d while Wait runs, want odd", q.Gen())
	}
	poke()
	if res := within(ch); res.N != 1 || res.Read != -1 || q.Events[0].Fd != int32(wake) {
		t.Errorf("wake: %+v", res)
	}
	if q.Gen()%2 != 0 {
		t.Errorf("Gen %d after Wait, want even", q.Gen())
	}
	var drain [8]byte
	_, _ = unix.Read(wake, drain[:])

	// Read up to the commit's end, its writer with it.
	rule := nftMessage(10<<8|6, attr(1, []byte("filter\x00")))
	later := nftMessage(10<<8 | 6)
	send(rule)
	send(newGen(uint32(self)))
	send(later)
	res := within(wait())
	if res.N != 1 || res.Read != 0 || res.Count != 2 || res.Errno != 0 || q.Lens[0] != len(rule) || q.Lens[1] != len(newGen(0)) || q.Cut[0] || q.Cut[1] {
		t.Errorf("read %+v, lens %v: want the two datagrams up to the commit's end", res, q.Lens[:2])
	}
	if q.Writer.PID != self || !strings.HasPrefix(string(q.Writer.Stat.Bytes()), itoa(self)+" (") ||
		q.Writer.Cgroup.N == 0 || string(q.Writer.Stat2.Bytes()) == "" {
		t.Errorf("writer %d read: stat %q, cgroup %d bytes", q.Writer.PID, q.Writer.Stat.Bytes(), q.Writer.Cgroup.N)
	}
	if p := string(q.Writer.Parent.Bytes()); !strings.HasPrefix(p, itoa(os.Getppid())+" (") {
		t.Errorf("parent's stat %q, want pid %d's", p, os.Getppid())
	}

	// The datagram after the end was left; then none waits (EAGAIN).
	res = within(wait())
	if res.Read != 0 || res.Count != 1 || q.Lens[0] != len(later) || res.Errno != unix.EAGAIN || q.Writer.PID != 0 {
		t.Errorf("the datagram left: %+v, writer %d", res, q.Writer.PID)
	}
	// The same writer again is read once.
	send(newGen(uint32(self)))
	if res = within(wait()); res.Count != 1 || q.Writer.PID != 0 {
		t.Errorf("the same writer again: %+v, writer %d read again", res, q.Writer.PID)
	}
	// Past MaxWriterReads in a second, no writer is read until the
	// next.
	q.reads = MaxWriterReads
	send(newGen(uint32(os.Getppid())))
	if res = within(wait()); res.Count != 1 || q.Writer.PID != 0 {
		t.Errorf("past the budget: %+v, writer %d read", res, q.Writer.PID)
	}
	q.second -= int64(2 * time.Second)
	send(newGen(uint32(os.Getppid())))
	if res = within(wait()); res.Count != 1 || q.Writer.PID != os.Getppid() {
		t.Errorf("the next second: %+v, writer %d, want %d read", res, q.Writer.PID, os.Getppid())
	}

	// A datagram longer than Datagram is read cut.
	send(append(newGen(1), make([]byte, Datagram)...))
	if res = within(wait()); res.Count != 1 || !q.Cut[0] || q.Lens[0] != Datagram {
		t.Errorf("a long datagram: %+v, cut %v, len %d", res, q.Cut[0], q.Lens[0])
	}
}
