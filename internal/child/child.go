// Package child asks a question that may block in the kernel in a child
// process, so the caller returns by its deadline whatever the kernel does.
//
// The child is this binary re-executed from /proc/self/exe with argv[0]
// naming its kind; Main, called first thing in main (and in TestMain),
// recognises it, runs the kind's function and exits. The child gets the
// network namespace as fd 3, the deadline as argv[1], and answers one line
// at a time on stdout, so what it wrote before the caller gave up is still
// read. Its only link to the caller is that pipe: stdin and stderr are
// /dev/null, because a runtime waits for the pipes it gave the hook, and an
// abandoned child may outlive the hook.
package child

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iptables-alerter/iptables-alerter/lib/netns"
)

// marker starts the argv[0] of a child; the kind follows it.
const marker = "iptables-alerter-child:"

// Func is a child's work: ns is the namespace (fd 3), args what Start was
// given; it writes its answer to stdout and returns the exit status.
type Func func(ns *os.File, args []string) int

var (
	kinds = map[string]Func{}
	// wired is set when the binary called Main, so re-executing
	// /proc/self/exe starts a child and not the program again.
	wired bool
)

// Register names a kind of child. Call it from an init function, before
// Main runs.
func Register(kind string, run Func) { kinds[kind] = run }

// Main runs the child and exits when this process is one that Start
// started; otherwise it returns at once and lets Start start children.
func Main() {
	kind, ok := strings.CutPrefix(os.Args[0], marker)
	if !ok || len(os.Args) < 2 {
		wired = true
		return
	}
	run := kinds[kind]
	ns, err := strconv.ParseInt(os.Args[1], 10, 64)
	if run == nil || err != nil {
		os.Exit(2)
	}
	// Nobody reads us past the deadline; end when able.
	time.AfterFunc(time.Until(time.Unix(0, ns)), func() { os.Exit(0) })
	os.Exit(run(os.NewFile(3, "netns"), os.Args[2:]))
}

// Wired reports whether Main was called: without it a caller must ask
// in-process, where a blocked kernel call holds it.
func Wired() bool { return wired }

// Proc is a child under way.
type Proc struct {
	cmd *exec.Cmd
	r   *os.File
	// Lines reads the child's answer; it ends at the deadline with an
	// error that errors.Is os.ErrDeadlineExceeded.
	Lines *bufio.Scanner
}

// Start starts a child of kind in the namespace of h, answering by deadline.
func Start(kind string, h *netns.Handle, deadline time.Time, args []string) (*Proc, error) {
	fd, err := unix.FcntlInt(uintptr(h.Fd()), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("duplicate netns fd: %w", err)
	}
	nsf := os.NewFile(uintptr(fd), "netns")
	defer nsf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("open pipe: %w", err)
	}
	defer w.Close()
	cmd := &exec.Cmd{
		Path:       "/proc/self/exe",
		Args:       append([]string{marker + kind, strconv.FormatInt(deadline.UnixNano(), 10)}, args...),
		Env:        []string{},
		Stdout:     w,
		ExtraFiles: []*os.File{nsf},
	}
	if err := cmd.Start(); err != nil {
		r.Close()
		return nil, err
	}
	p := &Proc{cmd: cmd, r: r, Lines: bufio.NewScanner(r)}
	if err := r.SetReadDeadline(deadline); err != nil {
		p.End(false)
		return nil, err
	}
	return p, nil
}

// End closes the pipe and kills the child. One that answered is past its
// kernel calls and dies at once: it is reaped here, never left for the
// runtime (crun, as the subreaper of an exited hook's children, then misses
// the hook's own exit and waits out the hook timeout). One still blocked in
// the kernel is reaped whenever it ends, without waiting for it here.
func (p *Proc) End(answered bool) {
	p.r.Close()
	p.cmd.Process.Kill()
	if answered {
		_ = p.cmd.Wait()
		return
	}
	go p.cmd.Wait()
}

// SetWired sets what Wired reports, for tests that ask both in-process and
// in a child, and returns the function restoring the previous value.
func SetWired(w bool) (restore func()) {
	old := wired
	wired = w
	return func() { wired = old }
}
