//go:build !hookonly

package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"

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
- none of these: the live cluster's Events (--kubeconfig, else the
  in-cluster service account).

With findings files and --kubeconfig, owners come from the live cluster;
without, a finding's owner is its Pod (pod names do not tell owners).

Impact levels: legacy (x_tables: breaks on RHEL 10), xt (iptables-nft with
xt extensions: breaks unless kernel-modules-extra is installed), native
(keeps loading; the iptables tooling is deprecated).

Exit status: 0 when nothing fails under --fail-on (the default, never,
only warns), 1 when a workload fails (unexpected: any usage the
expectations do not name; breaks: unexpected legacy, xt or unclassified
usage), 2 on bad flags or an input that cannot be read.`

type reportConfig struct {
	events                               []string
	kubeconfig, expectations, format, fo string
	timeout                              time.Duration
}

func (c *reportConfig) register(fs *pflag.FlagSet) {
	fs.StringArrayVar(&c.events, "events", nil, "`FILE` holding a saved 'kubectl get events -A -o json' (repeatable)")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig: read the cluster's Events, or resolve owners of findings files")
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
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	r, err := buildReport(ctx, files, c.events, c.kubeconfig, c.expectations, c.fo)
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

func buildReport(ctx context.Context, files, eventsFiles []string, kubeconfig, expectations, failOn string) (report.Report, error) {
	var exps []report.Expectation
	if expectations != "" {
		var err error
		if exps, err = report.LoadExpectations(expectations); err != nil {
			return report.Report{}, err
		}
	}
	var (
		items []report.Item
		sk    report.Skipped
	)
	paths, err := report.FindingsFiles(files)
	if err != nil {
		return report.Report{}, err
	}
	for _, p := range paths {
		its, err := report.ReadFindings(p, &sk)
		if err != nil {
			return report.Report{}, err
		}
		items = append(items, its...)
	}
	for _, p := range eventsFiles {
		f, err := os.Open(p)
		if err != nil {
			return report.Report{}, fmt.Errorf("open events: %w", err)
		}
		its, err := report.ReadEvents(f, p, &sk)
		f.Close()
		if err != nil {
			return report.Report{}, err
		}
		items = append(items, its...)
	}
	fromCluster := len(files) == 0 && len(eventsFiles) == 0
	if fromCluster || kubeconfig != "" {
		rc, err := restConfig(kubeconfig)
		if err != nil {
			return report.Report{}, err
		}
		rc.UserAgent = "iptables-alerter-report/" + version
		client, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return report.Report{}, fmt.Errorf("make kubernetes client: %w", err)
		}
		if fromCluster {
			its, err := report.ClusterEvents(ctx, client, &sk)
			if err != nil {
				return report.Report{}, err
			}
			items = append(items, its...)
		} else if err := report.ResolveOwners(ctx, client, items); err != nil {
			return report.Report{}, err
		}
	}
	r := report.Report{Groups: report.GroupItems(items, exps), Skipped: sk, FailOn: failOn}
	r.Failing = report.Judge(r.Groups, failOn)
	return r, nil
}
