//go:build !hookonly && !agentonly

package main

import (
	"context"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"

	"github.com/iptables-alerter/iptables-alerter/lib/consumer"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/follow"
)

// consumerFlags are the flags every findings consumer (forward, textfile)
// takes, registered with one help text each.
type consumerFlags struct {
	findings, checkpointDir, healthAddr, probeAddr string
	poll                                           time.Duration
}

// register adds them to fs, the checkpoint directory defaulting to dir;
// health says what --health-addr serves, with the port the shipped
// manifests give it, and probe is their --probe-addr.
func (c *consumerFlags) register(fs *pflag.FlagSet, dir, health, probe string) {
	fs.StringVar(&c.findings, "findings", findings.DefaultPath, "findings file to follow; its rotated generations PATH.N ... PATH.1 are finished first, oldest first")
	fs.StringVar(&c.checkpointDir, "checkpoint-dir", dir, "directory of this consumer's checkpoint and state (created if missing): where it got to in the findings file, so a restart neither loses nor repeats a finding")
	// The consumers' directory had the hook's and agent's name for their
	// per-sandbox memory, a different thing; kept for one release.
	fs.StringVar(&c.checkpointDir, "state-dir", dir, "deprecated: --checkpoint-dir")
	_ = fs.MarkDeprecated("state-dir", "use --checkpoint-dir (the same directory); --state-dir goes in the next release")
	fs.StringVar(&c.healthAddr, "health-addr", "", health+" (empty: off)")
	registerProbeAddr(fs, &c.probeAddr, probe)
	fs.DurationVar(&c.poll, "poll", follow.DefaultPoll, "how often to look for new lines")
}

// lockWait bounds how long a consumer waits for its checkpoint directory
// while another holds it, then exits 1 saying why: a second install of a
// consumer on the node crash-loops with that line in its log, and a
// one-shot run beside the daemon fails rather than hang its timer's unit;
// a restart's overlap is over well within it.
var lockWait = time.Minute

// lockCheckpointDir creates the consumer's checkpoint directory (perm) and
// holds it (follow.LockDir), saying so while another consumer does; nil
// and no error when ctx ended meanwhile: a stop, not a failure.
func lockCheckpointDir(ctx context.Context, dir string, perm os.FileMode, log logrus.FieldLogger) (*os.File, error) {
	lctx, cancel := context.WithTimeout(ctx, lockWait)
	defer cancel()
	f, err := follow.LockDir(lctx, dir, perm, func() {
		log.Warn("another consumer holds the checkpoint directory (--checkpoint-dir): waiting for it, a minute at most; two consumers must not share one (each would save over the other's checkpoint)")
	})
	if err != nil && ctx.Err() != nil {
		return nil, nil
	}
	return f, err
}

// runConsumer runs loop until SIGTERM or SIGINT: exit status 0 after a
// clean shutdown, 1 when loop failed (logged as "WHAT stopped").
func runConsumer(log *logrus.Logger, fields logrus.Fields, what string, loop func(context.Context) error) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := loop(ctx); err != nil {
		log.WithError(err).WithFields(fields).Error(what + " stopped")
		return 1
	}
	return 0
}

// serveRunner serves /healthz on the flags' addresses (when set; stalled after limit,
// degraded and metrics as serveHealth's) and runs r until ctx ends, with
// the start and stop log lines; stopped, when set, gives the totals the
// last one carries.
func serveRunner(ctx context.Context, r *consumer.Runner, log *logrus.Logger, fields logrus.Fields, what string, c consumerFlags, limit time.Duration, degraded func() string, metrics http.Handler, stopped func() logrus.Fields) error {
	if c.healthAddr != "" || c.probeAddr != "" {
		srv, err := serveHealth(c.healthAddr, c.probeAddr, r.Alive, limit, degraded, metrics)
		if err != nil {
			return err
		}
		defer srv.Close()
	}
	log.WithFields(fields).Info(what + " following")
	if err := r.Run(ctx); err != nil {
		return err
	}
	entry := log.WithFields(fields).WithField("offset", r.Offset())
	if stopped != nil {
		entry = entry.WithFields(stopped())
	}
	entry.Info(what + " stopped, checkpoint saved")
	return nil
}

// every calls f every d until ctx ends.
func every(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}
