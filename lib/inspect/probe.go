package inspect

import (
	"bufio"
	"encoding/json"
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

// ErrLegacyBusy marks a legacy probe that did not answer by the deadline:
// another process held the host-wide x_tables mutex (a neighbour looping
// over a huge legacy table can hold it for seconds).
var ErrLegacyBusy = errors.New("legacy x_tables busy")

// probeArg0 is the argv[0] a probe process is started with; ProbeMain
// recognises it.
const probeArg0 = "iptables-alerter-legacy-probe"

// probeWired is set when the binary called ProbeMain, so re-executing
// /proc/self/exe starts a probe and not the program again.
var probeWired bool

// ProbeMain runs the legacy probe and exits when this process is one that
// Inspect started; otherwise it returns at once and lets Inspect start
// probes. Call it first thing in main, and in TestMain of tests that
// inspect. A binary that does not call it probes legacy tables in-process,
// where a held x_tables mutex blocks it uninterruptibly.
func ProbeMain() {
	if len(os.Args) < 2 || os.Args[0] != probeArg0 {
		probeWired = true
		return
	}
	os.Exit(runProbe(os.Args[1], os.Args[2:]))
}

// probeLine is one line the probe writes: a table, an error, or the end.
type probeLine struct {
	Table *LegacyTable `json:"table,omitempty"`
	Err   string       `json:"err,omitempty"`
	Done  bool         `json:"done,omitempty"`
}

// runProbe is the probe process: the netns is fd 3, the answer goes to
// stdout one line at a time, so what it read before the parent gave up is
// still the parent's.
func runProbe(deadline string, fams []string) int {
	ns, err := strconv.ParseInt(deadline, 10, 64)
	if err != nil {
		return 2
	}
	// Nobody waits for us past the deadline; end when able.
	time.AfterFunc(time.Until(time.Unix(0, ns)), func() { os.Exit(0) })
	out := json.NewEncoder(os.Stdout)
	h, err := netns.FromFile(os.NewFile(3, "netns"), "fd 3")
	if err != nil {
		out.Encode(probeLine{Err: err.Error()})
		return 0
	}
	var want []legacyFamily
	for _, lf := range legacyFamilies {
		for _, f := range fams {
			if string(lf.fam) == f {
				want = append(want, lf)
			}
		}
	}
	err = readLegacy(h, want, func(t LegacyTable) { out.Encode(probeLine{Table: &t}) })
	if err != nil {
		out.Encode(probeLine{Err: err.Error()})
	}
	out.Encode(probeLine{Done: true})
	return 0
}

// legacyProbe is a legacy look under way.
type legacyProbe struct {
	cmd  *exec.Cmd
	r    *os.File
	path string
	// tables and err hold the answer of an in-process look.
	tables []LegacyTable
	err    error
}

// startLegacy starts the legacy look: nothing when no x_tables module is
// loaded (no table can exist and no lock is taken), a probe process when
// the binary is wired for it, else the look in-process, now.
func startLegacy(h *netns.Handle, deadline time.Time) *legacyProbe {
	var fams []legacyFamily
	var names []string
	for _, lf := range legacyFamilies {
		if lf.loaded() {
			fams = append(fams, lf)
			names = append(names, string(lf.fam))
		}
	}
	if len(fams) == 0 {
		return nil
	}
	p := &legacyProbe{path: h.Path}
	if !probeWired {
		p.err = readLegacy(h, fams, func(t LegacyTable) { p.tables = append(p.tables, t) })
		return p
	}
	if err := p.start(h, deadline, names); err != nil {
		p.err = err
	}
	return p
}

// start re-executes this binary as the probe. Its only link to us is the
// pipe we read: stdin and stderr are /dev/null, because a runtime waits for
// the pipes it gave the hook, and an orphaned probe may outlive the hook.
func (p *legacyProbe) start(h *netns.Handle, deadline time.Time, fams []string) error {
	fd, err := unix.FcntlInt(uintptr(h.Fd()), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("start legacy probe for netns %q: %w", h.Path, err)
	}
	nsf := os.NewFile(uintptr(fd), "netns")
	defer nsf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("start legacy probe for netns %q: %w", h.Path, err)
	}
	defer w.Close()
	cmd := &exec.Cmd{
		Path:       "/proc/self/exe",
		Args:       append([]string{probeArg0, strconv.FormatInt(deadline.UnixNano(), 10)}, fams...),
		Env:        []string{},
		Stdout:     w,
		ExtraFiles: []*os.File{nsf},
	}
	if err := cmd.Start(); err != nil {
		r.Close()
		return fmt.Errorf("start legacy probe for netns %q: %w", h.Path, err)
	}
	p.cmd, p.r = cmd, r
	return nil
}

// wait collects the probe's answer into s until the deadline, never past
// it: a probe still blocked then is abandoned (killed when the kernel lets
// it go) and s says it is truncated.
func (p *legacyProbe) wait(deadline time.Time, s *Snapshot) error {
	if p.cmd == nil {
		s.Legacy = append(s.Legacy, p.tables...)
		return p.err
	}
	answered := false
	defer func() {
		p.r.Close()
		p.cmd.Process.Kill()
		if answered {
			// It is past its kernel calls and dies at once. Reaped here, it
			// is never left for the runtime: crun, as the subreaper of
			// an exited hook's children, then misses the hook's own exit
			// and waits out the hook timeout.
			_ = p.cmd.Wait()
			return
		}
		// Still blocked in the kernel: reap it whenever it ends, without
		// waiting for it here.
		go p.cmd.Wait()
	}()
	if err := p.r.SetReadDeadline(deadline); err != nil {
		return fmt.Errorf("read legacy probe for netns %q: %w", p.path, err)
	}
	var errs []string
	sc := bufio.NewScanner(p.r)
	for sc.Scan() {
		var l probeLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return fmt.Errorf("read legacy probe for netns %q: %w", p.path, err)
		}
		switch {
		case l.Table != nil:
			s.Legacy = append(s.Legacy, *l.Table)
		case l.Err != "":
			errs = append(errs, l.Err)
		case l.Done:
			answered = true
			if len(errs) > 0 {
				return fmt.Errorf("read legacy tables in netns %q: %s", p.path, strings.Join(errs, "; "))
			}
			return nil
		}
	}
	err := sc.Err()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		s.Truncated = true
		return fmt.Errorf("read legacy tables in netns %q: %w: %w", p.path, ErrLegacyBusy, ErrDeadline)
	}
	if err == nil {
		err = errors.New("probe ended without an answer")
	}
	return fmt.Errorf("read legacy tables in netns %q: %w", p.path, err)
}
