package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"

	"github.com/iptables-alerter/iptables-alerter/lib/netns"
	"github.com/iptables-alerter/iptables-alerter/lib/ocistate"
	"github.com/iptables-alerter/iptables-alerter/lib/scan"
)

var hookCommand = command{use: "hook [flags] < STATE", summary: "OCI hook: inspect the container's pod netns and record iptables usage",
	long: hookLong, args: true, neverFails: true, newConfig: func() config { return new(hookConfig) }}

const hookLong = `Runs as an OCI hook (poststart): reads the container state JSON on stdin and
the bundle's config.json, inspects the pod's network namespace read-only,
and appends one JSON line to the findings file when it finds iptables usage
new for the pod, could not see everything (state unknown), or finds the usage
it recorded gone. It always exits 0: a failing poststart hook would kill the
container.`

type hookConfig struct {
	record        recordFlags
	allow         allowFlags
	vendors       vendorFlags
	timeout       time.Duration
	stage         string
	node          string
	allContainers bool
	log           logFlags
}

func (cfg *hookConfig) register(fs *pflag.FlagSet) {
	cfg.record.register(fs)
	cfg.allow.register(fs)
	cfg.vendors.register(fs)
	fs.DurationVar(&cfg.timeout, "timeout", 2*time.Second, "internal deadline; past it the finding is recorded with truncated: true")
	fs.StringVar(&cfg.stage, "stage", "", "hook stage to record (default: from the state's status)")
	fs.StringVar(&cfg.node, "node", "", "node name to record (default: this host's name)")
	fs.BoolVar(&cfg.allContainers, "all-containers", false, "also inspect containers without kubelet labels")
	cfg.log.register(fs)
}

// run inspects and records; a bad flag never gets here, it exits 0 with
// one line in dispatch.
func (cfg *hookConfig) run(_ []string, s stdio) (code int) {
	stdin, stderr := s.in, s.err
	// Nothing may make the hook exit non-zero: a failing poststart hook
	// kills the container. With SIGPIPE ignored, a stderr nobody reads
	// gives write errors instead of killing the process.
	signal.Ignore(syscall.SIGPIPE)
	var log *logrus.Logger
	defer func() {
		if r := recover(); r != nil {
			logPanic(stderr, log, r)
			code = 0
		}
	}()
	if cfg.node == "" {
		cfg.node, _ = os.Hostname()
	}
	if cfg.timeout <= 0 {
		cfg.timeout = 2 * time.Second
	}
	start := time.Now()
	log = cfg.log.stderrLogger(stderr)
	// writing is held while a finding is written, so the watchdog never
	// ends the process half-way through an append.
	var writing sync.Mutex
	// The watchdog runs before anything that may block, --log-file's open
	// included.
	defer watchdog(log, cfg.timeout, &writing, stdin).Stop()
	cfg.log.addFile(log, stderr)
	hookOnce(*cfg, stdin, log, start, &writing)
	return 0
}

// logPanic reports a panic in one line, with where it happened: a table
// loader's, raised again by the look, carries its own stack.
func logPanic(stderr io.Writer, log *logrus.Logger, r any) {
	raw := debug.Stack()
	if p, ok := r.(*scan.LoaderPanic); ok {
		r, raw = p.Value, p.Stack
	}
	stack := strings.Join(strings.Fields(string(raw)), " ")
	if len(stack) > 4096 {
		stack = stack[:4096]
	}
	if log == nil {
		fmt.Fprintf(stderr, "iptables-alerter hook: internal error, nothing recorded: %v; stack: %s\n", r, stack)
		return
	}
	log.WithFields(logrus.Fields{"panic": fmt.Sprint(r), "stack": stack}).Error("internal error, nothing recorded")
}

// watchdog ends the process shortly after the deadline whatever it is
// blocked on (a stdin never closed, a stuck filesystem): the container's
// start must never wait on us.
func watchdog(log *logrus.Logger, timeout time.Duration, writing *sync.Mutex, stdin io.Reader) *time.Timer {
	return time.AfterFunc(timeout+time.Second, func() { giveUp(log, timeout, writing, stdin, os.Exit) })
}

// giveUpDrain is ocistate.DrainWithin for the watchdog, past the deadline
// already.
var giveUpDrain = 200 * time.Millisecond

// giveUp waits up to a second for a finding being written, logs that the
// hook gives up, and exits 0. The log line gets a moment, not a wait: the
// logger holds its lock while it writes, and the goroutine that is stuck
// may be the one writing to --log-file (a frozen filesystem, a hard NFS
// mount), holding it. What the stuck hook had not read of the state yet
// is read first, briefly: the process is past its deadline.
func giveUp(log *logrus.Logger, timeout time.Duration, writing *sync.Mutex, stdin io.Reader, exit func(int)) {
	for i := 0; i < 100 && !writing.TryLock(); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	logged := make(chan struct{})
	go func() {
		log.WithField("timeout", timeout.String()).Error("hook still running past its deadline, giving up")
		close(logged)
	}()
	select {
	case <-logged:
	case <-time.After(200 * time.Millisecond):
	}
	ocistate.Drain(stdin, giveUpDrain)
	exit(0)
}

func hookOnce(cfg hookConfig, stdin io.Reader, log *logrus.Logger, start time.Time, writing *sync.Mutex) {
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(cfg.timeout))
	defer cancel()
	if os.Geteuid() != 0 {
		log.Error("the hook must run as root: it enters pod network namespaces (CAP_SYS_ADMIN) and reads netfilter state (CAP_NET_ADMIN)")
		ocistate.Drain(stdin, ocistate.DrainWithin)
		return
	}
	c, err := ocistate.Read(stdin)
	if err != nil {
		log.WithError(err).Error("cannot read the container state, nothing inspected")
		return
	}
	l := log.WithFields(logrus.Fields{"container_id": c.ID, "sandbox_id": c.SandboxID,
		"pod_namespace": c.PodNamespace, "pod_name": c.PodName, "container": c.ContainerName})
	if why, lvl := scan.Skip(c, cfg.allContainers); why != "" {
		l.Log(lvl, why)
		return
	}
	l = l.WithField("netns", c.Netns)

	// Leave a fifth of the budget for writing the finding.
	inspectCtx, cancelInspect := context.WithDeadline(ctx, start.Add(cfg.timeout*4/5))
	res, err := scan.Run(inspectCtx, c.Netns, c.PodNamespace, loaders(&cfg.allow, &cfg.vendors))
	cancelInspect()
	switch {
	case errors.Is(err, netns.ErrNotExist):
		l.Info("netns is gone (pod already stopped), nothing to inspect")
		return
	case err != nil && (errors.Is(err, netns.ErrNotNetns) || c.SandboxID == ""):
		// Nothing names what could not be seen: no record.
		l.WithError(err).Error("cannot open the pod netns")
		return
	case err != nil:
		// A netns there that could not be opened (an LSM's denial, no
		// file descriptor left) is not a clean pod: its record says
		// unknown, as a look that could not finish does.
		res = scan.Result{Err: fmt.Errorf("cannot open the pod netns: %w", err)}
	}
	if res.AllowErr != nil {
		// A broken allowlist must not hide usage: report with the rest.
		l.WithError(res.AllowErr).Error("cannot load the allowlist, reporting without it")
	}
	if res.VendorErr != nil {
		l.WithError(res.VendorErr).Error("cannot load the vendor table, naming vendors from the built-in one")
	}
	// A clean look goes to the record step too: its gone takes back a
	// present or unknown record of the sandbox, and is dropped otherwise.
	record(cfg, l.WithField("allowlisted", res.Allowed.Count), scan.Decide(scan.ContainerMeta(c, cfg.node, cfg.stage), res), scan.SandboxKey(c, res), start, writing)
}

// hookSweepEvery spaces the memory's sweeps across the hook's processes
// (and the agent's): a sweep reads every entry, and each hook process used
// to sweep after each finding it recorded.
const hookSweepEvery = time.Minute

// record appends d's record unless the sandbox's memory already holds it,
// and logs the outcome.
func record(cfg hookConfig, l *logrus.Entry, d scan.Decision, key string, start time.Time, writing *sync.Mutex) {
	// Writing gets half a second past the deadline (the watchdog waits a
	// second), so a slow inspection still leaves its truncated finding.
	writeCtx, cancelWrite := context.WithDeadline(context.Background(), start.Add(cfg.timeout+500*time.Millisecond))
	defer cancelWrite()
	store := scan.Store{Log: cfg.record.log, Seen: cfg.record.seen, SweepEvery: hookSweepEvery}
	// The memory's sweep after a recorded finding runs under writing too:
	// a bounded read of small files under /run, well within the second
	// the watchdog waits for it.
	writing.Lock()
	out, err := store.Record(writeCtx, key, d)
	writing.Unlock()
	new(scan.RecordLog).Log(l, key, d.Record, out, err)
}
