//go:build !hookonly && !agentonly

package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/iptables-alerter/iptables-alerter/lib/modules"
	"github.com/iptables-alerter/iptables-alerter/lib/report"
)

var reportCommand = command{use: "report [FINDINGS-FILE...]", summary: "RHEL 10 readiness: findings grouped by owning workload, for people and CI",
	long: reportLong, args: true, newConfig: func() config { return new(reportConfig) }}

const reportLong = `Groups iptables usage by owning workload (namespace, Deployment,
StatefulSet, DaemonSet, CronJob, Job, bare or static Pod) with its pods,
nodes, worst RHEL 10 impact, recognised vendor, fix hint and an example
rule, and marks what the expectations file expects.

Inputs, any mix:

- FINDINGS-FILE...: findings files gathered from nodes; each one's rotated
  generations FILE.1, FILE.2... are read too;
- --events FILE: a saved 'kubectl get events -A -o json' (repeatable);
- none of these: the live cluster's OpenReports Reports of ours
  (reports.openreports.io, labelled managed-by iptables-alerter; they last
  while the workload does) in each namespace that holds one, and its
  Events (kept an hour by default) for every other namespace and for the
  nodes; the Events alone when it serves no Report CRD or holds none of
  ours. By namespace, so that a Report written in one namespace by anyone
  allowed to create Reports there hides no other namespace's Events.

--source picks one input instead: reports or events (the cluster's only),
files (only the files and --events given). With the Report CRD served but
listing Reports forbidden, the default stops (exit 2) naming the missing
permission rather than fall back to Events that hold only the last hour:
grant it, or ask for the Events with --source events.

Credentials the kubectl way: --kubeconfig, else $KUBECONFIG, else
~/.kube/config, else (in a pod) the service account; --context picks a
kubeconfig context. Several clusters in one report: --context repeated,
or --all-contexts for every context of the kubeconfig; each cluster is
read as one would be (with its context's namespace, within --timeout of
its own), and every format gets a CLUSTER column naming the context. A
cluster that cannot be read is named with its error in the report and on
stderr, the others are still reported, and the exit status is 2. With
findings files and --kubeconfig or --context,
owners come from the cluster; without, a finding's owner is its Pod (pod
names do not tell owners). --namespace (-n) keeps one namespace, from
every input; without it, reading the cluster keeps the namespace the
kubeconfig context sets, as kubectl does (none set, or in a pod: every
namespace); --all-namespaces (-A) reads every namespace. -o is --format.
Run as kubectl-iptables_alerter it is 'kubectl iptables-alerter report'.
The first line says which cluster, when, and from what
(reports or events).

--by node gives one row per node: its RHEL 10 readiness (breaks, unknown,
needs-extra, ready), the worst of the workloads seen on it and of its
iptables-alerter.io/rhel10 label (the forwarder's), or not-seen for a node
the cluster lists with neither; --by pool groups those nodes by
--pool-label (their node-role.kubernetes.io/ roles by default) and names
the pools that can move first. Both read the nodes from the cluster (when
it is read, or --kubeconfig or --context is given) and write text or json.
--pool NAME (with --by pool) gates one pool, for an upgrade pipeline
where no admission policy does: exit 0 when every node of it is ready
(needs-extra too with --allow-needs-extra), 1 when a node breaks, is
unknown or not seen (a node without the forwarder's
iptables-alerter.io/rhel10 label is not seen), 2 when no node is in it or
an input could not be read whole; stderr says why and names the
blocking nodes.

--format html writes one self-contained page (no script, nothing fetched)
with the workloads charted by impact and by vendor, and the table.

Impact levels: legacy (x_tables: breaks on RHEL 10), xt (iptables-nft with
xt extensions: breaks unless kernel-modules-extra is installed), native
(keeps loading; the iptables tooling is deprecated).

Kernel modules: from findings files, each workload's "kernel" line names
the modules its breaking rules need and what the --target release ships
them in: "breaks: ip_tables is not shipped", "needs kernel-modules-extra:
nft_compat", or "package unverified" where no counted source says which
package holds a module (docs/rhel10.md lists the table and its sources).

Exit status: 0 when nothing fails under --fail-on (the default, never,
only warns), 1 when a workload fails (unexpected: any workload the
expectations do not cover; breaks: a workload not covered whose worst
level is legacy, xt or unclassified), 2 on bad flags or an input that
cannot be read, and under --fail-on unexpected or breaks when a findings
line or Event could not be read (torn, not JSON, over the bound) or a
Report left results out (99 a Report) in a namespace whose Events were
not read (--source reports): run with --source auto, which reads them,
or from the findings files. A pod left out of a Report whose Events
expired (1h by default) is in no source but the findings files.`

type reportConfig struct {
	events                               []string
	kubeconfig, expectations, format, fo string
	namespace, source                    string
	contexts                             []string
	allContexts, allNamespaces           bool
	target                               string
	by, poolLabel                        string
	pool                                 string
	allowExtra                           bool
	timeout                              time.Duration
}

func (c *reportConfig) register(fs *pflag.FlagSet) {
	fs.StringArrayVar(&c.events, "events", nil, "`FILE` holding a saved 'kubectl get events -A -o json' (repeatable)")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, else the in-cluster service account): read the cluster, or resolve owners of findings files")
	fs.StringArrayVar(&c.contexts, "context", nil, "kubeconfig `CONTEXT` to use (default: its current context); repeated, one report over each one's cluster, with a CLUSTER column")
	fs.BoolVar(&c.allContexts, "all-contexts", false, "report over the cluster of every context of the kubeconfig, with a CLUSTER column")
	fs.StringVarP(&c.namespace, "namespace", "n", "", "report this namespace only, from every input (default: the context's namespace when it sets one and the cluster is read, else all)")
	fs.BoolVarP(&c.allNamespaces, "all-namespaces", "A", false, "report every namespace, whatever the context's namespace")
	fs.Var(newEnum(&c.source, report.SourceAuto, report.Sources...), "source", "what to read: auto (files and --events given, else the cluster's Reports, and its Events where a namespace has none), reports or events (the cluster's only), files (only those given)")
	fs.StringVar(&c.expectations, "expectations", "", "YAML file of expected usage (namespace glob, owner, vendor, level, rule, ruleRegexp, reason)")
	fs.VarP(newEnum(&c.format, "text", report.Formats...), "format", "o", "output format: "+strings.Join(report.Formats, ", "))
	fs.Var(newEnum(&c.fo, report.FailNever, report.FailModes...), "fail-on", "exit 1 when: never (warn only), unexpected (any usage not expected), breaks (unexpected usage that breaks on RHEL 10)")
	fs.Var(newEnum(&c.target, "rhel-"+modules.Releases.Default(), modules.Releases.Targets()...), "target", "RHEL 10 release whose kernel packages the kernel line of each workload speaks of: "+strings.Join(modules.Releases.Targets(), ", ")+" (default: the newest with verified data)")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Minute, "time limit of the API requests")
	fs.Var(newEnum(&c.by, "workload", "workload", "node", "pool"), "by", "one row per: workload, node (its RHEL 10 readiness from the workloads seen on it and its iptables-alerter.io/rhel10 label) or pool (nodes grouped by --pool-label, those that can move first first); node and pool write text or json")
	fs.StringVar(&c.poolLabel, "pool-label", report.DefaultPoolLabel, "with --by pool, the node label naming a node's pool; ending in /*, the names after the prefix of the labels a node has")
	fs.StringVar(&c.pool, "pool", "", "with --by pool, the gate of this `POOL`: exit 0 when every node of it is ready (by its iptables-alerter.io/rhel10 label too), 1 when one breaks, is unknown or not seen (or needs-extra), 2 when no node is in it")
	fs.BoolVar(&c.allowExtra, "allow-needs-extra", false, "with --pool, needs-extra nodes pass too (they will have kernel-modules-extra)")
}

func (c *reportConfig) run(files []string, s stdio) int {
	stderr := s.err
	if c.timeout <= 0 {
		fmt.Fprintf(stderr, "iptables-alerter report: --timeout %s: want a positive duration\n", c.timeout)
		return 2
	}
	if c.allNamespaces && c.namespace != "" {
		fmt.Fprintln(stderr, "iptables-alerter report: --namespace and --all-namespaces (-A) exclude each other")
		return 2
	}
	if err := report.CheckNamespace(c.namespace); err != nil {
		fmt.Fprintf(stderr, "iptables-alerter report: --namespace: %v\n", err)
		return 2
	}
	if c.allContexts && len(c.contexts) > 0 {
		fmt.Fprintln(stderr, "iptables-alerter report: --context and --all-contexts exclude each other")
		return 2
	}
	if (c.pool != "" || c.allowExtra) && (c.by != "pool" || c.allContexts || len(c.contexts) > 1) {
		fmt.Fprintln(stderr, "iptables-alerter report: --pool and --allow-needs-extra gate one pool of one cluster: with --by pool, and at most one --context")
		return 2
	}
	if c.allowExtra && c.pool == "" {
		fmt.Fprintln(stderr, "iptables-alerter report: --allow-needs-extra needs --pool")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	in := report.Inputs{Files: files, Events: c.events, Source: c.source, Namespace: c.namespace, AllNamespaces: c.allNamespaces, Target: c.target,
		Expectations: c.expectations, FailOn: c.fo, Connect: func() (report.Cluster, error) { return c.cluster(c.kubeContext()) },
		Owners: c.kubeconfig != "" || len(c.contexts) > 0}
	if c.allContexts || len(c.contexts) > 1 {
		return c.runFleet(ctx, in, s)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	r, err := report.Read(ctx, in)
	if fe, ok := report.IsForbidden(err, report.ResourceReports); ok && c.source == report.SourceAuto {
		// Never "clean" from Events that hold only the last hour: the
		// fallback is the reader's explicit choice.
		fmt.Fprintf(stderr, "iptables-alerter report: %v\nThe cluster serves Reports but these credentials may not %s them: grant that, or run with --source events to read only the Events (the API server keeps them --event-ttl, 1h by default, so older findings are left out).\n", fe, fe.Verb)
		return 2
	}
	if fe, ok := report.IsForbidden(err, report.ResourceEvents); ok && c.source == report.SourceAuto {
		fmt.Fprintf(stderr, "iptables-alerter report: %v\nThe Reports are read by namespace, and the Events for the namespaces and nodes without one: grant that, or run with --source reports to read only the Reports (under --fail-on a namespace whose Report left results out then exits 2: those pods are in no Report).\n", fe)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "iptables-alerter report: %v\n", err)
		return 2
	}
	if c.by != "workload" {
		return c.writeBy(ctx, r, files, s)
	}
	if err := report.Write(s.out, r, c.format); err != nil {
		fmt.Fprintf(stderr, "iptables-alerter report: %v\n", err)
		return 2
	}
	return exitStatus(r, stderr)
}

// exitStatus is the report's exit status once written: 2 when a --fail-on
// gate cannot pass it (report.GateBlind), else 1 when a workload fails,
// else 0.
func exitStatus(r report.Report, stderr io.Writer) int {
	if why := r.GateBlind(); why != "" {
		fmt.Fprintf(stderr, "iptables-alerter report: %s\n", why)
		return 2
	}
	if r.Failing {
		return 1
	}
	return 0
}

// poolGate is the exit status of --pool: the pool's verdict
// (report.PoolGate), said on stderr; 2 when the report could not read
// everything it was given, whatever --fail-on (a gate must not pass on
// what it could not read).
func (c *reportConfig) poolGate(r report.Report, rows []report.NodeRow, s stdio) int {
	r.FailOn = report.FailBreaks
	if why := r.GateBlind(); why != "" {
		fmt.Fprintf(s.err, "iptables-alerter report: --pool %s: %s\n", c.pool, why)
		return 2
	}
	code, why := report.PoolGate(rows, c.poolLabel, c.pool, c.allowExtra)
	fmt.Fprintf(s.err, "iptables-alerter report: %s\n", why)
	return code
}

// kubeContext is the one --context given, "" for the current context.
func (c *reportConfig) kubeContext() string {
	if len(c.contexts) == 1 {
		return c.contexts[0]
	}
	return ""
}

// runFleet reads the clusters of several contexts into one report
// (report.ReadFleet), writes it, and names each cluster that could not be
// read on stderr: exit 2 then, since the report is not complete.
func (c *reportConfig) runFleet(ctx context.Context, in report.Inputs, s stdio) int {
	if c.by != "workload" {
		fmt.Fprintf(s.err, "iptables-alerter report: --by %s reads one cluster: name one --context\n", c.by)
		return 2
	}
	names := c.contexts
	if c.allContexts {
		var err error
		if names, err = c.allContextNames(); err != nil {
			fmt.Fprintf(s.err, "iptables-alerter report: --all-contexts: %v\n", err)
			return 2
		}
	}
	members := make([]report.Member, len(names))
	for i, name := range names {
		members[i] = report.Member{Name: name, Connect: func() (report.Cluster, error) { return c.cluster(name) }}
	}
	r, err := report.ReadFleet(ctx, in, members, c.timeout)
	if err != nil {
		fmt.Fprintf(s.err, "iptables-alerter report: %v\n", err)
		return 2
	}
	if err := report.Write(s.out, r, c.format); err != nil {
		fmt.Fprintf(s.err, "iptables-alerter report: %v\n", err)
		return 2
	}
	if unread := r.Unread(); len(unread) > 0 {
		for _, u := range unread {
			fmt.Fprintf(s.err, "iptables-alerter report: context %s: %s\n", u.Name, u.Error)
		}
		fmt.Fprintf(s.err, "iptables-alerter report: %d of %d clusters could not be read: the report is not complete\n", len(unread), len(r.Clusters))
		return 2
	}
	return exitStatus(r, s.err)
}

// allContextNames lists the kubeconfig's contexts, sorted.
func (c *reportConfig) allContextNames() ([]string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = c.kubeconfig
	raw, err := rules.Load()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	names := slices.Sorted(maps.Keys(raw.Contexts))
	if len(names) == 0 {
		return nil, errors.New("the kubeconfig names no context (--kubeconfig, else $KUBECONFIG, else ~/.kube/config)")
	}
	return names, nil
}

// cluster finds credentials the kubectl way (client-go's default loading
// rules): --kubeconfig, else $KUBECONFIG's files, else ~/.kube/config, and
// in a pod without any of them the service account; kubeContext ("" for
// the current one) picks a context.
func (c *reportConfig) cluster(kubeContext string) (report.Cluster, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = c.kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubeContext})
	rc, err := cc.ClientConfig()
	if clientcmd.IsEmptyConfig(err) {
		return report.Cluster{}, errors.New("find credentials: no --kubeconfig, $KUBECONFIG or ~/.kube/config, and not running in a pod (KUBERNETES_SERVICE_HOST/PORT unset)")
	}
	if err != nil {
		return report.Cluster{}, fmt.Errorf("load kubeconfig: %w", err)
	}
	var name, ctxNamespace string
	// In a pod the loader fell back to the service account: no context,
	// and no namespace of one (a report run in a pod reads every
	// namespace unless told otherwise, as before).
	if raw, err := cc.RawConfig(); err == nil && len(raw.Contexts) > 0 {
		name = cmp.Or(kubeContext, raw.CurrentContext)
		if kc := raw.Contexts[name]; kc != nil {
			ctxNamespace = kc.Namespace
		}
	}
	rc.UserAgent = "iptables-alerter-report/" + about().Version
	cl, err := report.Connect(rc, name, c.namespace)
	cl.ContextNamespace = ctxNamespace
	return cl, err
}

// writeBy writes the report by node or pool. The nodes (their pools and
// labels) come from the cluster when the report read it or credentials
// were named; without them --by node shows the findings' nodes only.
func (c *reportConfig) writeBy(ctx context.Context, r report.Report, files []string, s stdio) int {
	if !slices.Contains(report.ByFormats, c.format) {
		fmt.Fprintf(s.err, "iptables-alerter report: --by %s writes %s, not --format %s\n", c.by, strings.Join(report.ByFormats, " or "), c.format)
		return 2
	}
	var nodes []corev1.Node
	// unread: the nodes were asked for and could not be read, so nodes
	// no finding names are missing from the rows (exit 2 once written).
	unread := false
	if (len(files) == 0 && len(c.events) == 0) || c.kubeconfig != "" || len(c.contexts) > 0 {
		cl, err := c.cluster(c.kubeContext())
		var list []corev1.Node
		if err == nil {
			list, err = report.ListNodes(ctx, cl.Client)
		}
		switch {
		case err != nil && c.by == "pool":
			fmt.Fprintf(s.err, "iptables-alerter report: --by pool reads the nodes' labels: %v\n", err)
			return 2
		case err != nil:
			fmt.Fprintf(s.err, "iptables-alerter report: the nodes could not be read (%v): showing the findings' nodes only, without their label; the nodes no finding names are missing, so the report is not complete\n", err)
			unread = true
		default:
			nodes = list
		}
	} else if c.by == "pool" {
		fmt.Fprintln(s.err, "iptables-alerter report: --by pool reads the nodes' labels: name the cluster with --kubeconfig or --context")
		return 2
	}
	rows := report.ByNode(r.Groups, nodes, c.poolLabel)
	var err error
	if c.by == "pool" {
		if err = report.WriteByPool(s.out, report.ByPool(rows), c.format); err == nil && c.pool != "" {
			return c.poolGate(r, rows, s)
		}
	} else {
		err = report.WriteByNode(s.out, rows, c.format)
	}
	if err != nil {
		fmt.Fprintf(s.err, "iptables-alerter report: %v\n", err)
		return 2
	}
	if unread {
		return 2
	}
	return exitStatus(r, s.err)
}
