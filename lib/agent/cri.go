package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/iptables-alerter/iptables-alerter/lib/cri"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/scan"
)

// The CRI fallback, for runtimes with NRI off (CRI-O before 1.30 by
// default, containerd 1.7): every interval, list the pod sandboxes through
// the runtime's CRI socket and sweep each pod netns, in-process, skipping
// those unchanged since their last complete scan (see resweep.go). It sees
// only what a sweep sees: no moment of a container's start or stop.

// StageCRI is the stage of the fallback's findings (source "sweep").
const StageCRI = "CRI"

// criTimeout bounds one CRI call; criRetry is the wait after a list that
// failed.
const (
	criTimeout = 30 * time.Second
	criRetry   = 30 * time.Second
)

// RunCRI sweeps every interval through the CRI at Config.CRIEndpoint (a
// socket path or unix:// URL) until ctx ends. A runtime that does not
// answer is reported and tried again 30 s later (or at the next interval,
// if shorter).
func (a *Agent) RunCRI(ctx context.Context, interval time.Duration) error {
	endpoint := a.cfg.CRIEndpoint
	if endpoint == "" || interval <= 0 {
		return fmt.Errorf("%w: CRI endpoint %q, interval %v", ErrConfig, endpoint, interval)
	}
	client, err := cri.New(endpoint)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	defer client.Close()
	return a.withWorkers(func() error {
		return a.withSwept(ctx, func() error {
			return a.withResweep(ctx, func() error { return a.pollCRI(ctx, client, interval) })
		})
	})
}

// pollCRI lists the pods every interval and sweeps those that changed.
func (a *Agent) pollCRI(ctx context.Context, client *cri.Client, interval time.Duration) error {
	for {
		jobs, unread, pods, err := a.listCRI(ctx, client)
		wait := interval
		if err != nil {
			a.connection(false, err)
			// Soon again: until a list works, the agent has not looked
			// at every pod, and the node label says unknown.
			wait = min(interval, criRetry)
		} else {
			a.connection(true, nil)
			// Each sweep replaces the last one's remainder; a pod
			// unchanged since its last complete scan is skipped.
			a.sweepChanged(ctx, jobs, unread, pods)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		case <-a.listNow:
		}
	}
}

// listSoon asks pollCRI for a list of the pods now, the interval counted
// again after it; asked again before it ran, it runs once. It never
// waits. With NRI it does nothing: the runtime tells of each stop.
func (a *Agent) listSoon() {
	if a.cfg.CRIEndpoint == "" {
		return
	}
	select {
	case a.listNow <- struct{}{}:
	default:
	}
}

// listCRI lists the ready sandboxes and reads each one's netns path;
// unread are those whose status could not be read (not looked at).
func (a *Agent) listCRI(ctx context.Context, c *cri.Client) (jobs []job, unread []string, pods int, err error) {
	lctx, cancel := context.WithTimeout(ctx, criTimeout)
	defer cancel()
	list, err := c.ListReady(lctx)
	if err != nil {
		return nil, nil, 0, err
	}
	for _, p := range list {
		path, err := c.Netns(lctx, p.ID)
		if errors.Is(err, cri.ErrNotFound) {
			// Gone since the list.
			continue
		}
		if err != nil {
			// Its status not read: not looked at, until a list that
			// reads it.
			unread = append(unread, p.ID)
			continue
		}
		if path == "" {
			// Host network.
			continue
		}
		jobs = append(jobs, job{meta: scan.Meta{Node: a.cfg.Node, Source: SourceSweep, Stage: StageCRI, SandboxID: p.ID,
			Pod: findings.Pod{Namespace: p.Namespace, Name: p.Name, UID: p.UID}, Netns: path,
			Owner: ownerOf(p.Labels, p.Name)}})
	}
	return jobs, unread, len(list), nil
}
