//go:build !hookonly

package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"

	"github.com/iptables-alerter/iptables-alerter/lib/agent"
	"github.com/iptables-alerter/iptables-alerter/lib/allowlist"
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
unchanged pods the same way. A re-sweep also runs at once when the exec
watch lost a command that may have written legacy rules.

While it has looked at every pod the runtime runs (each pod's last scan
complete, none out of reach) it says so in FINDINGS.swept, written every
minute and holding 3: the forwarder's node label is ready only under it.`

type agentConfig struct {
	agent       agent.Config
	healthAddr  string
	probeAddr   string
	metricsAddr string
	record      recordFlags
	allow       allowFlags
	vendors     vendorFlags
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
	cfg.record.register(fs)
	cfg.allow.register(fs)
	cfg.vendors.register(fs)
	fs.StringVar(&cfg.agent.Node, "node", "", "node name to record (default: this host's name)")
	fs.StringVar(&cfg.agent.HostProc, "host-proc", "/proc", "the host's /proc (in a container: mounted read-only, with CAP_SYS_PTRACE): its 1/ns/net, the node's netns, tells host-network pods apart; unreadable, the agent does not start (empty: no check)")
	fs.IntVar(&cfg.agent.Workers, "workers", agent.DefaultWorkers, "scans run at once")
	fs.IntVar(&cfg.agent.Queue, "queue", agent.DefaultQueue, "scans the runtime's events may queue; past it an event's scan is dropped (counted), never waited for")
	fs.DurationVar(&cfg.agent.ScanTimeout, "scan-timeout", agent.DefaultScanTimeout, "deadline of one scan; past it the finding is recorded with truncated: true")
	fs.BoolVar(&cfg.agent.Watch, "watch", true, "hold a monitor of nftables commits in every pod's netns (NRI only): a commit to an iptables table is scanned within --watch-debounce and its finding names the writing process")
	fs.BoolVar(&cfg.agent.ExecWatch, "exec-watch", true, "with --watch: hear every iptables command run on the node from the kernel's process events (needs the host's pid namespace, hostPID, and CAP_NET_ADMIN): a legacy write is scanned at once, a failed write or a read recorded with source exec; where it cannot listen it is off, the reason on /healthz")
	fs.DurationVar(&cfg.agent.WatchDebounce, "watch-debounce", agent.DefaultWatchDebounce, "with --watch: the window a burst of commits is gathered in, one scan per window however many commits; a sandbox whose last scan's nftables read took the window or longer waits ten times that read (at most 5m)")
	fs.StringVar(&cfg.agent.HostNetns, "host-netns", "", "node mode (NRI only, needs --watch): watch this netns as the node's, with the built-in platform allowlist; alone, --host-netns is --host-netns=host, HOST-PROC/1/ns/net, the node's (empty: off)")
	fs.Lookup("host-netns").NoOptDefVal = hostNetnsNode
	fs.StringSliceVar(&cfg.agent.Platforms, "platform", nil, "node mode: the network plugins this node runs, comma-separated ("+strings.Join(allowlist.Plugins(), ", ")+"), whose entries of the platform allowlist apply besides kube-proxy's and the kubelet's; an unknown name stops the agent")
	fs.BoolVar(&cfg.agent.PlatformOSKept, "platform-os-kept", false, "node mode: the node's OS image answers for what the platform's own rules need on RHEL 10 (OpenShift: each stream's image ships with its platform), so the rules the platform allowlist takes away leave the node's readiness too; by default their level counts there (kube-proxy's iptables mode needs kernel-modules-extra), never as usage")
	fs.StringVar(&cfg.criEndpoint, "cri-endpoint", "", "where NRI is off: sweep through this CRI socket (e.g. /run/containerd/containerd.sock, /var/run/crio/crio.sock) every --interval instead of using NRI")
	fs.DurationVar(&cfg.interval, "interval", 15*time.Minute, "with --cri-endpoint: time between sweeps (30 s after a listing that failed)")
	fs.DurationVar(&cfg.agent.ResweepInterval, "resweep-interval", agent.DefaultResweepInterval, "time between re-sweeps: every known pod netns is looked at again and scanned only if its nftables generation or legacy x_tables changed since its last complete scan, or that scan could not finish (legacy x_tables tell nobody of a change); sooner after the exec watch lost a command; 0: off")
	fs.IntVar(&cfg.agent.MaxUsage, "max-pod-series", agent.DefaultMaxUsage, "pods with usage given metrics series at most; past it a pod is left out (counted in iptables_alerter_agent_pod_series_left_out_total)")
	fs.StringVar(&cfg.healthAddr, "health-addr", "127.0.0.1:9757", "serve /healthz and /metrics here (empty: off)")
	registerProbeAddr(fs, &cfg.probeAddr, "127.0.0.1:9759")
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
	cfg.agent.Log, cfg.agent.Seen = cfg.record.log, cfg.record.seen
	cfg.agent.CRIEndpoint = cfg.criEndpoint
	cfg.agent.Load = loaders(&cfg.allow, &cfg.vendors)
	if _, err := cfg.allow.load(); err != nil {
		// Not fatal: the hook reports with the built-in entries too.
		log.WithError(err).Error("cannot load the allowlist, reporting without it until it is fixed")
	}
	cfg.agent.Observer = agentLog{log: log, records: new(scan.RecordLog), criEndpoint: cfg.criEndpoint}
	cfg.agent.NRILogger = nriLogger{log.WithField("component", "nri")}
	a, err := agent.New(cfg.agent)
	if err != nil {
		log.WithError(err).Error("agent not started")
		return 2
	}
	a.SpareProcessor()
	if cfg.agent.Watch {
		if err := watch.CheckRealtime(); err != nil {
			log.WithError(err).Warn("the watch reads writers at normal priority (give the agent CAP_SYS_NICE): a writer that exits at once after its commit is more often recorded gone, without its container")
		}
	}
	metrics := metricsHandler(agentRegistry(a))
	if cfg.metricsAddr != "" {
		srv, err := serveMetrics(cfg.metricsAddr, metrics)
		if err != nil {
			log.WithError(err).Error("agent not started")
			return 2
		}
		defer srv.Close()
		metrics = nil
	}
	if cfg.healthAddr != "" || cfg.probeAddr != "" {
		// Disconnected, the agent retries at least every 30 s; connected, it
		// is alive as long as the connection is.
		srv, err := serveHealth(cfg.healthAddr, cfg.probeAddr, a.Health().Alive, 2*time.Minute, a.Health().Degraded, metrics)
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
		run = func(ctx context.Context) error { return a.RunCRI(ctx, cfg.interval) }
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

// agentRegistry is what the agent's /metrics serves: the agent's own
// series, the Go and process collectors and the build info.
func agentRegistry(a *agent.Agent) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(a.Collectors()...)
	reg.MustRegister(daemonCollectors()...)
	return reg
}

// agentLog turns the agent's reports into log lines; the agent keeps its
// metrics and health itself.
type agentLog struct {
	log *logrus.Logger
	// records warns once per sandbox and limit window of the drops.
	records *scan.RecordLog
	// criEndpoint is --cri-endpoint: what the agent connects to instead
	// of NRI when set.
	criEndpoint string
}

// runtime names what the agent connects to, for the connection's log.
func (m agentLog) runtime() string {
	if m.criEndpoint == "" {
		return "the runtime's NRI socket"
	}
	return "the runtime's CRI endpoint " + m.criEndpoint
}

// The re-sweep's counts and the exec watch's misses are heard, or the
// build fails.
var (
	_ agent.ResweepObserver = agentLog{}
	_ agent.ExecObserver    = agentLog{}
	_ agent.SweptObserver   = agentLog{}
	_ agent.WatchObserver   = agentLog{}
)

func (m agentLog) WatchFailed(p scan.Meta, err error) {
	m.log.WithError(err).WithFields(logrus.Fields{"sandbox_id": p.SandboxID, "pod_namespace": p.Pod.Namespace, "pod_name": p.Pod.Name,
		"netns": p.Netns}).Warn("cannot watch the pod netns for nftables commits: they are not heard until a re-sweep scans the pod and watches it again (iptables_alerter_agent_errors_total{kind=\"watch\"})")
}

func (m agentLog) SweptWritten(path string, err error) {
	if err != nil {
		m.log.WithError(err).WithField("path", path).Warn("cannot write the word that every pod was looked at: the forwarder's node label says unknown until it is written")
		return
	}
	m.log.WithField("path", path).Info("the word that every pod was looked at is written again")
}

func (m agentLog) ExecOff(err error) {
	m.log.WithError(err).Warn("exec watch off: iptables commands (failed writes, reads, legacy writes as they happen) are not seen; the rest of the agent works")
}

func (m agentLog) ExecLost(l agent.ExecLosses) {
	lg := m.log.WithFields(logrus.Fields{"missed": l.Missed, "examples": l.Examples, "unread": l.Unread, "overruns": l.Overruns, "resweep": l.Resweep})
	then := ""
	if l.Resweep {
		then = "; re-sweeping the pod netns now for legacy rules they may have written"
	}
	if len(l.Missed) == 0 && l.Overruns == 0 {
		// Programs gone before they were read: most are no iptables tool.
		lg.Info("exec watch: programs ended before the agent could read what they were (iptables_alerter_agent_exec_unread_total)" + then)
		return
	}
	lg.Warn("exec watch: iptables commands ran that it could not record (iptables_alerter_agent_exec_missed_total; overruns: process events the kernel dropped)" + then)
}

func (agentLog) Handled(string, time.Duration) {}

func (m agentLog) Synced(pods, queued int) {
	m.log.WithFields(logrus.Fields{"pods": pods, "sweep": queued}).Info("runtime synchronized, sweeping every pod netns")
}

func (m agentLog) Resweeped(r agent.Resweep) {
	l := m.log.WithFields(logrus.Fields{"stage": r.Stage, "known": r.Known, "skipped": r.Skipped, "queued": r.Queued,
		"gone": r.Gone, "busy": r.Busy, "duration": r.Duration.String()})
	switch {
	case r.Blind:
		l.Warn("re-sweep: the host-wide x_tables mutex has been held at every re-sweep for an interval or more (by a pod or host process reading or writing legacy tables): the pods' legacy tables are not looked at again, and the agent no longer vouches that it looked at every pod (the node label is unknown) until a re-sweep gets past it")
		return
	case r.Busy > 0:
		l.Info("re-sweep: the host-wide x_tables mutex is held (by a pod or host process reading or writing legacy tables); the pod netns behind it are looked at again sooner")
		return
	}
	l.Debug("re-sweep: scanning the pod netns that changed")
}

func (m agentLog) Connection(up bool, err error) {
	if !up {
		m.log.WithError(err).Warn("not connected to " + m.runtime() + ", retrying")
	}
}

func (m agentLog) Scanned(s agent.Scan) {
	l := m.log.WithFields(logrus.Fields{"source": s.Meta.Source, "stage": s.Meta.Stage, "sandbox_id": s.Meta.SandboxID,
		"pod_namespace": s.Meta.Pod.Namespace, "pod_name": s.Meta.Pod.Name, "container": s.Meta.Container,
		"netns": s.Meta.Netns, "duration": s.Duration.String()})
	if s.AllowErr != nil {
		l.WithError(s.AllowErr).Error("cannot load the allowlist, reporting without it")
	}
	if s.VendorErr != nil {
		l.WithError(s.VendorErr).Error("cannot load the vendor table, naming vendors from the built-in one")
	}
	switch s.Outcome {
	case agent.Found:
		m.records.Log(l, s.Meta.SandboxID, *s.Record, s.Stored, s.Err)
	case agent.Failed:
		l.WithError(s.Err).Error("scan failed")
	case agent.Unreachable:
		if s.FirstUnreachable {
			l.WithError(s.Err).Warn("pod netns unreachable though the runtime says the pod runs: not scanned (is the host's /run/netns mounted at /var/run/netns?); logged once per sandbox")
		} else {
			l.WithError(s.Err).Debug("scan: unreachable")
		}
	case agent.Clean:
		if s.Err != nil {
			// Clean, but whether a usage recorded before stands is not
			// known (the per-sandbox memory unreadable).
			m.records.Log(l, s.Meta.SandboxID, findings.Record{State: findings.StateGone}, findings.Same, s.Err)
			return
		}
		l.Debug("scan: clean")
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
