package nstest

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// HoldXTMutex is the neighbour of issue 7 item 1: a big legacy filter table
// in its own netns and many threads looping IPT_SO_GET_ENTRIES on it, each
// call holding the host-wide x_tables IPv4 mutex while it copies the table.
// Waiters queue behind each other, so anyone else touching ip_tables waits
// about threads x one copy, uninterruptibly. It returns a stop function.
func HoldXTMutex(t testing.TB, rules, threads int) (stop func()) {
	t.Helper()
	// No other test process's namespace while the mutex is held (see xtLock).
	unlock := xtExclusive()
	return holdXTMutex(t, unlock, New(t), rules, threads)
}

// HoldXTMutexIn is HoldXTMutex with the big table and the looping socket
// in ns: the pod of issue 18 item 3, whose own legacy rules keep the mutex
// busy, so that no look at them can finish. The table replaces ns's filter.
func HoldXTMutexIn(t testing.TB, ns *NS, rules, threads int) (stop func()) {
	t.Helper()
	unlock := xtExclusive()
	return holdXTMutex(t, unlock, ns, rules, threads)
}

func holdXTMutex(t testing.TB, unlock func(), ns *NS, rules, threads int) (stop func()) {
	t.Helper()
	var once sync.Once
	release := func() { once.Do(unlock) }
	t.Cleanup(release)
	var b strings.Builder
	b.WriteString("*filter\n")
	for i := 0; i < rules; i++ {
		fmt.Fprintf(&b, "-A INPUT -s 10.%d.%d.%d/32 -j ACCEPT\n", i>>16&255, i>>8&255, i&255)
	}
	b.WriteString("COMMIT\n")
	ns.Restore(b.String(), "iptables-legacy-restore")

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
		t.Fatalf("IPT_SO_GET_INFO: %v", e)
	}
	size := *(*uint32)(unsafe.Pointer(&info[32+4+40+4]))
	// struct ipt_get_entries: name[32], size, padding, entries; the kernel
	// wants the exact length. One buffer for all: its content is not read.
	buf := make([]byte, 40+int(size))
	copy(buf, "filter")
	*(*uint32)(unsafe.Pointer(&buf[32])) = size
	var done atomic.Bool
	var calls atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < threads; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !done.Load() {
				l := uint32(len(buf))
				// IPT_SO_GET_ENTRIES
				if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_IP, 65, uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&l)), 0); e != 0 {
					t.Errorf("IPT_SO_GET_ENTRIES: %v", e)
					return
				}
				calls.Add(1)
			}
		}()
	}
	// Every thread in the queue before anyone else comes.
	for calls.Load() < int64(threads) && !t.Failed() {
		time.Sleep(10 * time.Millisecond)
	}
	stop = func() {
		if done.Swap(true) {
			return
		}
		wg.Wait()
		unix.Close(fd)
		runtime.KeepAlive(buf)
		release()
	}
	t.Cleanup(stop)
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
