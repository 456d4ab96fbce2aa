package watch

import (
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/iptables-alerter/iptables-alerter/internal/execquiet"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/netns"
)

// open starts a monitor in ns, closed when the test ends.
func open(t *testing.T, ns *nstest.NS, opt Options) *Monitor {
	t.Helper()
	h, err := netns.Open(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	m, err := Open(h.Fd(), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// next is the next change; the deadline only bounds a broken test, the
// change having been committed before next is called.
func next(t *testing.T, m *Monitor) Change {
	t.Helper()
	for {
		if ch, ok := taken(t, m); ok {
			return ch
		}
		select {
		case <-m.Ready():
		case <-time.After(time.Minute):
			t.Fatal("no change within a minute")
		}
	}
}

// pending holds what a Take gave beyond the change next returned.
var pending = map[*Monitor][]Change{}

// taken is the oldest change taken and not yet returned, false when none
// waits.
func taken(t *testing.T, m *Monitor) (Change, bool) {
	t.Helper()
	if len(pending[m]) == 0 {
		changes, open := m.Take()
		if !open && len(changes) == 0 {
			t.Fatal("monitor closed")
		}
		pending[m] = changes
	}
	if q := pending[m]; len(q) > 0 {
		pending[m] = q[1:]
		return q[0], true
	}
	return Change{}, false
}

func TestIptablesWrites(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "iptables-nft-restore", "nft")
	ns := nstest.New(t)
	m := open(t, ns, Options{})

	// Native writes come first: the first change delivered must be
	// iptables-nft's, or they were not filtered out.
	ns.Run("nft", "add", "table", "inet", "mine")
	ns.Run("nft", "add", "chain", "inet", "mine", "c")
	ns.Run("nft", "add", "table", "ip", "mine")

	ns.Run("iptables-nft", "-t", "nat", "-N", "MY")
	ch := next(t, m)
	if ch.Comm != "iptables-nft" || ch.PID <= 0 || ch.Overrun {
		t.Errorf("iptables-nft -N: change %+v, want comm iptables-nft and its pid", ch)
	}
	if diff := cmp.Diff([]string{"ip nat"}, ch.Tables); diff != "" {
		t.Errorf("tables (-want +got):\n%s", diff)
	}
	ns.Run("iptables-nft", "-t", "nat", "-A", "MY", "-j", "RETURN")
	if ch2 := next(t, m); ch2.Gen <= ch.Gen || ch2.Comm != "iptables-nft" {
		t.Errorf("iptables-nft -A: change %+v after gen %d", ch2, ch.Gen)
	}

	ns.Restore("*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -s fd00::1 -j DROP\nCOMMIT\n*mangle\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n", "ip6tables-nft-restore")
	// One commit per table: iptables-nft-restore commits each table's
	// section on its own.
	for _, want := range []string{"ip6 filter", "ip6 mangle"} {
		ch = next(t, m)
		// The kernel keeps 15 bytes of the command name.
		if ch.Comm != "ip6tables-nft-r" {
			t.Errorf("restore: comm %q, want %q", ch.Comm, "ip6tables-nft-r")
		}
		if !slices.Contains(ch.Tables, want) {
			t.Errorf("restore: tables %q, want %q", ch.Tables, want)
		}
	}

	// Deleting is a change too: the scan it triggers finds the usage gone.
	ns.Run("nft", "flush", "ruleset")
	ch = next(t, m)
	if ch.Comm != "nft" || len(ch.Tables) != 3 {
		t.Errorf("flush: change %+v, want nft touching ip nat, ip6 filter and ip6 mangle", ch)
	}
	if ch, ok := taken(t, m); ok {
		t.Errorf("unexpected change %+v", ch)
	}
}

// TestHeard: the monitor tells the newest generation a commit made that it
// took, an iptables table's (delivered) or a native one's (not).
func TestHeard(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "nft")
	ns := nstest.New(t)
	m := open(t, ns, Options{})
	if g, ok := m.Heard(); ok {
		t.Errorf("heard generation %d before any commit", g)
	}
	ns.Run("iptables-nft", "-t", "nat", "-N", "MY")
	ch := next(t, m)
	waitHeard(t, m, ch.Gen)
	ns.Run("nft", "add", "table", "inet", "mine")
	waitHeard(t, m, ch.Gen+1)
	if ch, ok := taken(t, m); ok {
		t.Errorf("native commit delivered: %+v", ch)
	}
}

// waitHeard waits until m heard generation gen or a later one (the reader
// stores it right after it hands the change over); the deadline bounds a
// broken test only.
func waitHeard(t *testing.T, m *Monitor, gen uint32) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		// Generations wrap: serial number arithmetic.
		g, ok := m.Heard()
		if ok && int32(g-gen) >= 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("heard generation %d (%v) after a minute, want %d", g, ok, gen)
		}
	}
}

// TestPID: the pid is the writer's in the host's pid namespace (ip netns
// exec execs the command: its pid is the one started), and Writer is asked
// about it.
func TestPID(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft")
	ns := nstest.New(t)
	asked := make(chan int, 1)
	m := open(t, ns, Options{Writer: func(pid int, comm string, _ *Files) *findings.Writer {
		asked <- pid
		return &findings.Writer{PID: pid, Comm: comm}
	}})
	cmd := exec.Command("ip", "netns", "exec", ns.Name, "iptables-nft", "-t", "raw", "-N", "X")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("iptables-nft: %v: %s", err, out)
	}
	ch := next(t, m)
	if ch.PID != cmd.Process.Pid || <-asked != cmd.Process.Pid {
		t.Errorf("pid %d, want %d", ch.PID, cmd.Process.Pid)
	}
	if ch.Writer == nil || ch.Writer.Comm != "iptables-nft" {
		t.Errorf("writer %+v", ch.Writer)
	}
}

// TestOverrun: announcements the kernel dropped (ENOBUFS), and changes the
// caller did not take in time, each give an Overrun, never nothing.
func TestOverrun(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "iptables-nft-restore")
	t.Run("kernel", func(t *testing.T) {
		ns := nstest.New(t)
		// The kernel's smallest buffer, and a reader held in Writer at the
		// first commit until the restore ended: its announcements cannot
		// fit.
		held, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		m := open(t, ns, Options{ReadBuffer: 1, Writer: func(pid int, comm string, _ *Files) *findings.Writer {
			once.Do(func() { close(held); <-release })
			return &findings.Writer{PID: pid, Comm: comm}
		}})
		ns.Run("iptables-nft", "-N", "A")
		<-held
		ns.Restore(rules(20000), "iptables-nft-restore")
		close(release)
		for {
			ch := next(t, m)
			if ch.Overrun {
				break
			}
			t.Logf("change before the overrun: %+v", ch)
		}
	})
	t.Run("caller", func(t *testing.T) {
		ns := nstest.New(t)
		// Queue 1: one change waits while the caller takes nothing; the
		// second cannot wait.
		m := open(t, ns, Options{Queue: 1})
		for _, c := range []string{"A", "B", "C", "D"} {
			ns.Run("iptables-nft", "-N", c)
		}
		for i := 0; ; i++ {
			ch := next(t, m)
			if ch.Overrun {
				break
			}
			if i >= 1 {
				t.Fatalf("change %d delivered, want an overrun by the second: %+v", i+1, ch)
			}
		}
	})
}

// rules is an iptables-restore input of n rules in filter INPUT.
func rules(n int) string {
	var b strings.Builder
	b.WriteString("*filter\n:INPUT ACCEPT [0:0]\n")
	for i := range n {
		fmt.Fprintf(&b, "-A INPUT -s 10.%d.%d.%d -j DROP\n", i>>16, i>>8&255, i&255)
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// TestNoLeak: 1,000 monitors opened and closed leave no fd, and so pin no
// namespace.
func TestNoLeak(t *testing.T) {
	nstest.NeedRoot(t)
	h := nstest.New(t).Open()
	before := nstest.FDs(t)
	for i := range 1000 {
		m, err := Open(h.Fd(), Options{})
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		if err := m.Close(); err != nil {
			t.Fatalf("close %d: %v", i, err)
		}
		if _, open := m.Take(); open {
			t.Fatal("Take still open after Close")
		}
	}
	if after := nstest.FDs(t); after > before {
		t.Errorf("%d fds after 1,000 monitors, %d before", after, before)
	}
}

// TestOneShotWriters (issue 25): a one-shot iptables-nft that exits, and
// is reaped by its shell, at once after its commit is still described:
// the reader thread's real-time priority has it read /proc before the
// writer can run again. The writers and every thread of this process run
// on one CPU (nstest.PinProcess), so the order is the scheduler's, never
// the machine's load.
//
// Then with a garbage collection running throughout. Back from epoll_wait
// the reader needs one of the runtime's processors (P); a collection's
// idle mark workers hold every idle one, its thread parks, and the writer
// runs on. So the reader's quiet wait reads the writer's files before it
// returns to the runtime (Options.Proc): without it 3 to 11 of these 20
// writers were gone, with it none. Each writer starts once the last one's
// change was taken and the reader is back in its wait: a commit made while
// the reader is parked, or stopped by the collection in Go, is read only
// when it is back (back-to-back writers: 0 to 14 of 20 gone, 5 to 19
// without the quiet wait). So the back-to-back writers run with no
// collection (the runtime's collector off, after one collection).
func TestOneShotWriters(t *testing.T) {
	for _, collecting := range []bool{false, true} {
		t.Run(fmt.Sprintf("collecting=%v", collecting), func(t *testing.T) {
			oneShotWriters(t, collecting)
		})
	}
}

func oneShotWriters(t *testing.T, collecting bool) {
	nstest.NeedRoot(t, "iptables-nft", "taskset")
	nstest.PinProcess(t)
	ns := nstest.New(t)
	const n = 20
	// Every writer may be described: with the default bound of 8 a
	// window, 20 runs quicker than 8 in 50 ms (2 ms each on a quiet
	// machine) left the ninth and every later one undescribed, as the
	// bound means to.
	m := open(t, ns, Options{Proc: "/proc", Writer: Proc{Root: "/proc"}.Describe, MaxWriters: n})
	if ok, err := Realtime(); !ok {
		nstest.Need(t, false, fmt.Sprintf("a real-time reader: %v", err))
	}
	check := func(i int, ch Change) {
		if ch.Writer == nil || ch.Writer.Gone || ch.Writer.Comm != "iptables-nft" || ch.Writer.ParentComm != "sh" {
			t.Errorf("commit %d: writer %+v, want iptables-nft described (child of sh)", i+1, ch.Writer)
		}
	}
	add := func(i int) string { return fmt.Sprintf("iptables-nft -A INPUT -s 10.0.0.%d -j DROP", i+1) }
	if !collecting {
		runtime.GC()
		defer debug.SetGCPercent(debug.SetGCPercent(-1))
		ns.Run("taskset", "-c", "0", "sh", "-c", fmt.Sprintf("for i in $(seq %d); do iptables-nft -A INPUT -s 10.0.0.$i -j DROP || exit 1; done", n))
		for i := range n {
			check(i, next(t, m))
		}
		return
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				runtime.GC()
			}
		}
	}()
	defer func() { close(stop); <-done }()
	for i := range n {
		waitQuiet(t)
		ns.Run("taskset", "-c", "0", "sh", "-c", add(i)+"; exit $?")
		check(i, next(t, m))
	}
}

// waitQuiet returns once the reader is in its quiet wait (a commit made
// while it is elsewhere, stopped by the collection, is read when it is
// back, as a commit made while it is parked).
func waitQuiet(t *testing.T) {
	t.Helper()
	readerMu.Lock()
	q := cur.q
	readerMu.Unlock()
	for deadline := time.Now().Add(time.Minute); q.Gen()%2 == 0; time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatal("the reader never went back to its wait")
		}
	}
}

// TestForgedCommits: any process with CAP_NET_ADMIN in the pod's network
// namespace can send datagrams to the monitor's group (a unicast to its
// port is refused: the socket is connected to the kernel); a forged
// commit (an iptables table, then a commit's end naming pid 1) is
// dropped, on the quiet wait's path and on the Go path alike (the reader
// is held while they arrive, so that the quiet wait drops some of them,
// up to MaxForeign a wake, and the Go path the next ones), and the next
// real commit is the first change.
func TestForgedCommits(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft")
	ns := nstest.New(t)
	m := open(t, ns, Options{Proc: "/proc", Writer: Proc{Root: "/proc"}.Describe})
	sa, err := unix.Getsockname(m.fd)
	if err != nil {
		t.Fatal(err)
	}
	port := sa.(*unix.SockaddrNetlink).Pid
	forged := append(nlmsg(0, 2, uint16(attrObjTable), []byte("filter\x00")),
		nlmsg(msgNewGen, 0, uint16(attrGenID), be32(1), uint16(attrGenPID), be32(1), uint16(attrGenName), []byte("iptables-nft\x00"))...)
	h := ns.Open()
	defer h.Close()
	readerMu.Lock()
	r := cur
	readerMu.Unlock()
	r.mu.Lock()
	err = h.Do(func() error {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		// Connected to the kernel, the monitor refuses a unicast.
		if err := unix.Sendto(fd, forged, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Pid: port}); !errors.Is(err, unix.ECONNREFUSED) {
			return fmt.Errorf("a unicast to the monitor's port: %v, want ECONNREFUSED", err)
		}
		// Sent to its group, they arrive (and to the kernel, which
		// ignores a message that is no request).
		for range 3 * execquiet.MaxForeign {
			if err := unix.Sendto(fd, forged, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1 << (nfnlgrpNftables - 1)}); err != nil {
				return err
			}
		}
		return nil
	})
	r.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", ns.Name, "iptables-nft", "-A", "INPUT", "-j", "ACCEPT")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("iptables-nft: %v: %s", err, out)
	}
	if ch := next(t, m); ch.PID != cmd.Process.Pid || ch.Overrun {
		t.Errorf("first change %+v, want iptables-nft's (pid %d): a forged one went through", ch, cmd.Process.Pid)
	}
}

// TestBudgetSlots: the quiet wait keeps the writers' read budgets
// (execquiet.MaxMonitorReads a second) by monitor id modulo 256. Ids were
// handed out in turn, so once 255 monitors had come and gone since pod a's
// opened (pods restarting), pod b's shared a's budget: b committing from
// ever new processes spent it, and a's next writer was left to the Go
// path. Open monitors now hold distinct slots while any is free.
func TestBudgetSlots(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "nsenter")
	nsA, nsB := nstest.New(t), nstest.New(t)
	var mu sync.Mutex
	var quietA, quietB int
	counter := func(n *int) func(int, string, *Files) *findings.Writer {
		return func(pid int, comm string, f *Files) *findings.Writer {
			if f != nil {
				mu.Lock()
				*n++
				mu.Unlock()
			}
			return &findings.Writer{PID: pid, Comm: comm}
		}
	}
	// Twice the budget: a writer that exits before its quiet read (a
	// loaded machine) leaves the budget for the next ones, which still
	// spend it. Rounds, as even twice did not spend it on a loaded CI
	// (19 of 40 read): only a round that spent b's budget tells.
	const burst, rounds = 2 * execquiet.MaxMonitorReads, 5
	a := open(t, nsA, Options{Proc: "/proc", Writer: counter(&quietA), MaxWriters: rounds})
	// Pods that came and went meanwhile.
	h, err := netns.Open(nsA.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for range budgetSlots - 1 {
		m, err := Open(h.Fd(), Options{Proc: "/proc"})
		if err != nil {
			t.Fatal(err)
		}
		m.Close()
	}
	b := open(t, nsB, Options{Proc: "/proc", Writer: counter(&quietB), MaxWriters: rounds * burst})
	if a.id%budgetSlots == b.id%budgetSlots {
		t.Errorf("monitors %d and %d share budget slot %d", a.id, b.id, a.id%budgetSlots)
	}
	counts := func() (a, b int) {
		mu.Lock()
		defer mu.Unlock()
		return quietA, quietB
	}
	aMissed := 0
	for r := range rounds {
		a0, b0 := counts()
		// b's burst of new writers, then a's one writer within the same
		// second.
		nsB.Run("sh", "-c", fmt.Sprintf("for i in $(seq %d); do iptables-nft -A INPUT -s 10.%d.0.$i -j DROP || exit 1; done; nsenter --net=%s iptables-nft -A INPUT -j DROP", burst, r, nsA.Path()))
		for range burst {
			next(t, b)
		}
		next(t, a)
		a1, b1 := counts()
		if b1-b0 < execquiet.MaxMonitorReads {
			t.Logf("round %d: b's writers read in the quiet wait: %d, under its budget (%d; they exited first): again", r, b1-b0, execquiet.MaxMonitorReads)
			// The budget is a second's: the next round starts
			// in a new one (else it finds it spent, and reads
			// none).
			time.Sleep(time.Second + 100*time.Millisecond)
			continue
		}
		switch a1 - a0 {
		case 1:
			return
		case 0:
			// a's writer too may exit before its quiet read on a
			// loaded machine (the loaded CI of ac8e300): again. A
			// shared budget leaves it unread in every round.
			t.Logf("round %d: a's writer not read in the quiet wait (exited first, or b spent a's budget): again", r)
			aMissed++
			time.Sleep(time.Second + 100*time.Millisecond)
			continue
		}
		t.Fatalf("a's writer read in the quiet wait: %d times, want 1", a1-a0)
	}
	t.Fatalf("in %d rounds no round had b's writers spend its budget (%d) and a's writer read (a unread in %d of them: b spent a's budget?)", rounds, execquiet.MaxMonitorReads, aMissed)
}
