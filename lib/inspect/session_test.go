package inspect

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
)

// TestSessionWaitsThroughSignals: a read of the netlink socket with
// nothing to read waits until the deadline, neither less (a signal ends
// such a wait with EINTR even under SA_RESTART) nor more (each wait again
// is for what is left: the signals stop halfway to the deadline, and a
// wait restarted in full would end half the wait after it; the margin,
// a quarter, is for a loaded machine), and a reply that comes during the
// signals is read.
func TestSessionWaitsThroughSignals(t *testing.T) {
	nstest.NeedRoot(t)
	h := nstest.New(t).Open()
	const wait = time.Second
	for _, tc := range []struct {
		name       string
		reply, raw bool
	}{
		{"nothing to read", false, false}, {"a reply after 50 signals", true, false},
		// As readAhead's reader reads: without telling the scheduler.
		{"raw/nothing to read", false, true}, {"raw/a reply after 50 signals", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			n, err := openSession(context.Background(), h, start.Add(wait), 4096)
			if err != nil {
				t.Fatal(err)
			}
			defer n.close()
			// The signals go to this thread, the one waiting in recvmsg.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			tid := unix.Gettid()
			stop, sent := make(chan struct{}), make(chan int, 1)
			go func() {
				count, replied := 0, false
				reply := func() {
					if tc.reply && !replied {
						replied = true
						if err := n.request(unix.NFT_MSG_GETGEN, 0, unix.AF_UNSPEC, nil); err != nil {
							t.Error(err)
						}
					}
				}
				tick := time.NewTicker(time.Millisecond)
				defer tick.Stop()
				for quiet := time.After(wait / 2); ; {
					select {
					case <-stop:
						sent <- count
						return
					case <-quiet:
						tick.Stop()
						// A starved ticker may not have reached 50.
						reply()
					case <-tick.C:
						// SIGURG: the runtime's own preemption signal,
						// which it ignores when it did not ask for it.
						unix.Tgkill(os.Getpid(), tid, unix.SIGURG)
						if count++; count == 50 {
							reply()
						}
					}
				}
			}()
			nr, err := n.recv(n.buf, tc.raw)
			took := time.Since(start)
			close(stop)
			signals := <-sent
			t.Logf("%d signals, recv after %v: %d bytes, %v", signals, took.Round(time.Millisecond), nr, err)
			if signals < 20 {
				t.Fatalf("only %d signals sent during the wait", signals)
			}
			if tc.reply {
				if err != nil || nr < 16 || took >= wait {
					t.Fatalf("recv = %d bytes, %v after %v; want the reply before the deadline", nr, err, took)
				}
				return
			}
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("recv = %d bytes, %v; want os.ErrDeadlineExceeded", nr, err)
			}
			if took < wait-10*time.Millisecond || took > wait+wait/4 {
				t.Fatalf("recv returned after %v; want the deadline's %v", took, wait)
			}
		})
	}
}

// TestSessionTruncatedReply: a reply bigger than the buffer is an error,
// not a short message, read either way.
func TestSessionTruncatedReply(t *testing.T) {
	nstest.NeedRoot(t)
	h := nstest.New(t).Open()
	for _, raw := range []bool{false, true} {
		n, err := openSession(context.Background(), h, time.Now().Add(5*time.Second), 4096)
		if err != nil {
			t.Fatal(err)
		}
		// The generation's reply is 56 bytes.
		if err := n.request(unix.NFT_MSG_GETGEN, 0, unix.AF_UNSPEC, nil); err != nil {
			t.Fatal(err)
		}
		nr, err := n.recv(make([]byte, 20), raw)
		n.close()
		if err == nil || !strings.Contains(err.Error(), "bigger than the receive buffer") {
			t.Errorf("raw=%v: recv into 20 bytes = %d, %v; want the message too big", raw, nr, err)
		}
	}
}

// TestReadAheadPanicJoinsReader: a panic while a batch read ahead is
// decoded (the rules are the pod's) still ends the reader before the
// look returns, so nothing reads the socket after it closes.
func TestReadAheadPanicJoinsReader(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft-restore")
	if runtime.GOMAXPROCS(0) < 2 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	}
	ns := nstest.New(t)
	// More batches than the reader has buffers: it waits for the decoder.
	ns.ManyRules(10000)
	h := ns.Open()
	n, err := openSession(context.Background(), h, time.Now().Add(10*time.Second), 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	n.ahead = true
	rules := 0
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the decoding did not panic")
			}
		}()
		n.dump(unix.NFT_MSG_GETRULE, unix.NLM_F_DUMP, unix.AF_INET, nil, "rules", func(byte, []byte) {
			// Past the first two batches: in the read-ahead.
			if rules++; rules == 1000 {
				panic("a rule the decoder cannot take")
			}
		})
	}()
	// Before the session closes: the dump returned only after its reader
	// ended (it may still be returning from its last close, hence a wait).
	buf := make([]byte, 1<<20)
	for wait := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		st := string(buf[:runtime.Stack(buf, true)])
		if !strings.Contains(st, "readAhead") {
			break
		}
		if time.Since(wait) > time.Second {
			t.Fatalf("a read-ahead goroutine is left after the dump returned:\n%s", st)
		}
	}
	n.close()
}

// TestSessionTakesOnlyTheKernels: a process of the pod with CAP_NET_ADMIN
// can send to any netfilter socket of its netns, whose port
// /proc/net/netlink lists; a session takes the kernel's messages only,
// so a forged generation or end of dump never reads as the answer.
func TestSessionTakesOnlyTheKernels(t *testing.T) {
	nstest.NeedRoot(t)
	h := nstest.New(t).Open()
	n, err := openSession(context.Background(), h, time.Now().Add(5*time.Second), 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer n.close()
	sa, err := unix.Getsockname(n.fd)
	if err != nil {
		t.Fatal(err)
	}
	port := sa.(*unix.SockaddrNetlink).Pid
	forger := -1
	if err := h.Do(func() error {
		var err error
		forger, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(forger)
	// A generation answer of the session's first request, seq 1: NEWGEN
	// holding generation 12345.
	forged := make([]byte, unix.NLMSG_HDRLEN+4+8)
	hdr := (*unix.NlMsghdr)(unsafe.Pointer(&forged[0]))
	*hdr = unix.NlMsghdr{Len: uint32(len(forged)), Type: unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWGEN, Seq: 1, Pid: port}
	attr := forged[unix.NLMSG_HDRLEN+4:]
	binary.NativeEndian.PutUint16(attr[0:], 8)
	binary.NativeEndian.PutUint16(attr[2:], unix.NFTA_GEN_ID)
	binary.BigEndian.PutUint32(attr[4:], 12345)
	if err := unix.Sendto(forger, forged, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Pid: port}); err == nil {
		t.Fatalf("a process in the netns sent a forged answer to the session's port %d", port)
	}
	var gen uint32
	if err := n.dump(unix.NFT_MSG_GETGEN, 0, unix.AF_UNSPEC, nil, "generation", func(_ byte, b []byte) { gen, _ = genOf(b) }); err != nil {
		t.Fatal(err)
	}
	if gen == 12345 {
		t.Fatal("the session read the forged generation")
	}
}
