//go:build !hookonly

package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"

	"github.com/iptables-alerter/iptables-alerter/lib/agent"
	"github.com/iptables-alerter/iptables-alerter/lib/catalog"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/scan"
	"github.com/iptables-alerter/iptables-alerter/lib/watch"
)

var agentCommand = command{use: "agent", summary: "NRI plugin: scan every pod at registration, after each container start, on its iptables commits and as it stops",
	long: agentLong, newConfig: func() config { return new(agentConfig) }}

const agentLong = `Connects to the container runtime's NRI socket (CRI-O 1.30+ and
containerd 2.0+ have NRI on by default) and scans pod network namespaces:
every existing pod when it registers (source "sweep"), each container
after it started ("poststart") and each container and pod sandbox as it
stops ("stop"), into the same findings file and per-sandbox memory as the
hook. With --watch (the default) it also hears every nftables commit in
each pod's netns from the sandbox's start to its stop, and scans within
--watch-debounce of a commit to an iptables table ("watch"): the finding
names the writing process (writer), and removing all usage records
state "gone". It never scans inside a runtime call: it opens the netns,
replies, and scans in the background. It reconnects when the runtime restarts and
exits non-zero only on a configuration error; SIGTERM stops it.

Where NRI is off, --cri-endpoint sweeps every pod netns through the
runtime's CRI socket every --interval (source "sweep", stage "CRI")
instead: no container start or stop is seen then, and nothing is watched.

Legacy x_tables have no change notification: every --resweep-interval the
agent looks at each pod netns it knows again (stage "Resweep") and scans
only those whose nftables generation or legacy tables changed since their
last complete scan, or whose last scan could not finish; CRI sweeps skip
unchanged pods the same way.`

type agentConfig struct {
	agent       agent.Config
	healthAddr  string
	metricsAddr string
	maxBytes    int64
	generations int
	allow       allowFlags
	vendors     string
	criEndpoint string
	interval    time.Duration
	log         logFlags
}

// hostNetnsNode, the value of a bare --host-netns, names the node's own
// netns (--host-proc's pid 1's); tests give a stand-in's path instead.
const hostNetnsNode = "host"

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
	fs.StringVar(&cfg.agent.HostProc, "host-proc", "/proc", "the host's /proc (in a container: mounted read-only, with CAP_SYS_PTRACE): its 1/ns/net, the node's netns, tells host-network pods apart; unreadable, the agent does not start (empty: no check)")
	fs.IntVar(&cfg.agent.Workers, "workers", agent.DefaultWorkers, "scans run at once")
	fs.IntVar(&cfg.agent.Queue, "queue", agent.DefaultQueue, "scans the runtime's events may queue; past it an event's scan is dropped (counted), never waited for")
	fs.DurationVar(&cfg.agent.ScanTimeout, "scan-timeout", agent.DefaultScanTimeout, "deadline of one scan; past it the finding is recorded with truncated: true")
	fs.BoolVar(&cfg.agent.Watch, "watch", true, "hold a monitor of nftables commits in every pod's netns (NRI only): a commit to an iptables table is scanned within --watch-debounce and its finding names the writing process")
	fs.DurationVar(&cfg.agent.WatchDebounce, "watch-debounce", agent.DefaultWatchDebounce, "with --watch: the window a burst of commits is gathered in, one scan per window however many commits")
	fs.StringVar(&cfg.agent.HostNetns, "host-netns", "", "node mode (NRI only, needs --watch): watch this netns as the node's, with the built-in platform allowlist; alone, --host-netns is --host-netns=host, HOST-PROC/1/ns/net, the node's (empty: off)")
	fs.Lookup("host-netns").NoOptDefVal = hostNetnsNode
	fs.StringVar(&cfg.criEndpoint, "cri-endpoint", "", "where NRI is off: sweep through this CRI socket (e.g. /run/containerd/containerd.sock, /var/run/crio/crio.sock) every --interval instead of using NRI")
	fs.DurationVar(&cfg.interval, "interval", 15*time.Minute, "with --cri-endpoint: time between sweeps")
	fs.DurationVar(&cfg.agent.ResweepInterval, "resweep-interval", agent.DefaultResweepInterval, "time between re-sweeps: every known pod netns is looked at again and scanned only if its nftables generation or legacy x_tables changed since its last complete scan, or that scan could not finish (legacy x_tables tell nobody of a change); 0: off")
	fs.IntVar(&cfg.agent.MaxUsage, "max-pod-series", agent.DefaultMaxUsage, "pods with usage given metrics series at most; past it a pod is left out (counted in iptables_alerter_agent_pod_series_left_out_total)")
	fs.StringVar(&cfg.healthAddr, "health-addr", "127.0.0.1:9757", "serve /healthz and /metrics here (empty: off)")
	fs.StringVar(&cfg.metricsAddr, "metrics-addr", "", "serve /metrics here instead, e.g. 127.0.0.1:9758 for the forwarder's --agent-metrics, which serves it behind TLS (empty: on --health-addr)")
	cfg.log.register(fs)
}

func (cfg *agentConfig) run(_ []string, s stdio) int {
	if cfg.agent.Node == "" {
		cfg.agent.Node, _ = os.Hostname()
	}
	log := cfg.log.logger(s.err)
	if cfg.agent.HostNetns == hostNetnsNode {
		if cfg.agent.HostProc == "" {
			log.Error("agent not started: a bare --host-netns names the node's netns through --host-proc, which is empty")
			return 2
		}
		cfg.agent.HostNetns = filepath.Join(cfg.agent.HostProc, "1", "ns", "net")
	}
	cfg.agent.Log.MaxBytes, cfg.agent.Log.Generations = cfg.maxBytes, cfg.generations
	cfg.agent.Load = scan.Loaders{Allow: cfg.allow.load, Vendors: func() (*catalog.Table, error) { return catalog.Load(cfg.vendors) }}
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
	m.reg.MustRegister(usageCollector{a.Usage()})
	if cfg.agent.Watch {
		if err := watch.CheckRealtime(); err != nil {
			log.WithError(err).Warn("the watch reads writers at normal priority (give the agent CAP_SYS_NICE): a writer that exits at once after its commit is more often recorded gone, without its container")
		}
	}
	metrics := metricsHandler(m.reg)
	if cfg.metricsAddr != "" {
		srv, err := serveMetrics(cfg.metricsAddr, metrics)
		if err != nil {
			log.WithError(err).Error("agent not started")
			return 2
		}
		defer srv.Close()
		metrics = nil
	}
	if cfg.healthAddr != "" {
		// Disconnected, the agent retries at least every 30 s; connected, it
		// is alive as long as the connection is.
		srv, err := serveHealth(cfg.healthAddr, m.health.Alive, 2*time.Minute, m.health.Degraded, metrics)
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

// agentMetrics turns the agent's reports into metrics and log lines; its
// health keeps what /healthz and the gauges say.
type agentMetrics struct {
	log      *logrus.Logger
	health   *agent.Health
	reg      *prometheus.Registry
	scans    *prometheus.CounterVec
	duration *prometheus.HistogramVec
	handler  *prometheus.HistogramVec
	errors   *prometheus.CounterVec
	lastSync prometheus.Gauge
	resweep  *prometheus.CounterVec
}

// The re-sweep's counts are heard, or the build fails.
var _ agent.ResweepObserver = (*agentMetrics)(nil)

func newAgentMetrics(log *logrus.Logger) *agentMetrics {
	h := agent.NewHealth()
	m := &agentMetrics{
		log:    log,
		health: h,
		reg:    prometheus.NewRegistry(),
		scans: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "iptables_alerter_agent_scans_total",
			Help: "Scans by source (sweep, poststart, stop, watch) and outcome (recorded, same, limited, clean, gone, dropped, failed, unreachable).",
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
		resweep: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "iptables_alerter_agent_resweep_netns_total",
			Help: "Pod netns looked at by re-sweeps (stage Resweep) and CRI sweeps (stage CRI), by result: skipped (nftables generation and legacy tables unchanged since the last complete scan), queued (changed, last scan incomplete, or state unreadable: scanned), gone (netns no longer there: forgotten).",
		}, []string{"stage", "result"}),
	}
	// Read from the health at each scrape: set from concurrent scans,
	// they could end out of order.
	connected := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "iptables_alerter_agent_connected",
		Help: "1 while connected to the runtime's NRI socket.",
	}, func() float64 { return one(h.Connected()) })
	degraded := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "iptables_alerter_agent_degraded",
		Help: "1 when every scan of the last sweep found its pod's netns unreachable (netns directory not mounted into the agent?), until a scan reaches one.",
	}, func() float64 { return one(h.Degraded() != "") })
	m.reg.MustRegister(m.scans, m.duration, m.handler, m.errors, m.lastSync, m.resweep, connected, degraded,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewBuildInfoCollector(), buildInfoGauge())
	return m
}

var (
	podRulesDesc = prometheus.NewDesc("iptables_alerter_agent_pod_rules",
		"Rules the agent's latest scan found in a running pod's network namespace, by RHEL 10 impact (legacy: breaks; xt: breaks unless kernel-modules-extra is installed; native: keeps loading) and recognised vendor (unknown: none; other: an admin-added one; a pod naming two has a series for each); only levels with rules, only pods with usage, each until it stops or its usage is gone. owner is the workload its labels name (Deployment/x, StatefulSet/x, Job/x), empty when they do not say.",
		[]string{"pod_namespace", "pod_name", "owner", "impact", "vendor"}, nil)
	leftOutDesc = prometheus.NewDesc("iptables_alerter_agent_pod_series_left_out_total",
		"Findings with usage of pods left out of iptables_alerter_agent_pod_rules because --max-pod-series pods had series already.",
		nil, nil)
)

// usageCollector serves the running pods' usage, read at each scrape.
type usageCollector struct{ u *agent.Usage }

func (c usageCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- podRulesDesc
	ch <- leftOutDesc
}

func (c usageCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.u.Pods() {
		for _, l := range findings.ImpactLevels {
			n := p.Impact.Count(l)
			if n == 0 {
				continue
			}
			for _, v := range p.Vendors {
				ch <- prometheus.MustNewConstMetric(podRulesDesc, prometheus.GaugeValue, float64(n), p.Namespace, p.Name, p.Owner, l, v)
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(leftOutDesc, prometheus.CounterValue, float64(c.u.Left()))
}

// one is a gauge's value for b.
func one(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (m *agentMetrics) Handled(event string, d time.Duration) {
	m.handler.WithLabelValues(event).Observe(d.Seconds())
}

func (m *agentMetrics) Synced(pods, queued int) {
	m.health.Synced(queued)
	m.lastSync.SetToCurrentTime()
	m.log.WithFields(logrus.Fields{"pods": pods, "sweep": queued}).Info("runtime synchronized, sweeping every pod netns")
}

func (m *agentMetrics) Resweeped(r agent.Resweep) {
	m.resweep.WithLabelValues(r.Stage, "skipped").Add(float64(r.Skipped))
	m.resweep.WithLabelValues(r.Stage, "queued").Add(float64(r.Queued))
	m.resweep.WithLabelValues(r.Stage, "gone").Add(float64(r.Gone))
	m.log.WithFields(logrus.Fields{"stage": r.Stage, "known": r.Known, "skipped": r.Skipped, "queued": r.Queued,
		"gone": r.Gone, "duration": r.Duration.String()}).Debug("re-sweep: scanning the pod netns that changed")
}

func (m *agentMetrics) Connection(up bool, err error) {
	m.health.Connection(up)
	if up {
		return
	}
	m.errors.WithLabelValues("connection").Inc()
	m.log.WithError(err).Warn("not connected to the runtime's NRI socket, retrying")
}

func (m *agentMetrics) Scanned(s agent.Scan) {
	m.scans.WithLabelValues(s.Meta.Source, s.Label()).Inc()
	warn := m.health.Scanned(s)
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
	switch s.Outcome {
	case agent.Found:
		if s.Err != nil {
			m.errors.WithLabelValues("scan").Inc()
		}
		if s.Stored == findings.Recorded && s.Record.Truncated {
			m.errors.WithLabelValues("incomplete").Inc()
		}
		logRecord(l, *s.Record, s.Stored, s.Err)
	case agent.Failed:
		m.errors.WithLabelValues("scan").Inc()
		l.WithError(s.Err).Error("scan failed")
	case agent.Unreachable:
		m.errors.WithLabelValues("unreachable").Inc()
		if warn {
			l.WithError(s.Err).Warn("pod netns unreachable though the runtime says the pod runs: not scanned (is the host's /run/netns mounted at /var/run/netns?); logged once per sandbox")
		} else {
			l.WithError(s.Err).Debug("scan: unreachable")
		}
	case agent.Dropped:
		l.Warn("scan dropped: the queue is full (see --queue, --workers)")
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
