package execwatch

import (
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
)

// connectorMsg is a datagram as the kernel sends it: a netlink header, a
// cn_msg of callback idx, and a proc_event of kind what with pid and tgid.
func connectorMsg(idx, what uint32, pid, tgid int) []byte {
	b := make([]byte, offTGID+4+12)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], uint32(len(b)))
	ne.PutUint32(b[offIdx:], idx)
	ne.PutUint32(b[offIdx+4:], cnValProc)
	ne.PutUint16(b[offIdx+16:], uint16(len(b)-offWhat))
	ne.PutUint32(b[offWhat:], what)
	ne.PutUint32(b[offPID:], uint32(pid))
	ne.PutUint32(b[offTGID:], uint32(tgid))
	return b
}

// TestEventFilter runs the socket filter on each kind of message, in the
// x/net/bpf machine (loads big-endian, as the kernel's).
func TestEventFilter(t *testing.T) {
	vm, err := bpf.NewVM(eventFilter(true))
	if err != nil {
		t.Fatal(err)
	}
	listening, err := bpf.NewVM(eventFilter(false))
	if err != nil {
		t.Fatal(err)
	}
	const fork, comm = 0x00000001, 0x00000200
	for _, tc := range []struct {
		name string
		msg  []byte
		pass bool
	}{
		{"exec", connectorMsg(cnIdxProc, procEventExec, 42, 42), true},
		{"exec by a thread", connectorMsg(cnIdxProc, procEventExec, 43, 42), true},
		{"ack", connectorMsg(cnIdxProc, procEventNone, 0, 0), true}, // dropped once listening
		{"exit of a process", connectorMsg(cnIdxProc, procEventExit, 42, 42), true},
		{"exit of a thread", connectorMsg(cnIdxProc, procEventExit, 43, 42), false},
		{"fork", connectorMsg(cnIdxProc, fork, 43, 42), false},
		{"comm", connectorMsg(cnIdxProc, comm, 42, 42), false},
		{"another callback's", connectorMsg(cnIdxProc+1, comm, 42, 42), true},
		{"cut before its pid", connectorMsg(cnIdxProc, procEventExit, 42, 42)[:offPID+2], false},
	} {
		n, err := vm.Run(tc.msg)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if pass := n > 0; pass != tc.pass {
			t.Errorf("%s: passed %v, want %v", tc.name, pass, tc.pass)
		}
		n, err = listening.Run(tc.msg)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if pass, want := n > 0, tc.pass && tc.name != "ack"; pass != want {
			t.Errorf("%s, once listening: passed %v, want %v", tc.name, pass, want)
		}
	}
}

// TestFilterDropsOtherEvents: a socket listening for every process event
// (what kernels before 6.6 send, RHEL 9's included) with the filter on
// gets no fork, no comm change and no thread's exit from the kernel: a
// pod renaming a thread in a loop (prctl(PR_SET_NAME), unprivileged) no
// longer wakes the watch's real-time reader once a call. A child's exec
// and exit still come; acks come while listening starts, not after.
func TestFilterDropsOtherEvents(t *testing.T) {
	nstest.NeedRoot(t)
	conn, err := dial("")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := kernelOnly(conn); err != nil {
		t.Fatal(err)
	}
	if err := attachFilter(conn, true); err != nil {
		t.Fatal(err)
	}
	w := &Watcher{opts: Options{AckTimeout: DefaultAckTimeout}, conn: conn}
	if err := w.listenFor(0); err != nil {
		t.Fatal(err)
	}
	defer w.ignore()
	// Room for what other tests on the machine start meanwhile: a lost
	// exit would fail the test, not the filter.
	rc, err := conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	_ = rc.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, readBuffer) })

	// A refused listen request (no such operation: acknowledged EINVAL),
	// as anyone in the host's namespaces can send: its ack is multicast.
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, netlinkConnector)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	refuse := func(ack uint32) {
		req := listenRequest(ack, ack, 99, 0)
		hdr := make([]byte, unix.NLMSG_HDRLEN)
		binary.NativeEndian.PutUint32(hdr[0:], uint32(unix.NLMSG_HDRLEN+len(req)))
		binary.NativeEndian.PutUint16(hdr[4:], unix.NLMSG_DONE)
		if err := unix.Sendto(fd, append(hdr, req...), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			t.Fatal(err)
		}
	}
	// read hands each process event to f until f says stop or the
	// deadline passes (ok false).
	read := func(deadline time.Time, f func(ev Event, what uint32) (stop bool)) (ok bool) {
		if err := conn.SetReadDeadline(deadline); err != nil {
			t.Fatal(err)
		}
		for {
			msgs, err := conn.Receive()
			if errors.Is(err, unix.ENOBUFS) {
				continue
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return false
			}
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			for _, m := range msgs {
				d := m.Data
				if len(d) < cnMsgLen+procEventHdr || binary.NativeEndian.Uint32(d) != cnIdxProc {
					continue
				}
				ev, err := Decode(d)
				if err != nil {
					t.Fatal(err)
				}
				if f(ev, binary.NativeEndian.Uint32(d[cnMsgLen:])) {
					return true
				}
			}
		}
	}
	// While the watch starts listening, acks pass: the refused request's
	// comes (so the one below would too, without the filter).
	refuse(7)
	if !read(time.Now().Add(10*time.Second), func(ev Event, _ uint32) bool { return ev.Kind == KindAck && ev.Ack == 8 }) {
		t.Fatal("the refused request's ack did not come while acks pass")
	}
	if err := attachFilter(conn, false); err != nil {
		t.Fatal(err)
	}
	refuse(9)

	// 1,000 renames on a thread of this process, which then exits (a
	// goroutine ending locked to its thread ends the thread).
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		name := []byte("renamed\x00")
		for range 1000 {
			_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&name[0])), 0, 0, 0)
		}
	}()
	<-done
	child := exec.Command("/bin/true")
	if err := child.Run(); err != nil {
		t.Fatal(err)
	}
	pid := child.Process.Pid

	var execSeen, exitSeen bool
	check := func(ev Event, what uint32) bool {
		switch ev.Kind {
		case KindAck:
			t.Errorf("an ack (ack %d, error %d) passed the filter once listening", ev.Ack, ev.Err)
		case KindOther:
			t.Errorf("event of kind %#x (pid %d) passed the filter", what, ev.PID)
		case KindExit:
			if ev.PID != ev.TGID {
				t.Errorf("a thread's exit (pid %d of %d) passed the filter", ev.PID, ev.TGID)
			}
			exitSeen = exitSeen || ev.PID == pid
		case KindExec:
			execSeen = execSeen || ev.PID == pid
		}
		return exitSeen
	}
	if !read(time.Now().Add(30*time.Second), check) {
		t.Fatalf("the child's exit did not come in 30 s (its exec: %v)", execSeen)
	}
	if !execSeen {
		t.Errorf("the child's exec did not come")
	}
	// What the kernel sent after the child's exit (the renaming thread's
	// own exit may come late) is checked too.
	read(time.Now().Add(300*time.Millisecond), func(ev Event, what uint32) bool { check(ev, what); return false })
}
