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

// Options bounds the inspection.
type Options struct {
	// Detail says which rules to keep with their expression data; nil keeps
	// none. Only kept rules can be rendered or allowlisted.
	Detail func(fam Family, table string, xt bool) bool
	// MaxDetail bounds the kept rules (memory): a pod may hold millions.
	MaxDetail int
	// MaxChains bounds the chains tracked; beyond it the snapshot is
	// truncated.
	MaxChains int
}

const (
	defaultMaxDetail = 1024
	defaultMaxChains = 65536
	// fallbackBudget applies when the context carries no deadline, so a
	// hostile ruleset can never hang the caller.
	fallbackBudget = 10 * time.Second
)

// Inspect reads the namespace. On a deadline it returns what it saw with
// Truncated set and an error wrapping ErrDeadline; other errors mean the
// snapshot is incomplete and must never be read as "clean".
func Inspect(ctx context.Context, h *netns.Handle, opt Options) (Snapshot, error) {
	if opt.MaxDetail <= 0 {
		opt.MaxDetail = defaultMaxDetail
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
	legacy := startLegacy(h, deadline)
	if err := readNft(ctx, h, deadline, opt, &s); err != nil {
		errs = append(errs, err)
	}
	if legacy != nil {
		if err := legacy.wait(deadline, &s); err != nil {
			errs = append(errs, err)
		}
	}
	err := errors.Join(errs...)
	if err != nil && (errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded)) {
		err = fmt.Errorf("%w: %w", ErrDeadline, err)
	}
	if errors.Is(err, ErrDeadline) {
		s.Truncated = true
	}
	return s, err
}
