//go:build !hookonly && !agentonly

// The consumers are left out of the hookonly build: their libraries' package
// init (client_golang, client-go) would run on every container start.

package main

import (
	"context"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"

	"github.com/iptables-alerter/iptables-alerter/lib/consumer"
	"github.com/iptables-alerter/iptables-alerter/lib/follow"
	"github.com/iptables-alerter/iptables-alerter/lib/textfile"
)

var textfileCommand = command{use: "textfile", summary: "write node-exporter textfile metrics from the findings file",
	long: textfileLong, newConfig: func() config { return new(textfileConfig) }}

const textfileLong = `Follows the findings file and keeps iptables_alerter.prom in the
node-exporter textfile directory up to date: per-pod iptables rule counts
for pods still on this node, the number of flagged pods, and counters of
findings and malformed lines. State and checkpoint live in --checkpoint-dir, so
a restart neither loses pods nor counts a line twice.

With --once it handles what is in the file now, writes the textfile and
exits (for a systemd timer); otherwise it follows until SIGTERM or SIGINT.
Exit status: 0 on success or a clean shutdown, 1 on an error (unreadable
state, unwritable directories, --checkpoint-dir held by another consumer
for a minute), 2 on bad flags.`

type textfileConfig struct {
	consumerFlags
	textfileDir        string
	once               bool
	forgetAfter, prune time.Duration
	log                logFlags
}

func (cfg *textfileConfig) register(fs *pflag.FlagSet) {
	cfg.consumerFlags.register(fs, textfile.DefaultStateDir, "serve /healthz on this address, e.g. 127.0.0.1:9755", "127.0.0.1:9761")
	fs.StringVar(&cfg.textfileDir, "textfile-dir", textfile.DefaultTextfileDir, "node-exporter --collector.textfile.directory")
	fs.BoolVar(&cfg.once, "once", false, "handle what is there, write the textfile and exit")
	fs.DurationVar(&cfg.forgetAfter, "forget-after", textfile.DefaultForgetAfter, "drop a pod this long after its latest finding when whether its netns still exists cannot be told (no netns path, its directory not visible); 0: never. A pod whose netns is gone is dropped at once, one whose netns is there is kept")
	fs.DurationVar(&cfg.prune, "prune-interval", 30*time.Second, "how often to drop pods whose netns is gone")
	cfg.log.register(fs)
}

func (cfg *textfileConfig) run(_ []string, s stdio) int {
	if cfg.poll <= 0 || cfg.prune <= 0 || cfg.forgetAfter < 0 {
		fmt.Fprintln(s.err, "iptables-alerter textfile: --poll and --prune-interval must be positive, --forget-after not negative")
		return 2
	}
	log := cfg.log.logger(s.err)
	fields := logrus.Fields{"findings": cfg.findings, "state_dir": cfg.checkpointDir, "textfile_dir": cfg.textfileDir}
	return runConsumer(log, fields, "textfile collector", func(ctx context.Context) error { return textfileLoop(ctx, *cfg, log, fields) })
}

func textfileLoop(ctx context.Context, cfg textfileConfig, log *logrus.Logger, fields logrus.Fields) error {
	lock, err := lockCheckpointDir(ctx, cfg.checkpointDir, 0o750, log.WithFields(fields))
	if lock == nil {
		return err
	}
	defer lock.Close()
	c, err := textfile.Open(cfg.checkpointDir, cfg.textfileDir)
	if err != nil {
		return err
	}
	c.ForgetAfter = cfg.forgetAfter
	r := &consumer.Runner{Findings: cfg.findings, Store: c, Poll: cfg.poll, Log: log.WithFields(fields), OnMalformed: c.CountMalformed,
		ResetHint: " (the saved state is damaged: starting empty)", Consumers: []consumer.Named{{Name: "textfile", Consumer: c}}}
	// Write once before reading anything: it proves the directories are
	// writable and publishes the saved state right after a restart.
	if _, err := c.Refresh(); err != nil {
		return err
	}
	if cfg.once {
		if err := r.Once(ctx); err != nil && ctx.Err() == nil {
			return err
		}
		if _, err := c.Refresh(); err != nil {
			return err
		}
		n, m := c.Counts()
		log.WithFields(fields).WithFields(logrus.Fields{"pods": len(c.Pods()), "findings_total": n, "malformed_total": m}).Info("textfile written")
		return nil
	}
	go every(ctx, cfg.prune, func() {
		n, err := c.Refresh()
		if err != nil {
			log.WithError(err).WithFields(fields).Warn("refresh textfile")
		} else if n > 0 {
			log.WithField("pods_dropped", n).Info("dropped pods that left the node")
		}
	})
	// A healthy loop waits at most the longest backoff between rounds.
	return serveRunner(ctx, r, log, fields, "textfile collector", cfg.consumerFlags, 2*follow.DefaultMaxBackoff+10*cfg.poll, nil, nil, nil)
}
