package inspect

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iptables-alerter/iptables-alerter/internal/child"
	"github.com/iptables-alerter/iptables-alerter/lib/netns"
)

// ErrLegacyBusy marks a legacy probe that did not answer by the deadline:
// another process held the host-wide x_tables mutex (a neighbour looping
// over a huge legacy table can hold it for seconds).
var ErrLegacyBusy = errors.New("legacy x_tables busy")

// LegacyProbe reads the legacy tables in a child process, so a read blocked
// on the x_tables mutex is abandoned at the deadline. A main that lets
// Inspect run lists it in child.Main.
var LegacyProbe = child.NewProbe("legacy-probe", runProbe)

// probeLine is one line the probe writes: a rule, a table (after its
// rules), an error, or the end.
type probeLine struct {
	Rule  *LegacyRule  `json:"rule,omitempty"`
	Table *LegacyTable `json:"table,omitempty"`
	Err   string       `json:"err,omitempty"`
	Done  bool         `json:"done,omitempty"`
}

// runProbe is the probe process: the answer goes to stdout one line at a
// time, so what it read before the parent gave up is still the parent's.
func runProbe(nsf *os.File, fams []string) int {
	out := json.NewEncoder(os.Stdout)
	h, err := netns.FromFile(nsf, "fd 3")
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
	err = readLegacy(h, want, legacySink{
		table: func(t LegacyTable) { out.Encode(probeLine{Table: &t}) },
		rule:  func(r LegacyRule) { out.Encode(probeLine{Rule: &r}) },
	})
	if err != nil {
		out.Encode(probeLine{Err: err.Error()})
	}
	out.Encode(probeLine{Done: true})
	return 0
}

// legacyLook is a legacy look under way.
type legacyLook struct {
	// peek is the first step of a look in a probe process: a forked child
	// reading the *_tables_names files (the probe is started only for the
	// families it finds a table of); h, deadline and fams are for that.
	peek     *child.Peek
	h        *netns.Handle
	deadline time.Time
	fams     []legacyFamily
	// share is how long the peek may still take once the nftables read
	// has ended (legacyShare of the look's budget).
	share time.Duration
	proc  *child.Proc
	// thread is an in-process look under way (Options.LegacyInProcess).
	thread *threadLook
	path   string
	// ans and err hold the answer of an in-process look.
	ans legacyAnswer
	err error
}

// legacyAnswer collects a look's answer: its tables and rules, and the
// State.Legacy they make, lost when a table was not read whole.
type legacyAnswer struct {
	tables    []LegacyTable
	rules     []LegacyRule
	state     hash.Hash
	stateLost bool
}

func (a *legacyAnswer) sink() legacySink {
	a.state = sha256.New()
	return legacySink{
		table: func(t LegacyTable) { a.tables = append(a.tables, t) },
		rule:  func(r LegacyRule) { a.rules = append(a.rules, r) },
		state: func(part []byte) {
			if part == nil {
				a.stateLost = true
			}
			a.state.Write(part)
		},
	}
}

// into adds the answer to s; known says the look read every table it
// listed without error, so its State.Legacy is s's.
func (a *legacyAnswer) into(s *Snapshot, known bool) {
	s.Legacy = append(s.Legacy, a.tables...)
	s.LegacyRules = append(s.LegacyRules, a.rules...)
	if !known || a.state == nil || a.stateLost {
		s.StateOK = false
		return
	}
	a.state.Sum(s.State.Legacy[:0])
}

// startLegacy starts the legacy look: nothing when no x_tables module is
// loaded (no table can exist and no lock is taken); with inProcess a look
// on a thread of this process abandoned at the deadline; a probe process
// when the binary is wired for it; else the look in-process, now. share is
// the part of the budget kept for it after the nftables read (legacyShare).
func startLegacy(h *netns.Handle, deadline time.Time, share time.Duration, inProcess bool) *legacyLook {
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
	p := &legacyLook{path: h.Path}
	if inProcess {
		p.thread, p.err = startThreadLook(h, deadline, func(own *netns.Handle) error {
			return readLegacy(own, fams, p.ans.sink())
		})
		return p
	}
	if !child.Wired() {
		p.err = readLegacy(h, fams, p.ans.sink())
		return p
	}
	// Most pods have no legacy table: a peek at the table names in a
	// forked child (a fraction of a probe process's start) proves it, and
	// the probe runs only where there is a table to read.
	var paths []string
	for _, lf := range fams {
		paths = append(paths, "/proc/thread-self/net/"+lf.names)
	}
	peek, err := child.StartPeek(h, deadline, paths)
	if err != nil {
		p.startProbe(h, deadline, names)
		return p
	}
	p.peek, p.h, p.deadline, p.fams, p.share = peek, h, deadline, fams, share
	return p
}

// startProbe starts the probe process for the families named.
func (p *legacyLook) startProbe(h *netns.Handle, deadline time.Time, names []string) {
	proc, err := child.Start(LegacyProbe, h, deadline, names)
	if err != nil {
		p.err = fmt.Errorf("start legacy probe for netns %q: %w", h.Path, err)
	}
	p.proc = proc
}

// peeked takes the peek's answer: nil when no family has a table, else
// starts the probe for those that have one (all of them when the peek
// could not tell).
func (p *legacyLook) peeked(s *Snapshot) error {
	// The peek reads table names, microseconds of the kernel's: one not
	// answered within the legacy share after the nftables read waits for
	// the host-wide x_tables mutex, which a neighbour can hold for good
	// (issue 7 item 1). Every container start on the node waited the rest
	// of the budget for it (1.6 s of the hook's 2 s); it waits the share
	// now. A probe of the tables a peek found keeps the whole budget.
	if d := time.Now().Add(p.share); d.Before(p.deadline) {
		// A pipe's deadline: should it fail, the first one holds.
		_ = p.peek.SetDeadline(d)
	}
	files, err := p.peek.Wait()
	p.peek = nil
	if errors.Is(err, os.ErrDeadlineExceeded) {
		s.Truncated = true
		return fmt.Errorf("read legacy tables in netns %q: %w: %w", p.path, ErrLegacyBusy, ErrDeadline)
	}
	var names []string
	for i, lf := range p.fams {
		switch {
		case err != nil || (files[i].Err != nil && !errors.Is(files[i].Err, os.ErrNotExist)):
			names = append(names, string(lf.fam))
		case len(parseTableNames(files[i].Data)) > 0:
			names = append(names, string(lf.fam))
		}
	}
	if len(names) == 0 {
		return nil
	}
	p.startProbe(p.h, p.deadline, names)
	return nil
}

// wait collects the probe's answer into s until the deadline startLegacy
// was given, never past it: a probe still blocked then is abandoned (killed
// when the kernel lets it go) and s says it is truncated.
func (p *legacyLook) wait(s *Snapshot) error {
	if p.thread != nil {
		err := p.thread.wait(p.path)
		if err != nil {
			s.Truncated = true
		}
		// What the look read before it failed; nothing once abandoned
		// (its goroutine may still write p.ans then).
		if !errors.Is(err, ErrDeadline) {
			p.ans.into(s, err == nil)
		} else {
			s.StateOK = false
		}
		return err
	}
	// Only an in-process look gives its State; a probe's answer crosses
	// a pipe without it (the hook, which keeps none).
	peeked := p.peek != nil
	if peeked {
		if err := p.peeked(s); err != nil {
			s.StateOK = false
			return err
		}
	}
	if p.proc == nil {
		p.ans.into(s, p.err == nil && !peeked)
		return p.err
	}
	s.StateOK = false
	answered := false
	defer func() { p.proc.End(answered) }()
	sc := p.proc.Lines
	var errs []string
	for sc.Scan() {
		var l probeLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return fmt.Errorf("read legacy probe for netns %q: %w", p.path, err)
		}
		switch {
		case l.Rule != nil:
			// The probe bounds what it sends; a line beyond the bounds
			// would be a probe gone wrong, kept out all the same.
			if len(s.LegacyRules) < maxLegacyRules {
				s.LegacyRules = append(s.LegacyRules, *l.Rule)
			}
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

// The in-process looks of this process (Options.LegacyInProcess). The
// x_tables mutex is host-wide, so one look at a time is all that can make
// progress anyway; xtStuck is set while an abandoned look has not returned.
var (
	xtSem   = make(chan struct{}, 1)
	xtMu    sync.Mutex
	xtStuck bool
)

// threadLook is one in-process look: its goroutine runs read, sets err,
// then closes done. running and finished are guarded by xtMu.
type threadLook struct {
	deadline          time.Time
	done              chan struct{}
	read              func(*netns.Handle) error
	err               error
	running, finished bool
	abandoned         bool
}

// startThreadLook starts the look, read, on its own goroutine, with its own
// duplicate of the namespace fd (the caller closes h when it gives up).
// What read writes is the caller's to read once wait returned without
// ErrDeadline, never before. While an earlier look is stuck, it starts
// nothing and says busy.
func startThreadLook(h *netns.Handle, deadline time.Time, read func(*netns.Handle) error) (*threadLook, error) {
	xtMu.Lock()
	stuck := xtStuck
	xtMu.Unlock()
	if stuck {
		return nil, fmt.Errorf("read legacy tables in netns %q: %w: an earlier read is still blocked", h.Path, ErrLegacyBusy)
	}
	fd, err := unix.FcntlInt(uintptr(h.Fd()), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("read legacy tables in netns %q: duplicate netns fd: %w", h.Path, err)
	}
	own, err := netns.FromFile(os.NewFile(uintptr(fd), h.Path), h.Path)
	if err != nil {
		return nil, fmt.Errorf("read legacy tables in netns %q: %w", h.Path, err)
	}
	l := &threadLook{deadline: deadline, done: make(chan struct{}), read: read}
	go l.run(own)
	return l, nil
}

// run waits for the process's slot until the deadline, then reads.
func (l *threadLook) run(h *netns.Handle) {
	defer close(l.done)
	defer h.Close()
	t := time.NewTimer(time.Until(l.deadline))
	defer t.Stop()
	select {
	case xtSem <- struct{}{}:
	case <-t.C:
		l.err = ErrLegacyBusy
		return
	}
	defer func() { <-xtSem }()
	xtMu.Lock()
	if l.abandoned || xtStuck {
		xtMu.Unlock()
		l.err = ErrLegacyBusy
		return
	}
	l.running = true
	xtMu.Unlock()
	l.err = l.read(h)
	xtMu.Lock()
	l.finished = true
	// Only one look runs at a time: if one was stuck, it was this one.
	xtStuck = false
	xtMu.Unlock()
}

// wait takes the look's answer until the deadline the look was given;
// past it the look is abandoned, and marks the process's looks stuck if it
// was in the kernel.
func (l *threadLook) wait(path string) error {
	done := func() error {
		if l.err != nil {
			return fmt.Errorf("read legacy tables in netns %q: %w", path, l.err)
		}
		return nil
	}
	// A look done by now is taken even past the deadline (the nftables
	// read may have used it all): select would pick at random between
	// its answer and a timer already fired.
	select {
	case <-l.done:
		return done()
	default:
	}
	t := time.NewTimer(time.Until(l.deadline))
	defer t.Stop()
	select {
	case <-l.done:
		return done()
	case <-t.C:
	}
	xtMu.Lock()
	if l.finished {
		// Done as the timer fired: its answer is written, done not
		// closed yet.
		xtMu.Unlock()
		return done()
	}
	l.abandoned = true
	if l.running && !l.finished {
		xtStuck = true
	}
	xtMu.Unlock()
	return fmt.Errorf("read legacy tables in netns %q: %w: %w", path, ErrLegacyBusy, ErrDeadline)
}
