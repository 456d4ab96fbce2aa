//go:build !hookonly

// The consumers are left out of the hookonly build: their libraries' package
// init (client_golang, client-go) would run on every container start.

package main

import (
	"context"
	"fmt"
	"os/signal"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/follow"
	"github.com/iptables-alerter/iptables-alerter/lib/textfile"
)

var textfileCommand = command{use: "textfile", summary: "write node-exporter textfile metrics from the findings file",
	long: textfileLong, newConfig: func() config { return new(textfileConfig) }}

const textfileLong = `Follows the findings file and keeps iptables_alerter.prom in the
node-exporter textfile directory up to date: per-pod iptables rule counts
for pods still on this node, the number of flagged pods, and counters of
findings and malformed lines. State and checkpoint live in --state-dir, so
a restart neither loses pods nor counts a line twice.

With --once it handles what is in the file now, writes the textfile and
exits (for a systemd timer); otherwise it follows until SIGTERM or SIGINT.
Exit status: 0 on success or a clean shutdown, 1 on an error (unreadable
state, unwritable directories), 2 on bad flags.`

type textfileConfig struct {
	findings, stateDir, textfileDir string
	once                            bool
	forgetAfter, poll, prune        time.Duration
	healthAddr, probeAddr           string
	log                             logFlags
}

func (cfg *textfileConfig) register(fs *pflag.FlagSet) {
	fs.StringVar(&cfg.findings, "findings", findings.DefaultPath, "findings file to read, and its rotated copy PATH.1")
	fs.StringVar(&cfg.stateDir, "state-dir", textfile.DefaultStateDir, "directory for the pod state and the checkpoint")
	fs.StringVar(&cfg.textfileDir, "textfile-dir", textfile.DefaultTextfileDir, "node-exporter --collector.textfile.directory")
	fs.BoolVar(&cfg.once, "once", false, "handle what is there, write the textfile and exit")
	fs.DurationVar(&cfg.forgetAfter, "forget-after", textfile.DefaultForgetAfter, "drop a pod this long after its latest finding when whether its netns still exists cannot be told (no netns path, its directory not visible); 0: never. A pod whose netns is gone is dropped at once, one whose netns is there is kept")
	fs.DurationVar(&cfg.poll, "poll", follow.DefaultPoll, "how often to look for new lines")
	fs.DurationVar(&cfg.prune, "prune-interval", 30*time.Second, "how often to drop pods whose netns is gone")
	fs.StringVar(&cfg.healthAddr, "health-addr", "", "serve /healthz on this address, e.g. 127.0.0.1:9755 (empty: off)")
	registerProbeAddr(fs, &cfg.probeAddr, "127.0.0.1:9761")
	cfg.log.register(fs)
}

func (cfg *textfileConfig) run(_ []string, s stdio) int {
	if cfg.poll <= 0 || cfg.prune <= 0 || cfg.forgetAfter < 0 {
		fmt.Fprintln(s.err, "iptables-alerter textfile: --poll and --prune-interval must be positive, --forget-after not negative")
		return 2
	}
	log := cfg.log.logger(s.err)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := textfileLoop(ctx, *cfg, log); err != nil {
		log.WithError(err).WithFields(logrus.Fields{"findings": cfg.findings, "state_dir": cfg.stateDir, "textfile_dir": cfg.textfileDir}).Error("textfile collector stopped")
		return 1
	}
	return 0
}

func textfileLoop(ctx context.Context, cfg textfileConfig, log *logrus.Logger) error {
	c, err := textfile.Open(cfg.stateDir, cfg.textfileDir)
	if err != nil {
		return err
	}
	c.ForgetAfter = cfg.forgetAfter
	c.Malformed = func(err error) {
		log.WithError(err).WithField("findings", cfg.findings).Warn("skipping malformed findings line")
	}
	f := c.Follower(cfg.findings)
	f.Reset = func(err error) {
		log.WithError(err).WithField("state_dir", cfg.stateDir).Warn("saved state is damaged: starting empty and reading the findings file again from its oldest line")
	}
	f.Poll = cfg.poll
	f.Retry = func(err error, wait time.Duration) {
		log.WithError(err).WithField("retry_in", wait.String()).Warn("textfile collector will retry")
	}
	// Write once before reading anything: it proves the directories are
	// writable and publishes the saved state right after a restart.
	if _, err := c.Refresh(); err != nil {
		return err
	}
	fields := logrus.Fields{"findings": cfg.findings, "state_dir": cfg.stateDir, "textfile_dir": cfg.textfileDir}
	if cfg.once {
		if err := f.Once(ctx, c.Handle); err != nil && ctx.Err() == nil {
			return err
		}
		if _, err := c.Refresh(); err != nil {
			return err
		}
		n, m := c.Counts()
		log.WithFields(fields).WithFields(logrus.Fields{"pods": len(c.Pods()), "findings_total": n, "malformed_total": m}).Info("textfile written")
		return nil
	}
	if cfg.healthAddr != "" || cfg.probeAddr != "" {
		// A healthy loop waits at most the longest backoff between rounds.
		srv, err := serveHealth(cfg.healthAddr, cfg.probeAddr, f.Alive, 2*follow.DefaultMaxBackoff+10*cfg.poll, nil, nil)
		if err != nil {
			return err
		}
		defer srv.Close()
	}
	go func() {
		t := time.NewTicker(cfg.prune)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				n, err := c.Refresh()
				if err != nil {
					log.WithError(err).WithFields(fields).Warn("refresh textfile")
				} else if n > 0 {
					log.WithField("pods_dropped", n).Info("dropped pods that left the node")
				}
			}
		}
	}()
	log.WithFields(fields).Info("textfile collector following")
	if err := f.Run(ctx, c.Handle); err != nil {
		return err
	}
	log.WithFields(fields).WithField("offset", f.Checkpoint().Offset).Info("textfile collector stopped, checkpoint saved")
	return nil
}
