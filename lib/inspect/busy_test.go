package inspect_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/iptables-alerter/iptables-alerter/internal/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"github.com/iptables-alerter/iptables-alerter/lib/netns"
)

// holdXTMutex is the neighbour of issue 7 item 1: a big legacy filter table
// in its own netns and many threads looping IPT_SO_GET_ENTRIES on it, each
// call holding the host-wide x_tables IPv4 mutex while it copies the table.
// Waiters queue behind each other, so anyone else touching ip_tables waits
// about threads x one copy, uninterruptibly. It returns a stop function.
func holdXTMutex(t *testing.T, rules, threads int) (stop func()) {
	t.Helper()
	ns := nstest.New(t)
	var b strings.Builder
	b.WriteString("*filter\n")
	for i := 0; i < rules; i++ {
		fmt.Fprintf(&b, "-A INPUT -s 10.%d.%d.%d/32 -j ACCEPT\n", i>>16&255, i>>8&255, i&255)
	}
	b.WriteString("COMMIT\n")
	ns.Restore(b.String(), "iptables-legacy-restore")

	h, err := netns.Open(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	// A socket keeps the netns it was made in: any thread may use it.
	var fd int
	if err := h.Do(func() (err error) {
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		return err
	}); err != nil {
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
	}
	t.Cleanup(stop)
	return stop
}

// A neighbour holding the x_tables mutex must not hold an inspection of
// another netns past its deadline: the legacy look runs in a probe process
// that Inspect abandons, and the snapshot says it is truncated.
func TestInspectLegacyBusyKeepsDeadline(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "iptables-legacy-restore")
	nstest.Need(t, func() bool { _, err := os.Stat("/proc/self/net/ip_tables_names"); return err == nil }(), "needs the ip_tables module loaded")
	victim := nstest.New(t)
	victim.Run("iptables-nft", "-A", "OUTPUT", "-j", "DROP")
	h, err := netns.Open(victim.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()

	holdXTMutex(t, 300000, 64)
	// The attack must be real: reading ip_tables_names has to wait long.
	blocked := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		os.ReadFile("/proc/self/net/ip_tables_names")
		blocked <- time.Since(start)
	}()
	select {
	case d := <-blocked:
		t.Fatalf("reading ip_tables_names took only %v under the attack: the attack is too weak to test anything", d)
	case <-time.After(600 * time.Millisecond):
	}

	const budget = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	start := time.Now()
	s, err := inspect.Inspect(ctx, h, inspect.Options{})
	took := time.Since(start)
	if took > budget+200*time.Millisecond {
		t.Fatalf("Inspect took %v with a %v deadline while a neighbour held the x_tables mutex", took, budget)
	}
	if !s.Truncated || !errors.Is(err, inspect.ErrLegacyBusy) {
		t.Fatalf("truncated=%v err=%v, want truncated and %v", s.Truncated, err, inspect.ErrLegacyBusy)
	}
	var out *inspect.Chain
	for i, c := range s.Chains {
		if c.Table == "filter" && c.Name == "OUTPUT" {
			out = &s.Chains[i]
		}
	}
	if out == nil || out.Rules != 1 {
		t.Fatalf("the nftables part was lost: OUTPUT = %+v", out)
	}
}
