package nstest

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// HoldXTMutex holds the host-wide x_tables IPv4 mutex until stop is
// called (or t ends): the neighbour of issue 7 item 1, whose every
// IPT_SO_GET_ENTRIES holds the mutex while the kernel copies its table out,
// made to last. A small legacy filter table in a netns of its own is read
// into a buffer whose entries fall on a page registered with userfaultfd and
// never filled: the kernel's copy to that page waits, inside get_entries,
// with the mutex held, so anyone else touching ip_tables waits
// uninterruptibly, for as long as the test wants and whatever the load.
// (Its first form, 64 threads looping over a 300,000-rule table, kept a
// waiter out only for the copies queued ahead of it: under load those took
// less than a hook's 2 s deadline once.)
func HoldXTMutex(t testing.TB) (stop func()) {
	t.Helper()
	// No other test process's namespace while the mutex is held (see xtLock).
	release := exclusiveUntil(t)
	return holdXTMutex(t, release, New(t))
}

// HoldXTMutexIn is HoldXTMutex with the table and the stalled read in ns:
// the pod of issue 18 item 3, whose own legacy rules keep the mutex busy,
// so that no look at them can finish. The table replaces ns's filter.
func HoldXTMutexIn(t testing.TB, ns *NS) (stop func()) {
	t.Helper()
	return holdXTMutex(t, exclusiveUntil(t), ns)
}

// exclusiveUntil holds the host-wide lock exclusive until the release it
// gives is called or t ends, whatever fails after (New included).
func exclusiveUntil(t testing.TB) (release func()) {
	unlock := xtExclusive()
	var once sync.Once
	release = func() { once.Do(unlock) }
	t.Cleanup(release)
	return release
}

// The userfaultfd ABI (linux/userfaultfd.h), with the ioctl numbers of the
// generic encoding (x86, arm64, s390x, riscv).
const (
	uffdAPI            = 0xAA
	uffdioAPI          = 0xC018AA3F // _IOWR(0xAA, 0x3F, struct uffdio_api)
	uffdioRegister     = 0xC020AA00 // _IOWR(0xAA, 0x00, struct uffdio_register)
	uffdRegisterMiss   = 1          // UFFDIO_REGISTER_MODE_MISSING
	uffdEventPagefault = 0x12
	// struct ipt_get_entries before its entries: name[32], size, padding.
	getEntriesHeader = 40
)

func holdXTMutex(t testing.TB, release func(), ns *NS) (stop func()) {
	t.Helper()
	ns.Restore("*filter\n-A INPUT -s 10.0.0.1/32 -j ACCEPT\nCOMMIT\n", "iptables-legacy-restore")

	// A socket keeps the netns it was made in: any thread may use it.
	fd, err := socketIn(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	// struct ipt_getinfo: name[32], valid_hooks, hook_entry[5], underflow[5],
	// num_entries, size.
	info := make([]byte, 32+4+40+8)
	copy(info, "filter")
	l := uint32(len(info))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_IP, 64, uintptr(unsafe.Pointer(&info[0])), uintptr(unsafe.Pointer(&l)), 0); e != 0 {
		unix.Close(fd)
		t.Fatalf("IPT_SO_GET_INFO: %v", e)
	}
	size := int(*(*uint32)(unsafe.Pointer(&info[32+4+40+4])))

	// Non-blocking: poll on a blocking userfaultfd reports an error at
	// once instead of waiting for a fault.
	uffd, _, e := unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|unix.O_NONBLOCK, 0, 0)
	if e != 0 {
		unix.Close(fd)
		Need(t, false, fmt.Sprintf("needs userfaultfd(2) to hold the x_tables mutex: %v", e))
	}
	api := [3]uint64{uffdAPI, 0, 0}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uffd, uffdioAPI, uintptr(unsafe.Pointer(&api))); e != 0 {
		unix.Close(int(uffd))
		unix.Close(fd)
		t.Fatalf("UFFDIO_API: %v", e)
	}
	// The header on a page of its own, filled; the entries from the next
	// page on, registered and left missing.
	page := os.Getpagesize()
	mem, err := unix.Mmap(-1, 0, page+(size+page-1)/page*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		unix.Close(int(uffd))
		unix.Close(fd)
		t.Fatal(err)
	}
	reg := [4]uint64{uint64(uintptr(unsafe.Pointer(&mem[page]))), uint64(len(mem) - page), uffdRegisterMiss, 0}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uffd, uffdioRegister, uintptr(unsafe.Pointer(&reg))); e != 0 {
		unix.Munmap(mem)
		unix.Close(int(uffd))
		unix.Close(fd)
		t.Fatalf("UFFDIO_REGISTER: %v", e)
	}
	hdr := mem[page-getEntriesHeader : page]
	copy(hdr, "filter")
	*(*uint32)(unsafe.Pointer(&hdr[32])) = uint32(size)

	// The stalled read, on a thread that blocks every signal: a signal
	// delivered to it would end the wait (the copy fails with EFAULT) and
	// free the mutex.
	returned := make(chan unix.Errno, 1)
	go func() {
		runtime.LockOSThread()
		// Never unlocked: the thread ends with the goroutine, its mask
		// with it.
		all := ^uint64(0)
		unix.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_BLOCK, uintptr(unsafe.Pointer(&all)), 0, 8, 0, 0)
		l := uint32(getEntriesHeader + size)
		// IPT_SO_GET_ENTRIES
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_IP, 65, uintptr(unsafe.Pointer(&hdr[0])), uintptr(unsafe.Pointer(&l)), 0)
		returned <- e
	}()
	var stopOnce sync.Once
	stop = func() {
		stopOnce.Do(func() {
			// Closing the userfaultfd wakes the pending fault, served
			// then as an ordinary page: the copy ends and the kernel
			// lets the mutex go.
			unix.Close(int(uffd))
			<-returned
			unix.Close(fd)
			unix.Munmap(mem)
			release()
		})
	}
	t.Cleanup(stop)
	// The mutex is held once the kernel's copy has faulted on the page;
	// a read that returned instead is told at once.
	pfd := []unix.PollFd{{Fd: int32(uffd), Events: unix.POLLIN}}
	for waited := 0; pfd[0].Revents&unix.POLLIN == 0; waited++ {
		select {
		case e := <-returned:
			returned <- e
			t.Fatalf("IPT_SO_GET_ENTRIES returned (%v) without waiting on its page", e)
		default:
		}
		if waited == 300 {
			t.Fatalf("no page fault within 30 s of IPT_SO_GET_ENTRIES (poll events %#x)", pfd[0].Revents)
		}
		if _, err := unix.Poll(pfd, 100); err != nil && err != unix.EINTR {
			t.Fatalf("poll the userfaultfd: %v", err)
		}
	}
	var msg [32]byte
	if n, err := unix.Read(int(uffd), msg[:]); n != len(msg) || err != nil || msg[0] != uffdEventPagefault {
		t.Fatalf("userfaultfd message %x (%d bytes, %v), want a page fault", msg, n, err)
	}
	return stop
}

// socketIn opens a UDP socket inside the namespace at path, on a locked
// thread that goes back to its own namespace (or dies with the goroutine).
func socketIn(path string) (int, error) {
	type result struct {
		fd  int
		err error
	}
	c := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			c <- result{-1, err}
			return
		}
		defer unix.Close(self)
		target, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			c <- result{-1, err}
			return
		}
		defer unix.Close(target)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			c <- result{-1, err}
			return
		}
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if unix.Setns(self, unix.CLONE_NEWNET) == nil {
			// Only a thread back home may serve other goroutines.
			runtime.UnlockOSThread()
		}
		c <- result{fd, err}
	}()
	r := <-c
	return r.fd, r.err
}
