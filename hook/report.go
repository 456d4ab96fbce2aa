//go:build !hookonly && !agentonly

package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/clientcmd"

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
  while the workload does), else, when it serves no Report CRD or holds
  none of ours, its Events (kept an hour by default).

--source picks one input instead: reports or events (the cluster's only),
files (only the files and --events given). With the Report CRD served but
listing Reports forbidden, the default stops (exit 2) naming the missing
permission rather than fall back to Events that hold only the last hour:
grant it, or ask for the Events with --source events.

Credentials the kubectl way: --kubeconfig, else $KUBECONFIG, else
~/.kube/config, else (in a pod) the service account; --context picks a
kubeconfig context. With findings files and --kubeconfig or --context,
owners come from the cluster; without, a finding's owner is its Pod (pod
names do not tell owners). --namespace (-n) keeps one namespace, from
every input. The first line says which cluster, when, and from what
(reports or events).

--format html writes one self-contained page (no script, nothing fetched)
with the workloads charted by impact and by vendor, and the table.

Impact levels: legacy (x_tables: breaks on RHEL 10), xt (iptables-nft with
xt extensions: breaks unless kernel-modules-extra is installed), native
(keeps loading; the iptables tooling is deprecated).

Exit status: 0 when nothing fails under --fail-on (the default, never,
only warns), 1 when a workload fails (unexpected: any workload the
expectations do not cover; breaks: a workload not covered whose worst
level is legacy, xt or unclassified), 2 on bad flags or an input that
cannot be read.`

type reportConfig struct {
	events                               []string
	kubeconfig, expectations, format, fo string
	kubeContext, namespace, source       string
	timeout                              time.Duration
}

func (c *reportConfig) register(fs *pflag.FlagSet) {
	fs.StringArrayVar(&c.events, "events", nil, "`FILE` holding a saved 'kubectl get events -A -o json' (repeatable)")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, else the in-cluster service account): read the cluster, or resolve owners of findings files")
	fs.StringVar(&c.kubeContext, "context", "", "kubeconfig context to use (default: its current context)")
	fs.StringVarP(&c.namespace, "namespace", "n", "", "report this namespace only (default: all), from every input")
	fs.Var(newEnum(&c.source, report.SourceAuto, report.Sources...), "source", "what to read: auto (files and --events given, else the cluster's Reports, else its Events), reports or events (the cluster's only), files (only those given)")
	fs.StringVar(&c.expectations, "expectations", "", "YAML file of expected usage (namespace glob, owner, vendor, level, rule, ruleRegexp, reason)")
	fs.Var(newEnum(&c.format, "text", report.Formats...), "format", "output format: "+strings.Join(report.Formats, ", "))
	fs.Var(newEnum(&c.fo, report.FailNever, report.FailModes...), "fail-on", "exit 1 when: never (warn only), unexpected (any usage not expected), breaks (unexpected usage that breaks on RHEL 10)")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Minute, "time limit of the API requests")
}

func (c *reportConfig) run(files []string, s stdio) int {
	stderr := s.err
	if c.timeout <= 0 {
		fmt.Fprintf(stderr, "iptables-alerter report: --timeout %s: want a positive duration\n", c.timeout)
		return 2
	}
	if err := report.CheckNamespace(c.namespace); err != nil {
		fmt.Fprintf(stderr, "iptables-alerter report: --namespace: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	r, err := report.Read(ctx, report.Inputs{Files: files, Events: c.events, Source: c.source, Namespace: c.namespace,
		Expectations: c.expectations, FailOn: c.fo, Connect: c.cluster, Owners: c.kubeconfig != "" || c.kubeContext != ""})
	if fe, ok := report.IsForbidden(err, report.ResourceReports); ok && c.source == report.SourceAuto {
		// Never "clean" from Events that hold only the last hour: the
		// fallback is the reader's explicit choice.
		fmt.Fprintf(stderr, "iptables-alerter report: %v\nThe cluster serves Reports but these credentials may not %s them: grant that, or run with --source events to read only the Events (the API server keeps them --event-ttl, 1h by default, so older findings are left out).\n", fe, fe.Verb)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "iptables-alerter report: %v\n", err)
		return 2
	}
	if err := report.Write(s.out, r, c.format); err != nil {
		fmt.Fprintf(stderr, "iptables-alerter report: %v\n", err)
		return 2
	}
	if r.Failing {
		return 1
	}
	return 0
}

// cluster finds credentials the kubectl way (client-go's default loading
// rules): --kubeconfig, else $KUBECONFIG's files, else ~/.kube/config, and
// in a pod without any of them the service account; --context picks a
// context.
func (c *reportConfig) cluster() (report.Cluster, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = c.kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: c.kubeContext})
	rc, err := cc.ClientConfig()
	if clientcmd.IsEmptyConfig(err) {
		return report.Cluster{}, errors.New("find credentials: no --kubeconfig, $KUBECONFIG or ~/.kube/config, and not running in a pod (KUBERNETES_SERVICE_HOST/PORT unset)")
	}
	if err != nil {
		return report.Cluster{}, fmt.Errorf("load kubeconfig: %w", err)
	}
	var name string
	// In a pod the loader fell back to the service account: no context.
	if raw, err := cc.RawConfig(); err == nil && len(raw.Contexts) > 0 {
		name = cmp.Or(c.kubeContext, raw.CurrentContext)
	}
	rc.UserAgent = "iptables-alerter-report/" + about().Version
	return report.Connect(rc, name, c.namespace)
}
