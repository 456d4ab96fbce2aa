// Package child asks a question that may block in the kernel in a child
// process, so the caller returns by its deadline whatever the kernel does.
//
// The child is this binary re-executed from /proc/self/exe with argv[0]
// naming its probe; Main, called first thing in main (and in TestMain) with
// the table of probes the binary may run, recognises it, runs the probe's
// function and exits. The child gets the
// network namespace as fd 3, the deadline as argv[1], and answers one line
// at a time on stdout, so what it wrote before the caller gave up is still
// read. Its only link to the caller is that pipe: stdin and stderr are
// /dev/null, because a runtime waits for the pipes it gave the hook, and an
// abandoned child may outlive the hook.
//
// A peek (StartPeek) is the cheap kind for reading a few small files: a
// fork without exec, no program started (peek.go).
package child

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iptables-alerter/iptables-alerter/lib/netns"
)

// marker starts the argv[0] of a child; the probe's name follows it.
const marker = "iptables-alerter-child:"

// ErrUnlisted marks a Start of a probe that is not in the table main gave
// Main (or whose name two probes of that table share): the child could not
// run it.
var ErrUnlisted = errors.New("probe not in the table given to child.Main")

// Func is a child's work: ns is the namespace (fd 3), args what Start was
// given; it writes its answer to stdout and returns the exit status.
type Func func(ns *os.File, args []string) int

// Probe is a kind of child: the name argv[0] carries and the work the child
// does. A package declares each of its probes as an exported package-level
// variable (NewProbe), and every main that lets it run lists it in Main.
//
// Why a test and not the compiler guards the list: Go cannot make a caller
// list every value of a type, and internal/child may not name the packages
// above it. What the types do guarantee: Start takes only a *Probe, never a
// name, and a *Probe comes only from NewProbe, so every probe lib code can
// start is a NewProbe call; a main lists probes by their exported names, so
// a renamed or removed probe breaks its build; and hook's test (probes_test.go)
// finds every NewProbe in the module's code and fails when main's table
// misses one. A probe still missed at run time is an error of Start the
// caller reports (ErrUnlisted), never a child that silently exits 2.
type Probe struct {
	name string
	run  Func
}

// NewProbe makes the probe name, which runs run in the child.
func NewProbe(name string, run Func) *Probe { return &Probe{name: name, run: run} }

// Name is the name argv[0] carries.
func (p *Probe) Name() string { return p.name }

var (
	// table holds the probes Main was given, by name; nil for a name two
	// of them share.
	table map[string]*Probe
	// wired is set when the binary called Main, so re-executing
	// /proc/self/exe starts a child and not the program again.
	wired bool
)

// Main runs the child and exits when this process is one that Start
// started; otherwise it keeps probes as the ones Start may start, and
// returns at once. Every main that reaches a Start passes the same table
// in the parent and, re-executed, in the child.
func Main(probes ...*Probe) {
	table = map[string]*Probe{}
	for _, p := range probes {
		if q, ok := table[p.name]; ok && q != p {
			table[p.name] = nil // ambiguous: Start refuses both
			continue
		}
		table[p.name] = p
	}
	name, ok := strings.CutPrefix(os.Args[0], marker)
	if !ok || len(os.Args) < 2 {
		wired = true
		return
	}
	p := table[name]
	ns, err := strconv.ParseInt(os.Args[1], 10, 64)
	if p == nil || err != nil {
		os.Exit(2)
	}
	// Nobody reads us past the deadline; end when able. The grace lets
	// the caller's read end on its deadline first, so it tells "abandoned
	// at the deadline" from "ended without an answer" whichever process
	// the machine runs first.
	time.AfterFunc(time.Until(time.Unix(0, ns))+exitGrace, func() { os.Exit(0) })
	os.Exit(p.run(os.NewFile(3, "netns"), os.Args[2:]))
}

// Wired reports whether Main was called: without it a caller must ask
// in-process, where a blocked kernel call holds it.
func Wired() bool { return wired }

// exitGrace is how long past its deadline a child still running ends
// itself. The caller kills it when it gives up at the deadline (End), so
// this matters only when the caller is gone.
const exitGrace = time.Second

// MaxLine bounds one line of a child's answer: a legacy x_tables rule is
// up to 64 KiB of kernel structs, sent as base64 in JSON.
const MaxLine = 256 << 10

// Proc is a child under way.
type Proc struct {
	cmd *exec.Cmd
	r   *os.File
	// Lines reads the child's answer; it ends at the deadline with an
	// error that errors.Is os.ErrDeadlineExceeded.
	Lines *bufio.Scanner
}

// Start starts probe p as a child in the namespace of h, answering by
// deadline. p must be in the table given to Main.
func Start(p *Probe, h *netns.Handle, deadline time.Time, args []string) (*Proc, error) {
	if p == nil || table[p.name] != p {
		name := "<nil>"
		if p != nil {
			name = p.name
		}
		return nil, fmt.Errorf("start child %q: %w", name, ErrUnlisted)
	}
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
		Args:       append([]string{marker + p.name, strconv.FormatInt(deadline.UnixNano(), 10)}, args...),
		Env:        []string{},
		Stdout:     w,
		ExtraFiles: []*os.File{nsf},
	}
	if err := cmd.Start(); err != nil {
		r.Close()
		return nil, err
	}
	proc := &Proc{cmd: cmd, r: r, Lines: bufio.NewScanner(r)}
	proc.Lines.Buffer(nil, MaxLine)
	if err := r.SetReadDeadline(deadline); err != nil {
		proc.End(false)
		return nil, err
	}
	return proc, nil
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
