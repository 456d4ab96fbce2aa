// Package consumer runs the findings file's consumers (forward's Events
// and Reports, textfile; next ones alike): one Runner follows the file
// (lib/follow), parses each line once, counts a malformed line once,
// keeps the checkpoint and says for /healthz when it last went round, and
// hands each finding to its consumers in order, timing and logging each
// (node_exporter's collector execute is the model, without a registry:
// the command names its consumers).
//
// Invariants: a consumer's error means "not handled, may work later": the
// line comes again after a backoff, later lines wait (order kept, nothing
// lost), and the consumers that handled it already are not called again
// for it; anything final (set aside, counted) is the consumer's nil.
package consumer

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/follow"
)

// Consumer handles one finding; see the package doc for its error.
type Consumer interface {
	Consume(ctx context.Context, rec findings.Record) error
}

// Flusher is a consumer that keeps work back to do it in bulk (one API
// write for many findings): Flush does it, and runs before each checkpoint
// save, so a finding counts as handled only once its work is done. An
// error keeps the checkpoint and is retried.
type Flusher interface {
	Flush(ctx context.Context) error
}

// Named is a consumer with its name in logs.
type Named struct {
	Name string
	Consumer
}

// Runner follows one findings file for its consumers. Set the fields
// before Run or Once; Alive and Malformed may be read meanwhile.
type Runner struct {
	// Findings is the file to follow, Store where its checkpoint lives.
	Findings string
	Store    follow.Store
	// Poll, MaxBackoff and Batch are the follower's (zero: its defaults).
	Poll, MaxBackoff time.Duration
	Batch            int
	Consumers        []Named
	Log              logrus.FieldLogger
	// OnMalformed, if set, is told about each malformed or skipped line
	// after the runner counted it (textfile keeps its own count).
	OnMalformed func(error)
	// RetryMsg is the log line of a retry (default "finding not handled,
	// will retry the same finding").
	RetryMsg string
	// ResetHint ends the log line of a damaged checkpoint: what reading
	// the file again from its oldest line means for these consumers.
	ResetHint string

	once      sync.Once
	f         *follow.Follower
	malformed atomic.Int64
	retries   atomic.Int64
	// resume is the line a consumer failed on and the next consumer to
	// call with it: the follower hands the same line again after an error.
	resume struct {
		line []byte
		next int
	}
}

// follower makes the follower once: /healthz asks Alive while Run starts.
func (r *Runner) follower() *follow.Follower {
	r.once.Do(r.makeFollower)
	return r.f
}

func (r *Runner) makeFollower() {
	f := follow.New(r.Findings, r.Store)
	if r.Poll > 0 {
		f.Poll = r.Poll
	}
	if r.MaxBackoff > 0 {
		f.MaxBackoff = r.MaxBackoff
	}
	if r.Batch > 0 {
		f.Batch = r.Batch
	}
	f.Skipped = func(s follow.Skip) {
		if s.Size < 0 {
			// A gap: lines may be lost, counted with what was skipped.
			r.countSkipped(fmt.Errorf("gap in %q after offset %d: %s", s.File, s.Offset, s.Reason), "findings lines may be lost")
			return
		}
		r.countMalformed(fmt.Errorf("skip %q offset %d (%d bytes): %s", s.File, s.Offset, s.Size, s.Reason))
	}
	f.Reset = func(err error) {
		r.Log.WithError(err).WithField("findings", r.Findings).Warn("checkpoint is damaged: reading the findings file again from its oldest line" + r.ResetHint)
	}
	f.Flush = r.flush
	f.Retry = func(err error, wait time.Duration) {
		r.retries.Add(1)
		msg := r.RetryMsg
		if msg == "" {
			msg = "finding not handled, will retry the same finding"
		}
		r.Log.WithError(err).WithField("retry_in", wait.String()).Warn(msg)
	}
	r.f = f
}

// Run follows the file until ctx ends, then saves the checkpoint.
func (r *Runner) Run(ctx context.Context) error { return r.follower().Run(ctx, r.handle) }

// Once handles what the file holds now and returns.
func (r *Runner) Once(ctx context.Context) error { return r.follower().Once(ctx, r.handle) }

// Alive is when the follow loop last went round or handled a line (zero
// before Run).
func (r *Runner) Alive() time.Time { return r.follower().Alive() }

// Touch is a sign of life from a consumer's long work (see follow's).
func (r *Runner) Touch() { r.follower().Touch() }

// CaughtUp is the latest moment every line written before it was handed
// to every consumer (see follow's).
func (r *Runner) CaughtUp() time.Time { return r.follower().CaughtUp() }

// Offset is how far the file was handled.
func (r *Runner) Offset() int64 { return r.follower().Checkpoint().Offset }

// Malformed counts the lines that were no finding; Retries the attempts
// that failed and were retried.
func (r *Runner) Malformed() int64 { return r.malformed.Load() }
func (r *Runner) Retries() int64   { return r.retries.Load() }

func (r *Runner) countMalformed(err error) { r.countSkipped(err, "skipping malformed findings line") }

// countSkipped counts a line (or a gap) not handed to the consumers and
// logs it with msg.
func (r *Runner) countSkipped(err error, msg string) {
	r.malformed.Add(1)
	r.Log.WithError(err).WithField("findings", r.Findings).Warn(msg)
	if r.OnMalformed != nil {
		r.OnMalformed(err)
	}
}

// handle parses line once and hands it to each consumer in turn, from the
// one that failed last time when it is the same line again.
func (r *Runner) handle(ctx context.Context, line []byte) error {
	rec, err := findings.Parse(line)
	if err != nil {
		r.countMalformed(err)
		return nil
	}
	first := 0
	if r.resume.line != nil && bytes.Equal(r.resume.line, line) {
		first = r.resume.next
	}
	r.resume.line = nil
	for i := first; i < len(r.Consumers); i++ {
		if err := r.execute(ctx, r.Consumers[i], rec); err != nil {
			r.resume.line, r.resume.next = line, i
			return err
		}
	}
	return nil
}

// execute runs one consumer on rec, timed and logged.
func (r *Runner) execute(ctx context.Context, c Named, rec findings.Record) error {
	begin := time.Now()
	err := c.Consume(ctx, rec)
	entry := r.Log.WithFields(logrus.Fields{"consumer": c.Name, "duration_seconds": time.Since(begin).Seconds()})
	if err != nil {
		entry.WithError(err).Debug("consumer failed")
		return fmt.Errorf("%s: %w", c.Name, err)
	}
	entry.Debug("consumer done")
	return nil
}

// flush runs the consumers' Flush, in order.
func (r *Runner) flush(ctx context.Context) error {
	for _, c := range r.Consumers {
		if fl, ok := c.Consumer.(Flusher); ok {
			if err := fl.Flush(ctx); err != nil {
				return fmt.Errorf("%s: %w", c.Name, err)
			}
		}
	}
	return nil
}

// LogFields name rec in every consumer's log line about it.
func LogFields(rec findings.Record) logrus.Fields {
	return logrus.Fields{
		"pod_namespace": rec.Pod.Namespace,
		"pod_name":      rec.Pod.Name,
		"pod_uid":       rec.Pod.UID,
		"container_id":  rec.ContainerID,
		"fingerprint":   rec.Fingerprint,
		"state":         string(rec.State),
	}
}
