package findings

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/fileio"
)

// lock takes an exclusive flock, polling so the caller's deadline holds even
// when another process keeps the lock.
func lock(ctx context.Context, f *os.File) error {
	if err := fileio.Flock(ctx, f, 2*time.Millisecond, nil); err != nil {
		return fmt.Errorf("lock %q: %w", f.Name(), err)
	}
	return nil
}
