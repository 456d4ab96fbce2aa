//go:build !hookonly

package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"

	"github.com/iptables-alerter/iptables-alerter/lib/agent"
	"github.com/iptables-alerter/iptables-alerter/lib/catalog"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/scan"
)

var agentCommand = command{use: "agent", summary: "NRI plugin: scan every pod at registration, after each container start and as it stops",
	long: agentLong, newConfig: func() config { return new(agentConfig) }}

const agentLong = `Connects to the container runtime's NRI socket (CRI-O 1.30+ and
containerd 2.0+ have NRI on by default) and scans pod network namespaces:
every existing pod when it registers (source "sweep"), each container
after it started ("poststart") and each container and pod sandbox as it
stops ("stop"), into the same findings file and per-sandbox memory as the
hook. It never scans inside a runtime call: it opens the netns, replies,
and scans in the background. It reconnects when the runtime restarts and
exits non-zero only on a configuration error; SIGTERM stops it.

Where NRI is off, --cri-endpoint sweeps every pod netns through the
runtime's CRI socket every --interval (source "sweep", stage "CRI")
instead: no container start or stop is seen then.`

type agentConfig struct {
	agent       agent.Config
	healthAddr  string
	maxBytes    int64
	generations int
	allow       allowFlags
	vendors     string
	criEndpoint string
	interval    time.Duration
	log         logFlags
}

func (cfg *agentConfig) register(fs *pflag.FlagSet) {
	fs.StringVar(&cfg.agent.Socket, "nri-socket", agent.DefaultSocket, "the runtime's NRI socket")
	fs.StringVar(&cfg.agent.PluginName, "plugin-name", agent.DefaultPluginName, "NRI plugin name")
	fs.StringVar(&cfg.agent.PluginIndex, "plugin-index", agent.DefaultPluginIndex, "NRI plugin index, two digits (the NN of NN-name)")
	fs.StringVar(&cfg.agent.Log.Path, "findings", findings.DefaultPath, "findings file to append to (the hook's)")
	fs.Int64Var(&cfg.maxBytes, "max-bytes", findings.DefaultMaxBytes, "rotate the findings file to FILE.1 beyond this size")
	fs.IntVar(&cfg.generations, "generations", findings.DefaultGenerations, "rotated files kept, FILE.1 (newest) to FILE.N")
	fs.StringVar(&cfg.agent.Seen.Dir, "state-dir", findings.DefaultStateDir, "per-sandbox memory, shared with the hook: one finding per pod and usage")
	cfg.allow.register(fs)
	fs.StringVar(&cfg.vendors, "vendors", catalog.DefaultPath, "admin's vendor table JSON, merged with the built-in one (a missing file adds nothing)")
	fs.StringVar(&cfg.agent.Node, "node", "", "node name to record (default: this host's name)")
	fs.IntVar(&cfg.agent.Workers, "workers", agent.DefaultWorkers, "scans run at once")
	fs.IntVar(&cfg.agent.Queue, "queue", agent.DefaultQueue, "scans the runtime's events may queue; past it an event's scan is dropped (counted), never waited for")
	fs.DurationVar(&cfg.agent.ScanTimeout, "scan-timeout", agent.DefaultScanTimeout, "deadline of one scan; past it the finding is recorded with truncated: true")
	fs.StringVar(&cfg.criEndpoint, "cri-endpoint", "", "where NRI is off: sweep through this CRI socket (e.g. /run/containerd/containerd.sock, /var/run/crio/crio.sock) every --interval instead of using NRI")
	fs.DurationVar(&cfg.interval, "interval", 15*time.Minute, "with --cri-endpoint: time between sweeps")
	fs.StringVar(&cfg.healthAddr, "health-addr", "127.0.0.1:9757", "serve /healthz and /metrics here (empty: off)")
	cfg.log.register(fs)
}

func (cfg *agentConfig) run(_ []string, s stdio) int {
	if cfg.agent.Node == "" {
		cfg.agent.Node, _ = os.Hostname()
	}
	cfg.agent.Log.MaxBytes, cfg.agent.Log.Generations = cfg.maxBytes, cfg.generations
	cfg.agent.Load = scan.Loaders{Allow: cfg.allow.load, Vendors: func() (*catalog.Table, error) { return catalog.Load(cfg.vendors) }}
	log := cfg.log.logger(s.err)
	if _, err := cfg.allow.load(); err != nil {
		// Not fatal: the hook reports with the built-in entries too.
		log.WithError(err).Error("cannot load the allowlist, reporting without it until it is fixed")
	}
	m := newAgentMetrics(log)
	cfg.agent.Observer = m
	cfg.agent.NRILogger = nriLogger{log.WithField("component", "nri")}
	a, err := agent.New(cfg.agent)
	if err != nil {
		log.WithError(err).Error("agent not started")
		return 2
	}
	if cfg.healthAddr != "" {
		// Disconnected, the agent retries at least every 30 s; connected, it
		// is alive as long as the connection is.
		srv, err := serveHealth(cfg.healthAddr, m.alive, 2*time.Minute, m.degradedReason, metricsHandler(m.reg))
		if err != nil {
			log.WithError(err).Error("agent not started")
			return 2
		}
		defer srv.Close()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	run := a.Run
	if cfg.criEndpoint != "" {
		log.WithFields(logrus.Fields{"cri_endpoint": cfg.criEndpoint, "interval": cfg.interval.String()}).Info("agent starting, sweeping through the CRI")
		run = func(ctx context.Context) error { return a.RunCRI(ctx, cfg.criEndpoint, cfg.interval) }
	} else {
		log.WithFields(logrus.Fields{"nri_socket": cfg.agent.Socket, "plugin": cfg.agent.PluginIndex + "-" + cfg.agent.PluginName}).Info("agent starting")
	}
	if err := run(ctx); err != nil {
		log.WithError(err).Error("agent stopped")
		return 2
	}
	log.Info("agent stopped")
	return 0
}

// agentMetrics turns the agent's reports into metrics and log lines.
type agentMetrics struct {
	log       *logrus.Logger
	reg       *prometheus.Registry
	scans     *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	handler   *prometheus.HistogramVec
	errors    *prometheus.CounterVec
	lastSync  prometheus.Gauge
	connected prometheus.Gauge
	degraded  prometheus.Gauge
	// up is 1 while connected; lastTry the last time the connection was
	// lost (the loop retries from there), for /healthz.
	up      atomic.Bool
	lastTry atomic.Int64
	// mu guards the sweep's tally and the sandboxes already warned about.
	mu sync.Mutex
	// sweepQueued, sweepDone and sweepUnreachable tally the last sweep's
	// scans; blind is set when every scan of a finished sweep was
	// unreachable, and cleared by the next scan that reached its netns.
	sweepQueued, sweepDone, sweepUnreachable int
	blind                                    bool
	// warned holds the sandboxes whose unreachable netns was logged at
	// warn: one line per sandbox, not one per scan.
	warned map[string]bool
}

// maxWarned bounds the warned set (sandbox ids come from the runtime, one
// per pod ever started); past it the set starts over.
const maxWarned = 4096

func newAgentMetrics(log *logrus.Logger) *agentMetrics {
	m := &agentMetrics{
		log: log,
		reg: prometheus.NewRegistry(),
		scans: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "iptables_alerter_agent_scans_total",
			Help: "Scans by source (sweep, poststart, stop) and outcome (recorded, same, limited, clean, gone, dropped, failed, unreachable).",
		}, []string{"source", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "iptables_alerter_agent_scan_duration_seconds",
			Help:    "Time to scan one pod netns and record, by source.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"source"}),
		handler: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "iptables_alerter_agent_handler_duration_seconds",
			Help:    "Time the agent took to answer an NRI call, by event (the runtime waits for it under a lock).",
			Buckets: []float64{.00001, .000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .05, .1},
		}, []string{"event"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "iptables_alerter_agent_errors_total",
			Help: "Errors by kind: scan (netns not readable, finding not written), unreachable (a running pod's netns path not in the agent's view), incomplete (a finding recorded truncated), allowlist, vendors, connection.",
		}, []string{"kind"}),
		lastSync: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "iptables_alerter_agent_last_sync_timestamp_seconds",
			Help: "When the runtime last synchronized (registration, reconnect), Unix time.",
		}),
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "iptables_alerter_agent_connected",
			Help: "1 while connected to the runtime's NRI socket.",
		}),
		degraded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "iptables_alerter_agent_degraded",
			Help: "1 when every scan of the last sweep found its pod's netns unreachable (netns directory not mounted into the agent?), until a scan reaches one.",
		}),
		warned: map[string]bool{},
	}
	m.reg.MustRegister(m.scans, m.duration, m.handler, m.errors, m.lastSync, m.connected, m.degraded)
	m.lastTry.Store(time.Now().UnixNano())
	return m
}

func (m *agentMetrics) alive() time.Time {
	if m.up.Load() {
		return time.Now()
	}
	return time.Unix(0, m.lastTry.Load())
}

func (m *agentMetrics) Handled(event string, d time.Duration) {
	m.handler.WithLabelValues(event).Observe(d.Seconds())
}

// degradedReason is why /healthz says degraded, or "".
func (m *agentMetrics) degradedReason() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.blind {
		return ""
	}
	return fmt.Sprintf("every pod netns of the last sweep (%d) was unreachable: is the host's /run/netns mounted at /var/run/netns?", m.sweepQueued)
}

// tally counts a scan into the sweep's tally and the degraded state, and
// tells whether an unreachable one is the first of its sandbox.
func (m *agentMetrics) tally(s agent.Scan) (firstWarn bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	unreachable := s.Outcome == agent.Unreachable
	if s.Meta.Source == agent.SourceSweep {
		m.sweepDone++
		if unreachable {
			m.sweepUnreachable++
		}
		if m.sweepQueued > 0 && m.sweepDone == m.sweepQueued && m.sweepUnreachable == m.sweepQueued {
			m.blind = true
		}
	}
	if !unreachable && s.Outcome != agent.Dropped {
		m.blind = false
	}
	if m.blind {
		m.degraded.Set(1)
	} else {
		m.degraded.Set(0)
	}
	if !unreachable || m.warned[s.Meta.SandboxID] {
		return false
	}
	if len(m.warned) >= maxWarned {
		clear(m.warned)
	}
	m.warned[s.Meta.SandboxID] = true
	return true
}

func (m *agentMetrics) Synced(pods, queued int) {
	m.mu.Lock()
	m.sweepQueued, m.sweepDone, m.sweepUnreachable = queued, 0, 0
	m.mu.Unlock()
	m.lastSync.SetToCurrentTime()
	m.log.WithFields(logrus.Fields{"pods": pods, "sweep": queued}).Info("runtime synchronized, sweeping every pod netns")
}

func (m *agentMetrics) Connection(up bool, err error) {
	m.up.Store(up)
	if up {
		m.connected.Set(1)
		return
	}
	m.connected.Set(0)
	m.lastTry.Store(time.Now().UnixNano())
	m.errors.WithLabelValues("connection").Inc()
	m.log.WithError(err).Warn("not connected to the runtime's NRI socket, retrying")
}

func (m *agentMetrics) Scanned(s agent.Scan) {
	m.scans.WithLabelValues(s.Meta.Source, string(s.Outcome)).Inc()
	firstWarn := m.tally(s)
	if s.Duration > 0 {
		m.duration.WithLabelValues(s.Meta.Source).Observe(s.Duration.Seconds())
	}
	l := m.log.WithFields(logrus.Fields{"source": s.Meta.Source, "stage": s.Meta.Stage, "sandbox_id": s.Meta.SandboxID,
		"pod_namespace": s.Meta.Pod.Namespace, "pod_name": s.Meta.Pod.Name, "container": s.Meta.Container,
		"netns": s.Meta.Netns, "duration": s.Duration.String()})
	if s.AllowErr != nil {
		m.errors.WithLabelValues("allowlist").Inc()
		l.WithError(s.AllowErr).Error("cannot load the allowlist, reporting without it")
	}
	if s.VendorErr != nil {
		m.errors.WithLabelValues("vendors").Inc()
		l.WithError(s.VendorErr).Error("cannot load the vendor table, naming vendors from the built-in one")
	}
	if r := s.Record; r != nil {
		l = l.WithFields(logrus.Fields{"fingerprint": r.Fingerprint, "nft_rules": r.Nft.Rules, "legacy_rules": r.Legacy.Rules, "truncated": r.Truncated})
		if r.Error != "" {
			l = l.WithField("error", r.Error)
		}
	}
	switch s.Outcome {
	case agent.Recorded:
		if s.Err != nil {
			m.errors.WithLabelValues("scan").Inc()
			l.WithError(s.Err).Error("finding recorded, but the findings directory or the per-sandbox memory needs attention")
		}
		if s.Record.Truncated {
			m.errors.WithLabelValues("incomplete").Inc()
			l.Warn("iptables usage recorded, incomplete: the counts are a lower bound")
		} else {
			l.Info("iptables usage recorded")
		}
	case agent.Failed:
		m.errors.WithLabelValues("scan").Inc()
		l.WithError(s.Err).Error("scan failed")
	case agent.Unreachable:
		m.errors.WithLabelValues("unreachable").Inc()
		if firstWarn {
			l.WithError(s.Err).Warn("pod netns unreachable though the runtime says the pod runs: not scanned (is the host's /run/netns mounted at /var/run/netns?); logged once per sandbox")
		} else {
			l.WithError(s.Err).Debug("scan: unreachable")
		}
	case agent.Dropped:
		l.Warn("scan dropped: the queue is full (see --queue, --workers)")
	case agent.Limited:
		l.Warn("finding dropped: this sandbox wrote its limit of findings this hour")
	default:
		l.Debug(fmt.Sprintf("scan: %s", s.Outcome))
	}
}

// nriLogger passes the NRI stub's lines to logrus, one level down: the
// stub is chatty about every registration.
type nriLogger struct{ l *logrus.Entry }

func (n nriLogger) Debugf(_ context.Context, f string, a ...interface{}) { n.l.Debugf(f, a...) }
func (n nriLogger) Infof(_ context.Context, f string, a ...interface{})  { n.l.Debugf(f, a...) }
func (n nriLogger) Warnf(_ context.Context, f string, a ...interface{})  { n.l.Warnf(f, a...) }
func (n nriLogger) Errorf(_ context.Context, f string, a ...interface{}) { n.l.Errorf(f, a...) }
