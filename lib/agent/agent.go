package agent

import (
	"context"
	"errors"
	"fmt"
	stdnet "net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/api"
	nrilog "github.com/containerd/nri/pkg/log"
	nrinet "github.com/containerd/nri/pkg/net"
	"github.com/containerd/nri/pkg/stub"
	"github.com/containerd/ttrpc"

	"github.com/iptables-alerter/iptables-alerter/lib/allowlist"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/netns"
	"github.com/iptables-alerter/iptables-alerter/lib/scan"
)

// Sources recorded in findings, one per moment the agent scans at.
const (
	SourceSweep     = "sweep"
	SourcePostStart = "poststart"
	SourceStop      = "stop"
)

// Defaults for Config's zero values.
const (
	DefaultSocket      = api.DefaultSocketPath
	DefaultPluginName  = "iptables-alerter"
	DefaultPluginIndex = "50"
	DefaultWorkers     = 2
	DefaultQueue       = 1024
	// DefaultScanTimeout is the hook's deadline: at about 15,000 rules a
	// second, a pod with more than about 30,000 rules is always truncated
	// (its counts lower bounds), and no pod holds a worker longer than
	// the others' scans can wait.
	DefaultScanTimeout = 2 * time.Second
	// DefaultStopScanTimeout is the stop's deadline when it may take
	// longer (see queue.take): the last look at a container's rules.
	DefaultStopScanTimeout = 30 * time.Second
	// Reconnect backoff: the runtime restarting takes seconds; a node
	// without NRI should not see a connect attempt more often than this.
	minBackoff = 500 * time.Millisecond
	maxBackoff = 30 * time.Second
	// drainStops bounds the stop scans that still run when the agent
	// stops (queue.close), well within the DaemonSet's 30 s grace
	// period; a scan running then still gets its own deadline.
	drainStops = 10 * time.Second
	// configureWait bounds the wait for the runtime's Configure after a
	// dial (connectOnce): the runtime sends it right after RegisterPlugin,
	// within its own registration timeout (5 s by default).
	configureWait = 30 * time.Second
)

// ErrConfig marks an error the agent cannot get past by retrying: the
// caller exits non-zero on it, and only on it.
var ErrConfig = errors.New("configuration error")

// Config is what the agent needs. Zero values take the defaults above.
type Config struct {
	Socket      string
	PluginName  string
	PluginIndex string
	Node        string
	Log         findings.Log
	Seen        findings.Seen
	// Load gives the allowlist and vendor table (as the hook's flags load
	// them); called only when a scan finds usage.
	Load        scan.Loaders
	Workers     int
	Queue       int
	ScanTimeout time.Duration
	// StopScanTimeout is a stop's deadline when no other scan waits and
	// another worker is free; never below ScanTimeout.
	StopScanTimeout time.Duration
	Observer        Observer
	// NRILogger receives the stub's own log lines; nil discards them.
	NRILogger nrilog.Logger
	// HostProc is the host's /proc, where New finds the node's network
	// namespace (HostProc/1/ns/net) to tell host-network pods apart; New
	// fails with ErrConfig when it cannot open it. Empty: no check, and a
	// runtime that reports the node's namespace for a host-network pod
	// (CRI-O) has the node's rules reported as the pod's.
	HostProc string
	// MaxUsage bounds the pods Agent.Usage follows (DefaultMaxUsage for 0).
	MaxUsage int
	// ResweepInterval is the time between re-sweeps (resweep.go); unlike
	// the others, 0 is no re-sweep (the command's flag defaults to
	// DefaultResweepInterval).
	ResweepInterval time.Duration
	// Watch holds a monitor of nftables commits in every running pod's
	// netns and scans on each burst of iptables-shaped changes (see
	// watch.go); WatchDebounce is the burst's window (DefaultWatchDebounce
	// for 0).
	Watch         bool
	WatchDebounce time.Duration
	// HostNetns, when set, is node mode (node.go): the watch also holds a
	// monitor in this network namespace, taken as the node's, with the
	// platform allowlist. It needs Watch; with HostProc set it must be
	// the namespace of HostProc's pid 1. Empty: off. It needs NRI: the
	// CRI fallback (CRIEndpoint) never watches, so the node's netns would
	// never be looked at, and New refuses the two together.
	HostNetns string
	// CRIEndpoint is the CRI socket RunCRI sweeps through, where NRI is
	// off (see cri.go).
	CRIEndpoint string
	// ExecWatch listens to the kernel's process events for every run of
	// an iptables tool on the node (exec.go); it needs Watch (the sandboxes
	// and containers the commands are placed in) and the initial pid
	// namespace. Where it cannot listen it is off, with the reason in
	// Health.Degraded and a metric: the rest of the agent works.
	ExecWatch bool
	// ExecLossEvery is how often what the exec watch could not record is
	// summed up for the Observer (ExecObserver.ExecLost);
	// DefaultExecLossEvery for 0.
	ExecLossEvery time.Duration
	// Platforms names the network plugins whose entries of the platform
	// list node mode applies besides kube-proxy's and the kubelet's
	// (allowlist.Plugins lists them); an unknown name is ErrConfig.
	Platforms []string
	// PlatformOSKept: the node's OS image answers for what the platform's
	// own rules need (OpenShift: Red Hat ships each stream's image with
	// its platform), so node mode leaves the level of the rules the
	// platform list takes away out of the node's readiness (Usage). By
	// default it counts there: a plain cluster's kube-proxy in iptables
	// mode needs kernel-modules-extra on RHEL 10.
	PlatformOSKept bool
}

// Observer hears about the agent's work, for the caller's logs (the agent
// keeps its health and metrics itself, before the Observer hears). Calls come
// from handlers and workers concurrently and must not block.
type Observer interface {
	// Handled: one NRI event took d to answer.
	Handled(event string, d time.Duration)
	// Scanned: one scan ended.
	Scanned(Scan)
	// Synced: the runtime's Synchronize listed pods, of which queued had a
	// network namespace of their own to sweep (not the node's, not a
	// stopped sandbox's) and no event's scan waiting (which covers the
	// sweep's). Called before any of the sweep's scans ends.
	Synced(pods, queued int)
	// Connection: connected (true) or lost (false, with why).
	Connection(up bool, err error)
}

// Outcome of one scan, as far as the agent's side goes: Found hands the
// record to the record step, whose findings.Outcome Scan.Stored holds.
type Outcome string

const (
	Found   Outcome = "found"   // usage (or an incomplete inspection): recorded through scan.Store
	Clean   Outcome = "clean"   // complete, nothing left after the allowlist
	Gone    Outcome = "gone"    // at a stop, the netns was gone before it could be read
	Dropped Outcome = "dropped" // the queue was full; not scanned
	Failed  Outcome = "failed"  // the netns could not be opened
	// Unreachable: the runtime says the pod runs (sweep, poststart) but its
	// netns path is not there, or not a netns, in the agent's view: most
	// likely the netns directory is not mounted into the agent's container.
	// An error, never "clean" nor "gone".
	Unreachable Outcome = "unreachable"
)

// Scan is the report of one scan. Record and Stored are set with Found. Err
// is set with Failed and Unreachable, and with Found when the record step
// failed or, the finding recorded, the memory or rotation needs attention;
// AllowErr and VendorErr when the admin's allowlist or vendor table could
// not be loaded (usage is then reported with the built-in ones).
type Scan struct {
	Meta      scan.Meta
	Outcome   Outcome
	Stored    findings.Outcome
	Duration  time.Duration
	Record    *findings.Record
	Err       error
	AllowErr  error
	VendorErr error
	// FirstUnreachable is set on the first Unreachable scan of its
	// sandbox: the one worth a warning, not each scan's.
	FirstUnreachable bool
	// Kept is what the record step's memory keeps of the pod's usage,
	// read after a look that could not see everything (Usage keeps its
	// worse level, where the agent's own memory of the pod is lost with a
	// restart); nil otherwise or when it keeps none.
	Kept *findings.KeptUsage
	// RanOut: the look's nftables read reached the scan's deadline (its
	// counts are lower bounds); the queue then holds the sandbox to fewer
	// workers.
	RanOut bool
	// Platform is, for a scan of the node's namespace, the worst level of
	// the platform's rules (scan.Result.Platform) that counts in the
	// node's readiness: "" for none, or with PlatformOSKept.
	Platform string
}

// Label names how the scan ended in one word, the record step's outcome
// when it got that far: recorded, same, limited, clean, gone, dropped,
// failed, unreachable.
func (s Scan) Label() string {
	if s.Outcome == Found {
		return string(s.Stored)
	}
	return string(s.Outcome)
}

// Agent is the NRI plugin. New makes one; Run connects it.
type Agent struct {
	cfg Config
	// store records findings: cfg.Log through cfg.Seen.
	store *scan.Store
	// queue holds the scans to run, the events' and the sweeps'.
	queue   *queue
	workers sync.WaitGroup
	// hold, when set (tests), makes each worker wait for a token before
	// a scan, to order scans against the runtime's teardown.
	hold chan struct{}
	// drainWait is how long the stop scans left waiting at the agent's
	// stop may run (drainStops; shorter in tests).
	drainWait time.Duration
	// configureWait is configureWait, shorter in tests.
	configureWait time.Duration
	// runtime is the loop of connections to the runtime (nriLoop); tests
	// that play the runtime themselves, calling the handlers, replace it:
	// a failed dial beside them says the agent is disconnected and
	// unlists every pod, whenever the backoff ends.
	runtime func(context.Context) error
	// usage follows the running pods' usage, from the scans and sweeps.
	usage *Usage
	// health and metrics are what the agent says of itself, for the
	// caller's /healthz and /metrics; fed before the Observer hears.
	health  *Health
	metrics *metrics
	// nodeNetns is the node's network namespace's identity (see
	// nodeNetnsID), empty with Config.HostProc empty.
	nodeNetns string
	// known holds the running sandboxes and the State of their last
	// complete scan, for the re-sweep.
	known *sandboxes
	// resweepNow asks the re-sweep loop for a re-sweep before its
	// interval ends (resweepSoon).
	resweepNow chan struct{}
	// listNow asks the CRI fallback for a list of the pods before its
	// interval ends (listSoon).
	listNow chan struct{}
	// watches are the watched sandboxes (Config.Watch). Not one registry
	// with known: a watch starts at RunPodSandbox, before any container
	// (known starts at the first scan's event, its State then meaningful),
	// covers the runtime's whole list (a stopped sandbox's watch ends on
	// its own), holds a goroutine and a socket, and exists only with the
	// watch on. Both forget a sandbox at the same moments (stopped).
	watches *watches
	// execs is the exec watch (Config.ExecWatch).
	execs *execs
	// swept: a sweep queued scans, and the queue has not emptied since
	// (work.go returns its garbage then).
	swept atomic.Bool
}

// job is one queued scan. h is the namespace opened in the handler, or nil
// to open meta.Netns when the scan starts.
type job struct {
	meta scan.Meta
	h    *netns.Handle
	// writer is the process whose commit made the watch queue the scan.
	writer *findings.Writer
	// exec is the iptables command the exec watch saw make the change, or
	// the commit come from (exec.go).
	exec *findings.Exec
}

// SpareProcessor gives the Go scheduler one processor (P) more than the
// scans can hold (its workers, at most one per CPU): with as many as busy
// workers, an NRI call's goroutine, and the network poll that wakes it,
// wait for Go's preemption of a decoding scan (sysmon, 10 ms) before the
// handler runs: the round trip's p99 was 15 to 18 ms while the handlers
// took microseconds (docs/performance.md). With one idle P a thread waits
// in the poller and the kernel's scheduler runs the call at once. It sets
// the process's GOMAXPROCS, so the command that runs the agent calls it.
func (a *Agent) SpareProcessor() {
	if n := min(a.cfg.Workers, runtime.NumCPU()) + 1; runtime.GOMAXPROCS(0) < n {
		runtime.GOMAXPROCS(n)
	}
}

// New checks cfg and fills its defaults. A bad plugin name or index, or a
// HostProc without the node's network namespace, is an ErrConfig.
func New(cfg Config) (*Agent, error) {
	if cfg.Socket == "" {
		cfg.Socket = DefaultSocket
	}
	if cfg.PluginName == "" {
		cfg.PluginName = DefaultPluginName
	}
	if cfg.PluginIndex == "" {
		cfg.PluginIndex = DefaultPluginIndex
	}
	if err := api.CheckPluginIndex(cfg.PluginIndex); err != nil {
		return nil, fmt.Errorf("%w: plugin index %q: %w", ErrConfig, cfg.PluginIndex, err)
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.Queue <= 0 {
		cfg.Queue = DefaultQueue
	}
	if cfg.ScanTimeout <= 0 {
		cfg.ScanTimeout = DefaultScanTimeout
	}
	if cfg.StopScanTimeout <= 0 {
		cfg.StopScanTimeout = DefaultStopScanTimeout
	}
	cfg.StopScanTimeout = max(cfg.StopScanTimeout, cfg.ScanTimeout)
	if cfg.WatchDebounce <= 0 {
		cfg.WatchDebounce = DefaultWatchDebounce
	}
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	if cfg.NRILogger == nil {
		cfg.NRILogger = nopLogger{}
	}
	if cfg.Load.Allow == nil {
		cfg.Load.Allow = func() (*allowlist.List, error) { return allowlist.Join(), nil }
	}
	a := &Agent{cfg: cfg, store: &scan.Store{Log: cfg.Log, Seen: cfg.Seen, SweepEvery: memorySweepEvery}, queue: newQueue(cfg.Queue), usage: NewUsage(cfg.MaxUsage),
		health: NewHealth(), known: newSandboxes(), resweepNow: make(chan struct{}, 1), listNow: make(chan struct{}, 1), watches: newWatches(), execs: &execs{legacyAbsent: legacyAbsent}, drainWait: drainStops, configureWait: configureWait}
	a.runtime = a.nriLoop
	a.metrics = newMetrics(a.health, a.usage, a.execs.up.Load, a.execStats)
	if cfg.HostProc != "" {
		// An agent that cannot tell the node's namespace from a pod's
		// reports the node's rules on every host-network pod: refuse.
		id, err := nodeNetnsID(cfg.HostProc)
		if err != nil {
			return nil, err
		}
		a.nodeNetns = id
	}
	// Checked with node mode off too: a typo must not wait for it.
	if _, err := allowlist.Platform(cfg.Platforms...); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if cfg.HostNetns != "" {
		if cfg.CRIEndpoint != "" {
			return nil, fmt.Errorf("%w: the node's watch (host netns %q) needs NRI, not the CRI endpoint %q", ErrConfig, cfg.HostNetns, cfg.CRIEndpoint)
		}
		if !cfg.Watch {
			return nil, fmt.Errorf("%w: the node's watch (host netns %q) needs the watch on", ErrConfig, cfg.HostNetns)
		}
		if err := a.checkHostNetns(); err != nil {
			return nil, err
		}
	}
	// The stub checks the name and index; a bad one will not get better
	// by reconnecting.
	if _, err := a.newStub(a); err != nil {
		return nil, err
	}
	return a, nil
}

// Usage is the running pods' iptables usage as the agent's scans found
// it (served in Collectors).
func (a *Agent) Usage() *Usage { return a.usage }

// Health is whether the agent is alive and sees what it should, for the
// caller's /healthz.
func (a *Agent) Health() *Health { return a.health }

// Looked tells whether the agent has looked at every pod the runtime
// runs, how many, and since when the findings it rests on were all
// written (see sandboxes.everyLooked): connected now, and each pod's
// usage, if any, in the findings. keepSwept writes it down for the node
// label (findings.Swept): a clean pod leaves no finding, so without it no
// finding would read as clean.
func (a *Agent) Looked() (pods int, since time.Time, ok bool) {
	if !a.health.Connected() {
		return 0, time.Time{}, false
	}
	// Node mode whose watch of the node's netns never started: the
	// node's own rules were never read.
	if _, node := a.known.blind(); a.cfg.HostNetns != "" && !node {
		return 0, time.Time{}, false
	}
	return a.known.everyLooked()
}

// scanned reports one ended scan: to the usage, health and metrics first,
// so that an observer hearing of it finds them updated.
func (a *Agent) scanned(s Scan) {
	switch {
	case s.Meta.Stage == stageStopPod:
		a.ended(s.Meta.SandboxID)
	case s.Outcome == Gone:
		a.stopped(s.Meta.SandboxID)
	case (s.Outcome == Unreachable || s.Outcome == Failed) && !isNodeJob(s.Meta) && s.Meta.Source != SourceStop:
		a.known.markUnseen(s.Meta.SandboxID)
	}
	if !isNodeJob(s.Meta) {
		// Usage follows pods: the node's is in its findings, but for
		// what the platform's rules need (scan: NodeScanned).
		a.usage.Scanned(s)
	}
	s.FirstUnreachable = a.health.Scanned(s)
	a.metrics.scanned(s)
	a.rewatch(s)
	a.cfg.Observer.Scanned(s)
}

// synced reports the start of a sweep of queued scans of the runtime's
// pods.
func (a *Agent) synced(pods, queued int) {
	a.health.Synced(queued)
	a.metrics.lastSync.SetToCurrentTime()
	a.cfg.Observer.Synced(pods, queued)
}

// connection reports a connection to the runtime made (up) or lost.
func (a *Agent) connection(up bool, err error) {
	a.health.Connection(up)
	if !up {
		a.known.unlist()
		a.metrics.errors.WithLabelValues("connection").Inc()
	}
	a.cfg.Observer.Connection(up, err)
}

// stopped forgets a sandbox that stopped (its stop scanned, its removal
// heard, or its netns gone): nothing left to re-sweep, watch, hold to
// fewer workers (queue.heavy), nor report usage of. The watch's socket
// would otherwise keep the netns of a pod whose stop was missed (while
// disconnected) alive until the next Synchronize, and the pod's series
// stay as long.
func (a *Agent) stopped(id string) {
	a.known.forget(id)
	a.unwatch(id)
	a.queue.forget(id)
	a.usage.Stopped(id)
}

// ended is stopped for a sandbox the runtime said stopped (its pod's stop
// scanned, its removal heard), for good: unseen or not (known), and a
// scan of it that ends after this brings no usage back (Usage.Ended).
func (a *Agent) ended(id string) {
	a.stopped(id)
	a.known.ended(id)
	a.usage.Ended(id)
}

// live tells whether j's scan is still wanted when a worker takes it. A
// sweep's, re-sweep's or the watch's scan queued just before the
// sandbox's stop would run after the stop's scan, the pod's last: its
// finding would follow the pod's end, and its usage stay in the metrics
// until the next Synchronize. With the netns removed meanwhile, a sweep's
// scan would fail to open it and count as unreachable: for a sweep of one
// pod, every pod of the sweep, the agent degraded (blind) until another
// scan reaches a netns. An event's scan (a stop's above all) always runs.
func (a *Agent) live(j job) bool {
	switch {
	case isNodeJob(j.meta):
		// The node's namespace has no sandbox and never stops.
		return true
	case j.meta.Source == SourceWatch || j.meta.Source == SourceExec:
		return a.watching(j.meta.SandboxID)
	case j.meta.Source == SourceSweep:
		// The sweep listed it as known (sweep), and an event since
		// (add); stopped forgets it.
		return a.known.has(j.meta.SandboxID)
	}
	return true
}

// sweep queues a sweep's jobs, the pods the runtime lists as running:
// the usage of any other pod is dropped.
func (a *Agent) sweep(jobs []job, pods int) {
	listed := make(map[string]bool, len(jobs))
	metas := make([]scan.Meta, len(jobs))
	for i, j := range jobs {
		listed[j.meta.SandboxID] = true
		metas[i] = j.meta
	}
	a.usage.Listed(listed)
	a.known.list(metas, nil, true)
	a.queue.sweep(jobs, func(queued int) {
		if queued > 0 {
			a.swept.Store(true)
		}
		a.synced(pods, queued)
	})
}

// Run starts the workers, then connects to the runtime and stays connected
// until ctx ends, reconnecting with backoff whenever the runtime goes away
// (restart, upgrade, NRI not enabled yet). It returns nil when ctx ends,
// after the scans in flight and the stops still waiting (for drainStops)
// have run, and an ErrConfig error only.
func (a *Agent) Run(ctx context.Context) error {
	return a.withWorkers(func() error {
		// The exec watch first: a command run while the first scans
		// run is seen, and waits for its sandbox (handleExecs).
		a.startExecs()
		defer a.stopExecs()
		a.watchNode()
		return a.withSwept(ctx, func() error {
			return a.withResweep(ctx, func() error { return a.runtime(ctx) })
		})
	})
}

// withWorkers runs loop with the workers started, and stops them (letting
// the scans in flight and the stops waiting run) when it returns.
func (a *Agent) withWorkers(loop func() error) error {
	for i := 0; i < a.cfg.Workers; i++ {
		a.workers.Add(1)
		go a.work()
	}
	defer func() {
		// The watches first: they queue scans.
		a.stopWatches()
		a.queue.close()
		// The stops still waiting get drainWait; the scans running
		// their deadline.
		t := time.AfterFunc(a.drainWait, a.queue.abandon)
		defer t.Stop()
		a.workers.Wait()
	}()
	return loop()
}

func (a *Agent) nriLoop(ctx context.Context) error {
	backoff := minBackoff
	for {
		connected := time.Now()
		err := a.connectOnce(ctx)
		if errors.Is(err, ErrConfig) {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		a.disconnected(err)
		// A connection that lasted a while was good: start over.
		if time.Since(connected) > maxBackoff {
			backoff = minBackoff
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// connectOnce runs one connection to the runtime until it closes or ctx
// ends. nri's stub.Start (v0.11.0) waits for the runtime's Configure
// with no timeout, holding the lock Stop and its own close handler take:
// a runtime that drops or stalls between RegisterPlugin and Configure
// (restarted, hung) would hang this loop, and the agent's stop, for good.
// After configureWait, or at ctx's end, a connection not configured gets
// a Configure of the agent's own that fails (unconfigure): Start returns,
// closing the connection, and the loop dials again.
func (a *Agent) connectOnce(ctx context.Context) error {
	// The stub's first write on the connection is its RegisterPlugin,
	// sent once Start has made what a Configure answers to: before it,
	// unconfigure would race with Start and block on Start's channel.
	sent := make(chan struct{})
	var once sync.Once
	wrap := func(c stdnet.Conn) stdnet.Conn {
		return &firstWrite{Conn: c, sent: func() { once.Do(func() { close(sent) }) }}
	}
	opts := []stub.Option{stub.WithDialer(func(path string) (stdnet.Conn, error) {
		c, err := stdnet.Dial("unix", path)
		if err != nil {
			return nil, err
		}
		return wrap(c), nil
	})}
	// Started by the runtime, the stub would take the connection it was
	// handed (api.PluginSocketEnvVar) itself, past the dialer: taken here,
	// its writes are seen as a dialed one's.
	var handed stdnet.Conn
	if env := os.Getenv(api.PluginSocketEnvVar); env != "" {
		// Once: the connection closes that descriptor, and the next one
		// would take whatever file then has its number.
		os.Unsetenv(api.PluginSocketEnvVar)
		c, err := handedConn(env)
		if err != nil {
			return err
		}
		opts = append(opts, stub.WithConnection(wrap(c)))
		handed = c
	}
	conn := &connection{Agent: a}
	opts = append(opts, stub.WithTTRPCOptions(nil, []ttrpc.ServerOpt{ttrpc.WithUnaryServerInterceptor(conn.oneConfigure)}))
	st, err := a.newStub(conn, opts...)
	if err != nil {
		if handed != nil {
			// The stub that would have closed it was not made.
			handed.Close()
		}
		return err
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		wait := time.NewTimer(a.configureWait)
		defer wait.Stop()
		select {
		case <-done:
			return
		case <-ctx.Done():
		case <-wait.C:
		}
		// Not registered yet: the registration's own timeout (and ctx)
		// ends Start.
		select {
		case <-done:
			return
		case <-sent:
		}
		if !conn.unconfigure(st) {
			a.cfg.NRILogger.Errorf(ctx, "no Configure from the runtime on %q within %s, and this stub cannot be ended: the connection waits for it", a.cfg.Socket, a.configureWait)
		}
		select {
		case <-ctx.Done():
			st.Stop()
		case <-done:
		}
	}()
	if err := st.Run(ctx); err != nil {
		return fmt.Errorf("nri connection on %q: %w", a.cfg.Socket, err)
	}
	return errors.New("nri connection closed by the runtime")
}

// handedConn is the connection whose descriptor the runtime handed in
// api.PluginSocketEnvVar.
func handedConn(env string) (stdnet.Conn, error) {
	fd, err := strconv.Atoi(env)
	if err != nil || fd < 0 {
		return nil, fmt.Errorf("%s=%q is no descriptor", api.PluginSocketEnvVar, env)
	}
	c, err := nrinet.NewFdConn(fd)
	if err != nil {
		return nil, fmt.Errorf("the connection handed in %s=%d: %w", api.PluginSocketEnvVar, fd, err)
	}
	return c, nil
}

// firstWrite is a connection that tells its first write.
type firstWrite struct {
	stdnet.Conn
	sent func()
}

func (c *firstWrite) Write(b []byte) (int, error) {
	c.sent()
	return c.Conn.Write(b)
}

// errNotConfigured is the agent's own Configure's error (unconfigure).
var errNotConfigured = errors.New("no Configure from the runtime in time")

// ownConfigure marks the context of the agent's own Configure call.
type ownConfigure struct{}

// connection is the plugin one connection's stub serves: the agent, with
// the connection's own Configure, so that a late Configure on a closed
// connection marks no other configured.
type connection struct {
	*Agent
	configured atomic.Bool
	// configuring is held through each Configure, the runtime's
	// (oneConfigure) and the agent's own (unconfigure): the stub writes
	// its timeouts from either, unsynchronized, and the agent's must
	// not follow a runtime's that came in time.
	configuring sync.Mutex
}

// oneConfigure is the stub's server's interceptor: the runtime's
// Configure runs under configuring, its other calls as they come.
func (c *connection) oneConfigure(ctx context.Context, unmarshal ttrpc.Unmarshaler, info *ttrpc.UnaryServerInfo, method ttrpc.Method) (any, error) {
	if strings.HasSuffix(info.FullMethod, "/Configure") {
		c.configuring.Lock()
		defer c.configuring.Unlock()
	}
	return method(ctx, unmarshal)
}

// The stub finds the handler by this interface: without it, unconfigure's
// Configure would not reach the agent's.
var _ stub.ConfigureInterface = (*connection)(nil)

// Configure is the runtime's Configure (stub.ConfigureInterface), or the
// agent's own to end a stub waiting for it (unconfigure): the events
// are the handlers the agent has, as without it.
func (c *connection) Configure(ctx context.Context, _, _, _ string) (stub.EventMask, error) {
	if ctx.Value(ownConfigure{}) != nil {
		return 0, errNotConfigured
	}
	c.configured.Store(true)
	return 0, nil
}

// unconfigure hands st, c's stub, a Configure that fails, so that its
// Start stops waiting for the runtime's, unless the runtime's came:
// false when st does not take one (another nri version).
func (c *connection) unconfigure(st stub.Stub) bool {
	c.configuring.Lock()
	defer c.configuring.Unlock()
	if c.configured.Load() {
		return true
	}
	svc, ok := st.(api.PluginService)
	if !ok {
		return false
	}
	_, _ = svc.Configure(context.WithValue(context.Background(), ownConfigure{}, true), &api.ConfigureRequest{
		RuntimeName:         "none",
		RegistrationTimeout: api.DefaultPluginRegistrationTimeout.Milliseconds(),
		RequestTimeout:      api.DefaultPluginRequestTimeout.Milliseconds(),
	})
	return true
}

// disconnected reports the connection to the runtime lost (or never
// made), counted as a close under the lock Synchronize sets connected
// under: the stub's Run may return before its OnClose runs (runtimeLost),
// and a Synchronize of the connection ending in between would otherwise
// mark the agent connected after this. A failed dial counts too: only a
// Synchronize running meanwhile compares the count.
func (a *Agent) disconnected(err error) {
	e := a.execs
	e.syncMu.Lock()
	defer e.syncMu.Unlock()
	e.closes++
	a.connection(false, err)
}

// runtimeLost hears that a connection to the runtime closed (not a dial
// that failed): sandboxes may start unheard until the next Synchronize,
// so a command waits for that sync as for the first (execUnsyncedWait),
// not execPlaceWait from the last one, after which it was missed.
func (a *Agent) runtimeLost() {
	e := a.execs
	e.syncMu.Lock()
	defer e.syncMu.Unlock()
	// Counted: a Synchronize of this connection still running (the
	// runtime's request timed out) sets nothing (Synchronize).
	e.closes++
	e.synced.Store(0)
}

// newStub makes a stub serving plugin (the agent, or one connection's).
func (a *Agent) newStub(plugin any, opts ...stub.Option) (stub.Stub, error) {
	st, err := stub.New(plugin, append([]stub.Option{
		stub.WithPluginName(a.cfg.PluginName),
		stub.WithPluginIdx(a.cfg.PluginIndex),
		stub.WithSocketPath(a.cfg.Socket),
		stub.WithLogger(a.cfg.NRILogger),
		// Without it, older stubs exit the process on a lost connection.
		stub.WithOnClose(a.runtimeLost),
	}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("%w: create NRI stub: %w", ErrConfig, err)
	}
	return st, nil
}

type nopObserver struct{}

func (nopObserver) Handled(string, time.Duration) {}
func (nopObserver) Scanned(Scan)                  {}
func (nopObserver) Synced(int, int)               {}
func (nopObserver) Connection(bool, error)        {}

type nopLogger struct{}

func (nopLogger) Debugf(context.Context, string, ...interface{}) {}
func (nopLogger) Infof(context.Context, string, ...interface{})  {}
func (nopLogger) Warnf(context.Context, string, ...interface{})  {}
func (nopLogger) Errorf(context.Context, string, ...interface{}) {}
