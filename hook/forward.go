//go:build !hookonly && !agentonly

// Left out of the hookonly build: client-go's package init would run on
// every container start.

package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/openreports/reports-api/pkg/client/clientset/versioned"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/iptables-alerter/iptables-alerter/internal/httpserve"
	"github.com/iptables-alerter/iptables-alerter/lib/consumer"
	"github.com/iptables-alerter/iptables-alerter/lib/events"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/follow"
	"github.com/iptables-alerter/iptables-alerter/lib/kubeapi"
	"github.com/iptables-alerter/iptables-alerter/lib/nodemark"
	"github.com/iptables-alerter/iptables-alerter/lib/openreports"
)

var forwardCommand = command{use: "forward", summary: "post a Kubernetes Event on the pod and keep OpenReports Reports for each new finding",
	long: forwardLong, newConfig: func() config { return new(forwardConfig) }}

const forwardLong = `Follows the findings file and, for each new finding, creates an
events.k8s.io/v1 Event (type Warning, reason IPTablesUsageObserved) on the
live pod, with --node-event a summary Event on the Node, and (--reports,
the default) writes the pod's result into an OpenReports Report.

Delivery is exactly once across restarts: the checkpoint in --checkpoint-dir
moves only after the API server accepted or definitively rejected the
Event, and Event names are derived from the finding, so a replay is
answered AlreadyExists. While the API server is down, throttling or
refusing our credentials (401, or RBAC's 403), the same finding is
retried with backoff and later findings wait behind it. A finding whose
pod is gone is logged, counted and skipped; an Event or Report one
namespace refuses for good (a ResourceQuota, an admission webhook or
policy: 403, 422) is logged once per namespace and reason, counted and
shown on /healthz, and the next finding goes. So is one an admission
webhook that the API server cannot call has failed in its namespace for
--webhook-hold (or whose writes there ran out of time while the API
server answered /readyz and /version, as when its webhooks hang past
--request-timeout): the webhook's namespaceSelector may match that namespace
alone, and the node's other findings must not wait on it for good.

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
it posts Events only, says so once and looks again every minute; without
RBAC for Reports (asked with SelfSubjectAccessReviews at start and after
a 403) likewise, looking again every 5 minutes.

With --node-label (iptables-alerter.io/rhel10 by default) it keeps a label
on its own Node from the node's and its pods' findings, worst first:
breaks (legacy rules), unknown (a check that could not finish, or not
everything seen), needs-extra (xt rules: kernel-modules-extra), ready: only
while the agent's word beside the findings (FINDINGS.swept) says it looked
at every pod and every finding before that look was read, since a clean
pod leaves no finding. packaging/rbac/node-label.yaml
grants the patch and admits it only on the Node the service account's
bound token names; a refused patch is logged and tried again every minute,
never holding a finding.

Credentials: --kubeconfig, else the in-cluster service account.
Exit status: 0 after a clean shutdown (SIGTERM, SIGINT), 1 on an error
(no credentials, unreadable checkpoint, --checkpoint-dir held by another
consumer for a minute), 2 on bad flags.`

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

// forwardBatch is how many findings lines go between checkpoint saves: a
// workload's findings among them cost one Report write, and a crash
// replays at most that many Event creates (answered AlreadyExists).
const forwardBatch = follow.DefaultBatch

type forwardConfig struct {
	consumerFlags
	kubeconfig, nodeName, nodeLabel   string
	nodeEvent, reports                bool
	maxBackoff, timeout, reportsGrace time.Duration
	webhookHold                       time.Duration
	// reportsLook, when set, is how often Reports are looked for again
	// while off (tests; no flag).
	reportsLook time.Duration
	qps         float32
	burst       int
	secure      secureFlags
	log         logFlags
}

func (cfg *forwardConfig) register(fs *pflag.FlagSet) {
	cfg.consumerFlags.register(fs, defaultForwardStateDir, "serve /healthz on this address, e.g. :9756, and /metrics without --secure-metrics-addr", "127.0.0.1:9760")
	fs.StringVar(&cfg.kubeconfig, "kubeconfig", "", "kubeconfig file (empty: in-cluster service account)")
	fs.StringVar(&cfg.nodeName, "node-name", "", "this node's name, the Events' reportingInstance (default: the hostname)")
	fs.StringVar(&cfg.nodeLabel, "node-label", nodemark.DefaultLabel, "label kept on this node (--node-name) saying its RHEL 10 readiness from its own and its pods' findings: breaks, unknown, needs-extra or ready (empty: none; RBAC and admission policy in packaging/rbac/node-label.yaml)")
	fs.BoolVar(&cfg.nodeEvent, "node-event", false, "also post one summary Event per usage fingerprint on the Node")
	fs.BoolVar(&cfg.reports, "reports", true, "also keep OpenReports Reports (openreports.io/v1alpha1) per workload and node; Events only while the CRD is missing")
	fs.DurationVar(&cfg.reportsGrace, "reports-grace", openreports.DefaultGrace, "how long after its last finding a Report may keep the result of a pod that is gone")
	fs.DurationVar(&cfg.maxBackoff, "max-backoff", follow.DefaultMaxBackoff, "longest wait between retries of a finding the API did not take")
	fs.DurationVar(&cfg.timeout, "request-timeout", 30*time.Second, "timeout of one API request")
	fs.DurationVar(&cfg.webhookHold, "webhook-hold", kubeapi.DefaultHold, "how long a finding waits on an admission webhook the API server cannot call (failurePolicy Fail: 500 \"failed calling webhook\") in its namespace (or a write there that ran out of time while the API server was ready), later findings behind it; then that namespace's Events or Reports are refused, counted and said, until one gets through (0: wait for ever, losing nothing; one shorter than 2×(--max-backoff + 4×--request-timeout), 5m by default, is taken as that)")
	fs.Float32Var(&cfg.qps, "kube-api-qps", defaultQPS, "API requests a second this forwarder sends at most, sustained, Events and Reports together: a finding costs about 1.4 (its Event, the owner's lookup once a workload, and one Report write for a workload's findings between two checkpoint saves; pods come from one watch of the node), so the default keeps up with about 14 findings a second (client-go's default, 5 for each of its two clients, held it to about 2.5), under the kubelet's own 50; the API server's Priority and Fairness still bounds all nodes' forwarders together")
	fs.IntVar(&cfg.burst, "kube-api-burst", defaultBurst, "API requests sent at once above --kube-api-qps: the default lets about 10 findings (a node's burst of pod starts) through without waiting")
	cfg.secure.register(fs)
	cfg.log.register(fs)
}

func (cfg *forwardConfig) run(_ []string, s stdio) int {
	if cfg.poll <= 0 || cfg.maxBackoff <= 0 || cfg.timeout <= 0 || cfg.reportsGrace <= 0 || cfg.qps <= 0 || cfg.burst <= 0 {
		fmt.Fprintln(s.err, "iptables-alerter forward: --poll, --max-backoff, --request-timeout, --reports-grace, --kube-api-qps and --kube-api-burst must be positive")
		return 2
	}
	if cfg.webhookHold < 0 {
		fmt.Fprintln(s.err, "iptables-alerter forward: --webhook-hold must not be negative")
		return 2
	}
	if cfg.webhookHold > 0 {
		cfg.webhookHold = max(cfg.webhookHold, kubeapi.MinHold(cfg.maxBackoff, cfg.timeout))
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
	fields := logrus.Fields{"findings": cfg.findings, "state_dir": cfg.checkpointDir}
	return runConsumer(log, fields, "event forwarder", func(ctx context.Context) error { return forwardLoop(ctx, *cfg, log) })
}

func forwardLoop(ctx context.Context, cfg forwardConfig, log *logrus.Logger) error {
	rc, err := kubeapi.RESTConfig(cfg.kubeconfig)
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
	fields := logrus.Fields{"findings": cfg.findings, "state_dir": cfg.checkpointDir, "node": cfg.nodeName, "api_server": rc.Host}
	lock, err := lockCheckpointDir(ctx, cfg.checkpointDir, 0o700, log.WithFields(fields))
	if lock == nil {
		return err
	}
	defer lock.Close()
	refusals := kubeapi.NewRefusals()
	refusals.Hold = cfg.webhookHold
	// The node's pods from one watch, not a GET per finding.
	pods, err := kubeapi.WatchNodePodsConfig(ctx, rc, cfg.nodeName)
	if err != nil {
		return err
	}
	poster := events.New(client, cfg.nodeName, cfg.nodeEvent)
	poster.Live = pods.LivePod
	ev := events.NewConsumer(poster, log, refusals)
	// Save every forwardBatch lines (and whenever the file is drained):
	// the Reports of the lines between two saves are written once each
	// (their Flush), and a replay after a crash costs one Event create
	// a line, answered AlreadyExists.
	r := &consumer.Runner{Findings: cfg.findings, Store: follow.FileStore(filepath.Join(cfg.checkpointDir, "checkpoint.json")),
		Poll: cfg.poll, MaxBackoff: cfg.maxBackoff, Batch: forwardBatch, Log: log.WithFields(fields), RetryMsg: "event not delivered, will retry the same finding",
		ResetHint: " (Events already posted are answered AlreadyExists)", Consumers: []consumer.Named{{Name: "events", Consumer: ev}}}
	var keeper *openreports.Keeper
	if cfg.reports {
		rcs, err := versioned.NewForConfig(rc)
		if err != nil {
			return fmt.Errorf("make reports client: %w", err)
		}
		w := openreports.New(client, rcs, cfg.nodeName)
		w.Grace, w.Live, w.Progress, w.Owners = cfg.reportsGrace, pods.LivePod, r.Touch, poster.Owners
		keeper = openreports.NewKeeper(w, rcs, client, log)
		keeper.Posted, keeper.Refusals = ev.Posted, refusals
		if cfg.reportsLook > 0 {
			keeper.LookMissing, keeper.LookForbidden = cfg.reportsLook, cfg.reportsLook
		}
		keeper.Start(ctx)
		// After the Events: a Report error retries the line from the
		// Reports on.
		r.Consumers = append(r.Consumers, consumer.Named{Name: "reports", Consumer: keeper})
	}
	var marker *nodemark.Marker
	if cfg.nodeLabel != "" {
		marker, err = nodemark.New(client, cfg.nodeName, cfg.nodeLabel, filepath.Join(cfg.checkpointDir, "node-label.json"), log.WithFields(fields))
		if err != nil {
			return err
		}
		// Ready only under the agent's word that it looked at every pod,
		// with every finding since read by this runner.
		marker.Swept, marker.CaughtUp = findings.SweptPath(cfg.findings), r.CaughtUp
		if marker.Fresh() {
			// No state: the findings before the checkpoint are unknown to
			// the marker, and labelling now would say ready of a node whose
			// pods it never read. It reads them all first, alone.
			marker.Hold()
			replay := &consumer.Runner{Findings: cfg.findings, Store: follow.NoStore{}, Log: log.WithFields(fields),
				Consumers: []consumer.Named{{Name: "node-label", Consumer: marker}}}
			if err := replay.Once(ctx); err != nil {
				return fmt.Errorf("read the findings for the node label: %w", err)
			}
			marker.Release()
		}
		marker.Start(ctx)
		// Last: it never fails a line.
		r.Consumers = append(r.Consumers, consumer.Named{Name: "node-label", Consumer: marker})
	}
	reg := forwardMetrics(r, ev, keeper, refusals)
	marker.Register(reg)
	metrics := metricsHandler(reg)
	if cfg.secure.addr != "" {
		routes := map[string]http.Handler{"/metrics": metrics}
		if cfg.secure.agentMetrics != "" {
			routes["/metrics/agent"] = httpserve.Upstream(cfg.secure.agentMetrics)
		}
		srv, err := serveSecure(cfg.secure.addr, cfg.secure.certFile, cfg.secure.keyFile, rc, routes, log.WithFields(fields))
		if err != nil {
			return err
		}
		defer srv.Close()
		// Behind TLS only: the plain port is the kubelet's probe.
		metrics = nil
	}
	degraded := func() string { return joinReasons(ev.Degraded(), keeper.Degraded(), refusals.Degraded()) }
	// One finding may hold the loop for a backoff plus a pod GET and two
	// creates, each up to the request timeout (client-go may also wait
	// out a Retry-After), and the Report's get and update (and pod GET
	// when the Post found no pod); beyond that the loop is stuck.
	limit := 2*cfg.maxBackoff + 8*cfg.timeout + 10*cfg.poll
	return serveRunner(ctx, r, log, fields, "event forwarder", cfg.consumerFlags, limit, degraded, metrics,
		func() logrus.Fields {
			f := ev.Fields()
			f["malformed_total"], f["retries_total"] = r.Malformed(), r.Retries()
			return f
		})
}

// forwardMetrics gathers the consumers' counters: a finding set aside
// must be visible without reading logs.
func forwardMetrics(r *consumer.Runner, ev *events.Consumer, keeper *openreports.Keeper, refusals *kubeapi.Refusals) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	keeper.Register(reg)
	ev.Register(reg, r.Malformed, r.Retries)
	reg.MustRegister(refusals.Collector())
	reg.MustRegister(daemonCollectors()...)
	return reg
}

// joinReasons joins the non-empty reasons for /healthz.
func joinReasons(reasons ...string) string {
	var out []string
	for _, r := range reasons {
		if r != "" {
			out = append(out, r)
		}
	}
	return strings.Join(out, "; ")
}
