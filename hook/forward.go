//go:build !hookonly

// Left out of the hookonly build: client-go's package init would run on
// every container start.

package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/openreports/reports-api/pkg/client/clientset/versioned"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/iptables-alerter/iptables-alerter/internal/httpserve"
	"github.com/iptables-alerter/iptables-alerter/lib/events"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/follow"
	"github.com/iptables-alerter/iptables-alerter/lib/kubeapi"
	"github.com/iptables-alerter/iptables-alerter/lib/reports"
)

var forwardCommand = command{use: "forward", summary: "post a Kubernetes Event on the pod for each new finding",
	long: forwardLong, newConfig: func() config { return new(forwardConfig) }}

const forwardLong = `Follows the findings file and, for each new finding, creates an
events.k8s.io/v1 Event (type Warning, reason IPTablesUsageObserved) on the
live pod, and with --node-event a summary Event on the Node.

Delivery is exactly once across restarts: the checkpoint in --state-dir
moves only after the API server accepted or definitively rejected the
Event, and Event names are derived from the finding, so a replay is
answered AlreadyExists. While the API server is down, throttling or
refusing our credentials, the same finding is retried with backoff and
later findings wait behind it. A finding whose pod is gone is logged,
counted and skipped.

With --secure-metrics-addr it serves its metrics, and with
--agent-metrics the agent's (fetched from the agent on localhost), over
TLS only: each request needs a bearer token that the API server
authenticates (TokenReview) and whose user it allows to GET the path
(SubjectAccessReview; RBAC: nonResourceURLs /metrics, /metrics/agent).
Verdicts are cached for a minute. The certificate files are read again
when they change (OpenShift's service-ca rotates them).

With --reports (the default) it also keeps an OpenReports Report
(openreports.io/v1alpha1) per workload and node in the pod's namespace:
one result per pod (legacy and xt: fail, native: warn, an inspection
that could not finish: error), removed when the usage is gone or, for a
pod that no longer exists, --reports-grace after it was last seen. The
Reports are owned by the workload and go with it. Without the Report CRD
it posts Events only, says so once and looks again every minute.

Credentials: --kubeconfig, else the in-cluster service account.
Exit status: 0 after a clean shutdown (SIGTERM, SIGINT), 1 on an error
(no credentials, unreadable checkpoint), 2 on bad flags.`

// defaultForwardStateDir holds the forwarder's checkpoint.
const defaultForwardStateDir = "/var/lib/iptables-alerter/forward"

// defaultQPS and defaultBurst are the forwarder's client-side rate limit
// (see the flags' help); client-go's 5 and 10, a limiter each for the
// Events and the Reports client, held one forwarder to about 2.5 findings
// a second (tests/bench BenchmarkReports).
const (
	defaultQPS   = 20
	defaultBurst = 40
)

type forwardConfig struct {
	findings, stateDir, kubeconfig, nodeName, healthAddr string
	nodeEvent, reports                                   bool
	poll, maxBackoff, timeout, reportsGrace              time.Duration
	// reportsLook, when set, is how often Reports are looked for again
	// while off (tests; no flag).
	reportsLook time.Duration
	qps         float32
	burst       int
	secure      secureFlags
	log         logFlags
}

// secureFlags serve metrics behind TLS and the API server's authentication
// and authorisation.
type secureFlags struct {
	addr, certFile, keyFile, agentMetrics string
}

func (f *secureFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.addr, "secure-metrics-addr", "", "serve /metrics over TLS here, e.g. :9443, each request's bearer token authenticated (TokenReview) and its user authorised to GET the path (SubjectAccessReview) by the API server; /metrics is then not served on --health-addr (empty: off)")
	fs.StringVar(&f.certFile, "tls-cert-file", "", "with --secure-metrics-addr: the serving certificate (PEM), read again when it changes")
	fs.StringVar(&f.keyFile, "tls-private-key-file", "", "with --secure-metrics-addr: the certificate's private key (PEM), read again when it changes")
	fs.StringVar(&f.agentMetrics, "agent-metrics", "", "with --secure-metrics-addr: the agent's plain /metrics on localhost (its --metrics-addr), e.g. http://127.0.0.1:9758/metrics, served at /metrics/agent")
}

// check says what is missing or set alone.
func (f *secureFlags) check() error {
	if f.addr == "" {
		if f.certFile != "" || f.keyFile != "" || f.agentMetrics != "" {
			return errors.New("--tls-cert-file, --tls-private-key-file and --agent-metrics need --secure-metrics-addr")
		}
		return nil
	}
	if f.certFile == "" || f.keyFile == "" {
		return errors.New("--secure-metrics-addr needs --tls-cert-file and --tls-private-key-file")
	}
	if f.agentMetrics != "" {
		u, err := url.Parse(f.agentMetrics)
		if err != nil || u.Scheme != "http" || u.Host == "" {
			return fmt.Errorf("--agent-metrics %q: want an http:// URL", f.agentMetrics)
		}
	}
	return nil
}

func (cfg *forwardConfig) register(fs *pflag.FlagSet) {
	fs.StringVar(&cfg.findings, "findings", findings.DefaultPath, "findings file to read, and its rotated copy PATH.1")
	fs.StringVar(&cfg.stateDir, "state-dir", defaultForwardStateDir, "directory for the checkpoint")
	fs.StringVar(&cfg.kubeconfig, "kubeconfig", "", "kubeconfig file (empty: in-cluster service account)")
	fs.StringVar(&cfg.nodeName, "node-name", "", "this node's name, the Events' reportingInstance (default: the hostname)")
	fs.BoolVar(&cfg.nodeEvent, "node-event", false, "also post one summary Event per usage fingerprint on the Node")
	fs.BoolVar(&cfg.reports, "reports", true, "also keep OpenReports Reports (openreports.io/v1alpha1) per workload and node; Events only while the CRD is missing")
	fs.DurationVar(&cfg.reportsGrace, "reports-grace", reports.DefaultGrace, "how long a Report keeps the result of a pod that is gone")
	fs.StringVar(&cfg.healthAddr, "health-addr", "", "serve /healthz, and /metrics without --secure-metrics-addr, on this address, e.g. 127.0.0.1:9756 (empty: off)")
	fs.DurationVar(&cfg.poll, "poll", follow.DefaultPoll, "how often to look for new lines")
	fs.DurationVar(&cfg.maxBackoff, "max-backoff", follow.DefaultMaxBackoff, "longest wait between retries of a finding the API did not take")
	fs.DurationVar(&cfg.timeout, "request-timeout", 30*time.Second, "timeout of one API request")
	fs.Float32Var(&cfg.qps, "kube-api-qps", defaultQPS, "API requests a second this forwarder sends at most, sustained, Events and Reports together: a finding costs about 4 (its Event, the pod, the Report's get and write), so the default keeps up with about 5 findings a second (client-go's default, 5 for each of its two clients, held it to about 2.5), under the kubelet's own 50; the API server's Priority and Fairness still bounds all nodes' forwarders together")
	fs.IntVar(&cfg.burst, "kube-api-burst", defaultBurst, "API requests sent at once above --kube-api-qps: the default lets about 10 findings (a node's burst of pod starts) through without waiting")
	cfg.secure.register(fs)
	cfg.log.register(fs)
}

func (cfg *forwardConfig) run(_ []string, s stdio) int {
	if cfg.poll <= 0 || cfg.maxBackoff <= 0 || cfg.timeout <= 0 || cfg.reportsGrace <= 0 || cfg.qps <= 0 || cfg.burst <= 0 {
		fmt.Fprintln(s.err, "iptables-alerter forward: --poll, --max-backoff, --request-timeout, --reports-grace, --kube-api-qps and --kube-api-burst must be positive")
		return 2
	}
	if err := cfg.secure.check(); err != nil {
		fmt.Fprintln(s.err, "iptables-alerter forward: "+err.Error())
		return 2
	}
	log := cfg.log.logger(s.err)
	if cfg.nodeName == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			log.WithError(err).Error("no --node-name and no hostname")
			return 1
		}
		cfg.nodeName = h
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := forwardLoop(ctx, *cfg, log); err != nil {
		log.WithError(err).WithFields(logrus.Fields{"findings": cfg.findings, "state_dir": cfg.stateDir}).Error("event forwarder stopped")
		return 1
	}
	return 0
}

// restConfig finds credentials: the flag, else the pod's service account.
func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("load kubeconfig %q: %w", kubeconfig, err)
		}
		return c, nil
	}
	c, err := rest.InClusterConfig()
	if errors.Is(err, rest.ErrNotInCluster) {
		return nil, errors.New("find credentials: --kubeconfig not given and not running in a pod (KUBERNETES_SERVICE_HOST/PORT unset)")
	}
	if err != nil {
		return nil, fmt.Errorf("load in-cluster config: %w", err)
	}
	return c, nil
}

// forwardStats counts outcomes for the logs; the loop is the only writer.
type forwardStats struct {
	created, duplicate, podGone, noPod, rejected, malformed, retried atomic.Int64
	// refused counts Events and Reports a namespace refused (refused).
	refused *prometheus.CounterVec
	// byImpact counts created pod Events by worst impact and vendor label,
	// both from bounded sets (findings.ImpactLevels, VendorLabels).
	byImpact *prometheus.CounterVec
}

func newForwardStats() *forwardStats {
	return &forwardStats{refused: newRefusedCounter(), byImpact: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "iptables_alerter_forward_events_by_impact_total",
		Help: "Pod Events created, by the finding's worst RHEL 10 impact (legacy, xt, native; unclassified findings left out) and recognised vendor (unknown: none; other: an admin-added vendor; a finding naming two vendors counts under both).",
	}, []string{"impact", "vendor"})}
}

// countImpact counts a created Event under its impact and vendors.
func (s *forwardStats) countImpact(rec findings.Record) {
	w := rec.WorstLevel()
	if findings.ImpactRank(w) == len(findings.ImpactLevels) {
		return
	}
	for _, v := range findings.VendorLabels(rec.Vendors) {
		s.byImpact.WithLabelValues(w, v).Inc()
	}
}

func (s *forwardStats) fields() logrus.Fields {
	return logrus.Fields{
		"created_total":   s.created.Load(),
		"duplicate_total": s.duplicate.Load(),
		"pod_gone_total":  s.podGone.Load(),
		"no_pod_total":    s.noPod.Load(),
		"rejected_total":  s.rejected.Load(),
		"malformed_total": s.malformed.Load(),
		"retries_total":   s.retried.Load(),
	}
}

// handler serves the counters to Prometheus: a finding set aside (rejected)
// must be visible without reading logs.
func (s *forwardStats) handler(keeper *reports.Keeper) http.Handler {
	reg := prometheus.NewRegistry()
	keeper.Register(reg)
	reg.MustRegister(s.refused)
	for outcome, n := range map[string]*atomic.Int64{
		string(events.Created): &s.created, string(events.Duplicate): &s.duplicate, string(events.PodGone): &s.podGone,
		string(events.NoPod): &s.noPod, string(events.Rejected): &s.rejected, "malformed": &s.malformed,
	} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "iptables_alerter_forward_findings_total",
			Help:        "Findings the forwarder finished with, by outcome (rejected: set aside for good).",
			ConstLabels: prometheus.Labels{"outcome": outcome},
		}, func() float64 { return float64(n.Load()) }))
	}
	reg.MustRegister(s.byImpact, buildInfoGauge())
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "iptables_alerter_forward_retries_total",
		Help: "Attempts that failed and will be retried (API server down, throttling, 401, 403).",
	}, func() float64 { return float64(s.retried.Load()) }))
	return metricsHandler(reg)
}

func forwardLoop(ctx context.Context, cfg forwardConfig, log *logrus.Logger) error {
	rc, err := restConfig(cfg.kubeconfig)
	if err != nil {
		return err
	}
	rc.UserAgent = "iptables-alerter-forward/" + about().Version
	rc.Timeout = cfg.timeout
	if cfg.qps > 0 && cfg.burst > 0 {
		// One limiter for both clients made from rc (Events and
		// Reports): the flags bound what this forwarder sends, not each
		// client. Unset (in-process tests), client-go's defaults hold.
		rc.QPS, rc.Burst = cfg.qps, cfg.burst
		rc.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.qps, cfg.burst)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("make kubernetes client: %w", err)
	}
	if err := os.MkdirAll(cfg.stateDir, 0o700); err != nil {
		return fmt.Errorf("create state dir %q: %w", cfg.stateDir, err)
	}
	fields := logrus.Fields{"findings": cfg.findings, "state_dir": cfg.stateDir, "node": cfg.nodeName, "api_server": rc.Host}
	f := follow.New(cfg.findings, follow.FileStore(filepath.Join(cfg.stateDir, "checkpoint.json")))
	f.Poll = cfg.poll
	f.MaxBackoff = cfg.maxBackoff
	// Save after every line: a replay would be harmless (AlreadyExists),
	// but each Event costs an API call, which dwarfs an fsync.
	f.Batch = 1
	st := newForwardStats()
	f.Skipped = func(s follow.Skip) {
		st.malformed.Add(1)
		log.WithFields(logrus.Fields{"file": s.File, "offset": s.Offset, "size": s.Size, "reason": s.Reason}).Warn("skipping findings line")
	}
	f.Reset = func(err error) {
		log.WithError(err).WithFields(fields).Warn("checkpoint is damaged: reading the findings file again from its oldest line (Events already posted are answered AlreadyExists)")
	}
	f.Retry = func(err error, wait time.Duration) {
		st.retried.Add(1)
		log.WithError(err).WithField("retry_in", wait.String()).Warn("event not delivered, will retry the same finding")
	}
	h := &forwarder{poster: events.New(client, cfg.nodeName, cfg.nodeEvent), log: log, stats: st}
	if cfg.reports {
		rcs, err := versioned.NewForConfig(rc)
		if err != nil {
			return fmt.Errorf("make reports client: %w", err)
		}
		w := reports.New(client, rcs, cfg.nodeName)
		w.Grace = cfg.reportsGrace
		h.reports = reports.NewKeeper(w, rcs, client, log)
		if cfg.reportsLook > 0 {
			h.reports.LookMissing, h.reports.LookForbidden = cfg.reportsLook, cfg.reportsLook
		}
		h.reports.Start(ctx)
	}
	metrics := st.handler(h.reports)
	if cfg.secure.addr != "" {
		routes := map[string]http.Handler{"/metrics": metrics}
		if cfg.secure.agentMetrics != "" {
			routes["/metrics/agent"] = httpserve.Upstream(cfg.secure.agentMetrics)
		}
		srv, err := serveSecure(cfg.secure.addr, cfg.secure.certFile, cfg.secure.keyFile, client, routes)
		if err != nil {
			return err
		}
		defer srv.Close()
		// Behind TLS only: the plain port is the kubelet's probe.
		metrics = nil
	}
	if cfg.healthAddr != "" {
		// One finding may hold the loop for a backoff plus a pod GET and
		// two creates, each up to the request timeout (client-go may also
		// wait out a Retry-After), and the Report's get and update (and
		// pod GET when the Post found no pod); beyond that the loop is
		// stuck.
		srv, err := serveHealth(cfg.healthAddr, f.Alive, 2*cfg.maxBackoff+8*cfg.timeout+10*cfg.poll, h.degraded, metrics)
		if err != nil {
			return err
		}
		defer srv.Close()
	}
	log.WithFields(fields).Info("event forwarder following")
	if err := f.Run(ctx, h.handle); err != nil {
		return err
	}
	log.WithFields(fields).WithFields(st.fields()).WithField("offset", f.Checkpoint().Offset).Info("event forwarder stopped, checkpoint saved")
	return nil
}

// forwarder is the follower's handler: one line, one Post, one Report
// write.
type forwarder struct {
	poster *events.Poster
	// reports is nil with --reports=false.
	reports *reports.Keeper
	log     *logrus.Logger
	stats   *forwardStats
	// refusals are the namespaces refusing our Events or Reports;
	// eventsForbidden why RBAC refuses the Events, until one gets through.
	refusals        kubeapi.Refusals
	eventsForbidden atomic.Pointer[string]
}

// degraded says, for /healthz, what the forwarder cannot deliver.
func (h *forwarder) degraded() string {
	var parts []string
	if why := h.eventsForbidden.Load(); why != nil {
		parts = append(parts, *why)
	}
	for _, why := range []string{h.reports.Degraded(), h.refusals.Degraded()} {
		if why != "" {
			parts = append(parts, why)
		}
	}
	return strings.Join(parts, "; ")
}

// handle returns an error only for what may succeed later; the follower
// then hands the same line again after a backoff, so order is kept.
func (h *forwarder) handle(ctx context.Context, line []byte) error {
	rec, err := findings.Parse(line)
	if err != nil {
		h.stats.malformed.Add(1)
		h.log.WithError(err).Warn("skipping malformed finding")
		return nil
	}
	fields := logrus.Fields{
		"pod_namespace": rec.Pod.Namespace,
		"pod_name":      rec.Pod.Name,
		"pod_uid":       rec.Pod.UID,
		"container_id":  rec.ContainerID,
		"fingerprint":   rec.Fingerprint,
		"state":         string(rec.State),
	}
	res, err := h.poster.Post(ctx, rec)
	if err != nil {
		if kubeapi.IsForbiddenToUs(err) {
			// Kept and retried: the Events are the product, an admin's
			// RBAC fix delivers them all.
			why := "Events held: RBAC refuses the forwarder (" + err.Error() + ")"
			h.eventsForbidden.Store(&why)
		}
		return err
	}
	h.eventsForbidden.Store(nil)
	fields["outcome"] = string(res.Outcome)
	if res.Name != "" {
		fields["event"] = res.Namespace + "/" + res.Name
	}
	if res.Owner.Kind != "" {
		fields["owner"] = res.Owner.String()
	}
	if res.Node != "" {
		fields["node_event"] = string(res.Node)
	}
	if res.NodeWhy != nil {
		fields["node_event_error"] = res.NodeWhy.Error()
	}
	entry := h.log.WithFields(fields)
	if res.Why != nil {
		entry = entry.WithError(res.Why)
	}
	switch res.Outcome {
	case events.Created:
		h.stats.created.Add(1)
		h.stats.countImpact(rec)
		entry.WithField("live_pod_uid", string(res.PodUID)).WithField("mirror", res.Mirror).Info("event created")
	case events.Duplicate:
		h.stats.duplicate.Add(1)
		entry.Info("event already delivered")
	case events.PodGone:
		h.stats.podGone.Add(1)
		entry.Warn("pod gone, finding skipped")
	case events.NoPod:
		h.stats.noPod.Add(1)
		entry.Info("finding without a pod or with its usage gone, skipped")
	case events.Rejected:
		// Set aside for good: retrying would hold every later finding.
		n := h.stats.rejected.Add(1)
		if kubeapi.Refusal(res.Why) != "" {
			h.refused(kindEvent, res.Namespace, res.Why, entry.WithField("rejected_total", n))
			break
		}
		entry.WithField("rejected_total", n).Error("event rejected by the API server, finding skipped")
	}
	if res.Outcome == events.Created || res.Outcome == events.Duplicate {
		h.refusals.Clear(kindEvent, res.Namespace)
	}
	// After the Events: a Report error retries the line, whose Events
	// are then answered AlreadyExists.
	return h.writeReport(ctx, rec, res, fields)
}
