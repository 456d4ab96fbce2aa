package agent

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/iptables-alerter/iptables-alerter/lib/execwatch"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// metrics are the agent's Prometheus series, fed by the agent itself at
// the moments it tells its Observer (which is left the logging); the
// caller serves them through Agent.Collectors.
type metrics struct {
	scans    *prometheus.CounterVec
	duration *prometheus.HistogramVec
	handler  *prometheus.HistogramVec
	errors   *prometheus.CounterVec
	lastSync prometheus.Gauge
	// looked is set by the Swept loop (swept.go).
	looked  prometheus.Gauge
	resweep *prometheus.CounterVec
	// execs counts the exec watch's commands by what became of them;
	// execUp is read at each scrape.
	execs  *prometheus.CounterVec
	execUp prometheus.Collector
	// execMissed counts the commands that ran unrecorded, by why;
	// execWatch reads the watch's own counters at each scrape.
	execMissed *prometheus.CounterVec
	execWatch  execWatchCollector
	// connected and degraded are read from the health at each scrape:
	// set from concurrent scans, they could end out of order.
	connected, degraded prometheus.Collector
	usage               usageCollector
}

func newMetrics(h *Health, u *Usage, up func() bool, stats func() (execwatch.Stats, int)) *metrics {
	return &metrics{
		scans: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "iptables_alerter_agent_scans_total",
			Help: "Scans by source (sweep, poststart, stop, watch, exec) and outcome (recorded, same, limited, clean, gone, dropped, failed, unreachable).",
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
			Help: "Errors by kind: scan (netns not readable, finding not written, a clean look's per-sandbox memory not readable), unreachable (a running pod's netns path not in the agent's view), incomplete (a finding recorded truncated), allowlist, vendors, connection, swept (the word that every pod was looked at, beside the findings, not written), watch (a running pod's nftables watch not opened: its commits unheard until a later scan watches it again).",
		}, []string{"kind"}),
		looked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "iptables_alerter_agent_looked",
			Help: "1 while the agent has looked at every pod the runtime runs (connected, its sweep done, each pod's last scan complete, its finding written) and says so beside the findings file for the node label; 0 makes the label unknown within 3 minutes.",
		}),
		lastSync: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "iptables_alerter_agent_last_sync_timestamp_seconds",
			Help: "When the runtime last synchronized (registration, reconnect), Unix time.",
		}),
		resweep: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "iptables_alerter_agent_resweep_netns_total",
			Help: "Pod netns looked at by re-sweeps (stage Resweep) and CRI sweeps (stage CRI), by result: skipped (nftables generation and legacy tables unchanged since the last complete scan), queued (changed, last scan incomplete, or state unreadable: scanned), gone (netns no longer there: forgotten), busy (the host-wide x_tables mutex held: left for a re-sweep soon after, or the next CRI sweep).",
		}, []string{"stage", "result"}),
		connected: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "iptables_alerter_agent_connected",
			Help: "1 while connected to the runtime: its NRI socket, or with --cri-endpoint its CRI endpoint's last listing worked.",
		}, func() float64 { return one(h.Connected()) }),
		degraded: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "iptables_alerter_agent_degraded",
			Help: "1 when every scan of the last sweep found its pod's netns unreachable (netns directory not mounted into the agent?), until a scan reaches one.",
		}, func() float64 { return one(h.blindNow()) }),
		execs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "iptables_alerter_agent_execs_total",
			Help: "iptables tool runs the exec watch saw end and placed, by result: legacy write (scanned at once), nft write (joined to the watch's scan), read, failed (a write that did not work, or missing kernel support), node off (in the node's netns, node mode off: not recorded). Those not recorded are in iptables_alerter_agent_exec_missed_total.",
		}, []string{"result"}),
		execMissed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "iptables_alerter_agent_exec_missed_total",
			Help: "iptables tool runs the exec watch knows ran but could not record, by reason: gone before read (ended before its command line could be read; its name told it), binary path too long (over 511 bytes, its argv[0] no tool's; its name told it), exit not seen, queue full, netns of no watched sandbox, netns unreadable. Each is logged, summed up once a minute.",
		}, []string{"reason"}),
		execWatch: execWatchCollector{stats},
		execUp: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "iptables_alerter_agent_exec_watch_up",
			Help: "1 while the exec watch listens to the kernel's process events; 0 when off: turned off (--exec-watch=false, or --watch=false), or for a reason /healthz names (no hostPID, no CAP_NET_ADMIN, or its socket failed: it stopped, and a restart opens it again).",
		}, func() float64 { return one(up()) }),
		usage: usageCollector{u},
	}
}

// Collectors are the agent's metrics, for the caller's registry.
func (a *Agent) Collectors() []prometheus.Collector {
	m := a.metrics
	return []prometheus.Collector{m.scans, m.duration, m.handler, m.errors, m.lastSync, m.looked, m.resweep, m.connected, m.degraded, m.usage, m.execs, m.execUp, m.execMissed, m.execWatch}
}

// scanned counts one ended scan.
func (m *metrics) scanned(s Scan) {
	m.scans.WithLabelValues(s.Meta.Source, s.Label()).Inc()
	if s.Duration > 0 {
		m.duration.WithLabelValues(s.Meta.Source).Observe(s.Duration.Seconds())
	}
	if s.AllowErr != nil {
		m.errors.WithLabelValues("allowlist").Inc()
	}
	if s.VendorErr != nil {
		m.errors.WithLabelValues("vendors").Inc()
	}
	switch s.Outcome {
	case Found, Clean:
		// A clean look's error: the memory could not be read.
		if s.Err != nil {
			m.errors.WithLabelValues("scan").Inc()
		}
		if s.Stored == findings.Recorded && s.Record.Truncated {
			m.errors.WithLabelValues("incomplete").Inc()
		}
	case Failed:
		m.errors.WithLabelValues("scan").Inc()
	case Unreachable:
		m.errors.WithLabelValues("unreachable").Inc()
	}
}

func (m *metrics) resweeped(r Resweep) {
	m.resweep.WithLabelValues(r.Stage, "skipped").Add(float64(r.Skipped))
	m.resweep.WithLabelValues(r.Stage, "queued").Add(float64(r.Queued))
	m.resweep.WithLabelValues(r.Stage, "gone").Add(float64(r.Gone))
	m.resweep.WithLabelValues(r.Stage, "busy").Add(float64(r.Busy))
}

func (m *metrics) handled(event string, d time.Duration) {
	m.handler.WithLabelValues(event).Observe(d.Seconds())
}

var (
	execEventsDesc = prometheus.NewDesc("iptables_alerter_agent_exec_events_total",
		"Program executions the exec watch heard of on the node (any program, not only iptables tools).", nil, nil)
	execUnreadDesc = prometheus.NewDesc("iptables_alerter_agent_exec_unread_total",
		"Program executions whose process was gone (ended and reaped) before anything of it could be read: whether it was an iptables tool is not known.", nil, nil)
	execOverrunsDesc = prometheus.NewDesc("iptables_alerter_agent_exec_overruns_total",
		"Times the kernel dropped process events because the exec watch's receive buffer was full (ENOBUFS): executions and exits were lost unseen.", nil, nil)
	execBufferDesc = prometheus.NewDesc("iptables_alerter_agent_exec_read_buffer_bytes",
		"The exec watch's socket receive buffer for process events, bytes (a burst larger than it is an overrun).", nil, nil)
)

// execWatchCollector gives the exec watch's own counters, read at each
// scrape (none while it is off).
type execWatchCollector struct {
	stats func() (execwatch.Stats, int)
}

func (c execWatchCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- execEventsDesc
	ch <- execUnreadDesc
	ch <- execOverrunsDesc
	ch <- execBufferDesc
}

func (c execWatchCollector) Collect(ch chan<- prometheus.Metric) {
	st, buffer := c.stats()
	if buffer == 0 {
		// Off: no watch, no counters.
		return
	}
	ch <- prometheus.MustNewConstMetric(execEventsDesc, prometheus.CounterValue, float64(st.Execs))
	ch <- prometheus.MustNewConstMetric(execUnreadDesc, prometheus.CounterValue, float64(st.Vanished))
	ch <- prometheus.MustNewConstMetric(execOverrunsDesc, prometheus.CounterValue, float64(st.Overruns))
	ch <- prometheus.MustNewConstMetric(execBufferDesc, prometheus.GaugeValue, float64(buffer))
}

var (
	podRulesDesc = prometheus.NewDesc("iptables_alerter_agent_pod_rules",
		"Rules the agent's latest scan found in a running pod's network namespace, by RHEL 10 impact (legacy: breaks; xt: breaks unless kernel-modules-extra is installed; native: keeps loading) and recognised vendor (unknown: none; other: an admin-added one; a pod naming two has a series for each); only levels with rules, only pods with usage, each until it stops or its usage is gone. owner is the workload its labels name (Deployment/x, StatefulSet/x, DaemonSet/x, Job/x; a CronJob's Job as itself), empty when they do not say.",
		[]string{"pod_namespace", "pod_name", "owner", "impact", "vendor"}, nil)
	podExecsDesc = prometheus.NewDesc("iptables_alerter_agent_pod_iptables_commands_total",
		"iptables commands a running pod ran that the exec watch saw end, by result (ok, failed: a write that did not work, or missing kernel support; missed: it ran in the pod, by its cgroup, and ended before the agent could read it); within --max-pod-series pods, each until the pod stops.",
		[]string{"pod_namespace", "pod_name", "owner", "result"}, nil)
	podFailureDesc = prometheus.NewDesc("iptables_alerter_agent_pod_iptables_command_last_failure_timestamp_seconds",
		"When the latest iptables command that failed in a running pod ended (Unix time), for pods of iptables_alerter_agent_pod_iptables_commands_total with failures: the alert rules tell a new failure from an old one by it where Prometheus has no history of the counter.",
		[]string{"pod_namespace", "pod_name", "owner"}, nil)
	leftOutDesc = prometheus.NewDesc("iptables_alerter_agent_pod_series_left_out_total",
		"Findings with usage, and iptables commands, of pods left out of the per-pod series (iptables_alerter_agent_pod_rules, iptables_alerter_agent_pod_iptables_commands_total) because --max-pod-series pods had series already.",
		nil, nil)
)

// usageCollector serves the running pods' usage, read at each scrape.
type usageCollector struct{ u *Usage }

func (c usageCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- podRulesDesc
	ch <- podExecsDesc
	ch <- podFailureDesc
	ch <- leftOutDesc
}

func (c usageCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.u.execCounts() {
		ch <- prometheus.MustNewConstMetric(podExecsDesc, prometheus.CounterValue, float64(p.attempts-p.failures), p.namespace, p.name, p.owner, "ok")
		ch <- prometheus.MustNewConstMetric(podExecsDesc, prometheus.CounterValue, float64(p.failures), p.namespace, p.name, p.owner, "failed")
		ch <- prometheus.MustNewConstMetric(podExecsDesc, prometheus.CounterValue, float64(p.missed), p.namespace, p.name, p.owner, "missed")
		if !p.lastFailure.IsZero() {
			ch <- prometheus.MustNewConstMetric(podFailureDesc, prometheus.GaugeValue, float64(p.lastFailure.UnixNano())/1e9, p.namespace, p.name, p.owner)
		}
	}
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
