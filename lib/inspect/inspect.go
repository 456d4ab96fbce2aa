package inspect

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/iptables-alerter/iptables-alerter/lib/netns"
)

// ErrDeadline marks a snapshot cut short by the deadline.
var ErrDeadline = errors.New("inspection deadline reached")

// NftRanOut tells whether Inspect's error says its nftables read reached
// the deadline: the namespace's rules took the whole of it. A legacy look
// the x_tables mutex kept out (ErrLegacyBusy, ErrDeadline too) is not
// that: it says nothing of the namespace's size.
func NftRanOut(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded)
}

// ErrTooMany marks a snapshot cut short by Options.MaxChains.
var ErrTooMany = errors.New("too many chains")

// Options bounds the inspection.
type Options struct {
	// Detail says which rules to keep with their expression data; nil keeps
	// none. Only kept rules can be rendered or allowlisted.
	Detail func(fam Family, table string, xt bool) bool
	// First names the tables whose rules are read before all others (those
	// an iptables client makes), so a pod's huge native ruleset cannot use
	// up the deadline before them.
	First func(fam Family, table string) bool
	// Native judges each rule of the tables First names: rule is set when
	// no iptables client could have written it, table when the rule makes
	// the *-nft-save tools refuse its whole table (classify.Native). The
	// rule's data is only there while it is read, so it is judged then;
	// nil judges none.
	Native func(fam Family, exprs []Expr) (rule, table bool)
	// MaxDetail bounds the kept rules (memory): a pod may hold millions.
	MaxDetail int
	// MaxDetailBytes bounds the expression data kept, all rules together:
	// a pod's own comments make a rule up to 32 KiB, and whatever is kept
	// is rendered and matched too. A rule not kept is still counted; it
	// only cannot be allowlisted, so the bound never hides usage.
	MaxDetailBytes int
	// MaxChains bounds the chains tracked, and the verdict maps of a table
	// whose jumps the use check counts; beyond it the snapshot is
	// truncated.
	MaxChains int
	// LegacyInProcess reads legacy x_tables on a locked thread of this
	// process instead of in a probe process (internal/child), abandoning
	// the read at the deadline when another process holds the host-wide
	// x_tables mutex. The thread then stays blocked in the kernel, unkillable,
	// until the mutex is free, and a process cannot exit before it: only for
	// long-running daemons (the agent), never for the hook. At most one such
	// read runs at a time in the process, and while an abandoned one has not
	// returned, inspections skip the legacy read and are truncated with
	// ErrLegacyBusy, so stuck threads never pile up. It saves the probe
	// process's start (the full build's package initialisation), most of a
	// scan's CPU.
	LegacyInProcess bool
	// ReadAhead reads a dump not ended after two batches on two
	// goroutines: one receives the next batches while the other decodes.
	// For a one-shot look that something waits on (the hook, which a
	// container's start waits for; the scan command): at 10,000 rules the
	// decoding hides behind the kernel's work instead of adding to it. Not
	// for the agent, whose scans run side by side and keep its cores busy
	// already: handing batches over only adds CPU there.
	ReadAhead bool
	// FirstListed, when set, is called once the nftables tables are
	// listed, before any of their rules is read, if one of them is a table
	// First names: where an iptables client's rules, and so most usage,
	// live. A caller that needs more only when there is usage (lib/scan:
	// the allowlist and the vendor table) can start on it then, beside the
	// kernel's dumps.
	// Called on the look's goroutine; it must not block.
	FirstListed func()
}

const (
	defaultMaxDetail      = 1024
	defaultMaxDetailBytes = 1 << 20
	// A chain costs up to about 1 KiB of heap (table and chain names of
	// 255 bytes, index): 8192 of them, with the kept rules on top, keep the
	// hook's peak RSS under 30 MB (make bench).
	defaultMaxChains = 8192
	// fallbackBudget applies when the context carries no deadline, so a
	// hostile ruleset can never hang the caller.
	fallbackBudget = 10 * time.Second
)

// legacyShare is the part of a look's budget kept from the nftables read
// for the legacy look: a peek, then a probe of a few tables, takes
// milliseconds; a quarter of the budget, at most maxLegacyShare.
func legacyShare(budget time.Duration) time.Duration {
	return max(min(budget/4, maxLegacyShare), 0)
}

const maxLegacyShare = 300 * time.Millisecond

// Inspect reads the namespace. It returns what it saw by the context's
// deadline (or fallbackBudget), whatever the kernel or a neighbour does. An
// error (ErrDeadline, ErrTooMany, ErrIncomplete, ErrLegacyBusy, or another)
// comes with Truncated set: the snapshot is incomplete and must never be
// read as "clean".
func Inspect(ctx context.Context, h *netns.Handle, opt Options) (Snapshot, error) {
	if opt.MaxDetail <= 0 {
		opt.MaxDetail = defaultMaxDetail
	}
	if opt.MaxDetailBytes <= 0 {
		opt.MaxDetailBytes = defaultMaxDetailBytes
	}
	if opt.MaxChains <= 0 {
		opt.MaxChains = defaultMaxChains
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(fallbackBudget)
	}
	var s Snapshot
	var errs []error
	// The legacy probe runs while nftables is read: its process start
	// costs wall time only where it is not hidden behind the dumps.
	share := legacyShare(time.Until(deadline))
	legacy := startLegacy(h, deadline, share, opt.LegacyInProcess)
	nftDeadline := deadline
	if legacy != nil && (legacy.peek != nil || legacy.proc != nil) {
		// The peek's answer is read, and the probe started, after the
		// nftables read: a pod's huge native table whose dump took the
		// whole budget left them none, and the answer, long in, was
		// dropped as busy (the pod's legacy rules hidden behind a table
		// that is not usage). An in-process look runs beside the read
		// from the start, and its answer is taken whenever it came; a
		// look made in place (no probe wired) is done already.
		nftDeadline = deadline.Add(-share)
	}
	nftStart := time.Now()
	err := readNft(ctx, h, nftDeadline, opt, &s)
	s.NftTook = time.Since(nftStart)
	if err != nil || s.Truncated {
		s.NftPartial = true
		if err != nil {
			errs = append(errs, err)
		}
	}
	if legacy != nil {
		if err := legacy.wait(&s); err != nil {
			s.LegacyPartial = true
			errs = append(errs, err)
		}
	}
	err = errors.Join(errs...)
	if err != nil && (errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded)) {
		err = fmt.Errorf("%w: %w", ErrDeadline, err)
	}
	if err != nil {
		// Whatever went wrong, what is here is not the whole picture.
		s.Truncated = true
	}
	return s, err
}
