package monitoringtest

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
)

const (
	promtool   = "/usr/bin/promtool"
	prometheus = "/usr/bin/prometheus"
	ruleCR     = "../../packaging/monitoring/prometheusrule.yaml"
	dashboard  = "../../packaging/monitoring/grafana-dashboard.json"
	// consoleDash is the OpenShift console's copy, generated from
	// dashboard (tests/packaging's TestConsoleDashboard).
	consoleDash = "../../packaging/monitoring/console/console-dashboard.json"
	// job is the job label the ServiceMonitor gives: the Service's name.
	job = "iptables-alerter-metrics"
)

func needTool(t *testing.T, path string) {
	t.Helper()
	_, err := os.Stat(path)
	nstest.Need(t, err == nil, path+" (apt-get install prometheus)")
}

// ruleFile writes the PrometheusRule's spec, a Prometheus rule file, into
// dir as rules.yaml: the one copy of the rules is the shipped resource.
func ruleFile(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(ruleCR)
	if err != nil {
		t.Fatal(err)
	}
	var cr struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name   string            `json:"name"`
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec json.RawMessage `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(b, &cr); err != nil {
		t.Fatalf("%s: %v", ruleCR, err)
	}
	if cr.APIVersion != "monitoring.coreos.com/v1" || cr.Kind != "PrometheusRule" || cr.Metadata.Name == "" {
		t.Fatalf("%s: %s %s %q, want a named monitoring.coreos.com/v1 PrometheusRule", ruleCR, cr.APIVersion, cr.Kind, cr.Metadata.Name)
	}
	spec, err := yaml.JSONToYAML(cr.Spec)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(p, spec, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestRules: the rules load (promtool check rules) and behave as
// testdata/rules_test.yaml says (promtool test rules), and every alert has
// a summary, a description and a runbook that docs/runbooks.md holds.
func TestRules(t *testing.T) {
	needTool(t, promtool)
	dir := t.TempDir()
	rules := ruleFile(t, dir)
	run(t, promtool, "check", "rules", rules)
	tests, err := os.ReadFile("testdata/rules_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules_test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, promtool, "test", "rules", filepath.Join(dir, "rules_test.yaml"))

	var spec struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `json:"alert"`
				Record      string            `json:"record"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	}
	b, err := os.ReadFile(rules)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	runbooks, err := os.ReadFile("../../docs/runbooks.md")
	if err != nil {
		t.Fatal(err)
	}
	tested := string(tests)
	for _, g := range spec.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				if !strings.Contains(tested, r.Record+"{") {
					t.Errorf("recording rule %s has no promtool test", r.Record)
				}
				continue
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if r.Annotations[a] == "" {
					t.Errorf("alert %s has no %s", r.Alert, a)
				}
			}
			anchor := "#" + strings.ToLower(r.Alert)
			if !strings.HasSuffix(r.Annotations["runbook_url"], "/docs/runbooks.md"+anchor) || !strings.Contains(string(runbooks), "\n## "+r.Alert+"\n") {
				t.Errorf("alert %s: runbook_url %q, want docs/runbooks.md%s with a section \"## %s\"", r.Alert, r.Annotations["runbook_url"], anchor, r.Alert)
			}
			if !strings.Contains(tested, "alertname: "+r.Alert+"\n") {
				t.Errorf("alert %s has no promtool test", r.Alert)
			}
		}
	}
}

// panel is what the test reads of a Grafana panel.
type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource source `json:"datasource"`
	GridPos    *struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID      string `json:"refId"`
		Expr       string `json:"expr"`
		Datasource source `json:"datasource"`
	} `json:"targets"`
	// A table's sort and the columns its transformations rename.
	Options struct {
		SortBy []struct {
			DisplayName string `json:"displayName"`
		} `json:"sortBy"`
	} `json:"options"`
	Transformations []struct {
		ID      string `json:"id"`
		Options struct {
			RenameByName map[string]string `json:"renameByName"`
		} `json:"options"`
	} `json:"transformations"`
}

// source is a panel's or query's data source: the dashboard's variable,
// so the importer picks the Prometheus.
type source struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

var prometheusVar = source{Type: "prometheus", UID: "${datasource}"}

// loadDashboard checks the dashboard's structure, as Grafana imports it:
// a uid and title, the Prometheus data source as a variable every panel
// and target uses, unique panel ids, panels inside the 24-column grid and
// each with queries of unique refIds. It returns every query.
func loadDashboard(t *testing.T) (exprs []string) {
	t.Helper()
	b, err := os.ReadFile(dashboard)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID           string `json:"uid"`
		Title         string `json:"title"`
		SchemaVersion int    `json:"schemaVersion"`
		Templating    struct {
			List []struct {
				Name, Type, Definition, AllValue string
				Query                            json.RawMessage
				IncludeAll                       bool   `json:"includeAll"`
				Datasource                       source `json:"datasource"`
			} `json:"list"`
		} `json:"templating"`
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboard, err)
	}
	if d.UID == "" || d.Title == "" || d.SchemaVersion < 36 || len(d.Panels) == 0 {
		t.Fatalf("dashboard: uid %q, title %q, schemaVersion %d, %d panels", d.UID, d.Title, d.SchemaVersion, len(d.Panels))
	}
	if len(d.Templating.List) != 3 || d.Templating.List[0].Name != "datasource" || d.Templating.List[0].Type != "datasource" || string(d.Templating.List[0].Query) != `"prometheus"` {
		t.Fatalf("dashboard: variables %+v, want the Prometheus data source \"datasource\", then cluster and namespace", d.Templating.List)
	}
	// cluster and namespace: queries of label values, "All" matching
	// every value and none (a Prometheus without a cluster label).
	for i, name := range []string{"cluster", "namespace"} {
		v := d.Templating.List[i+1]
		if v.Name != name || v.Type != "query" || !v.IncludeAll || v.AllValue != ".*" || v.Datasource != prometheusVar || !strings.HasPrefix(v.Definition, "label_values(") {
			t.Errorf("dashboard: variable %d is %+v, want the query variable %q with All as .*", i+1, v, name)
		}
	}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if p.ID <= 0 || ids[p.ID] || p.Title == "" || p.Type == "" {
			t.Errorf("%s: id repeated or zero, or no title or type", where)
		}
		ids[p.ID] = true
		if g := p.GridPos; g == nil || g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 || g.Y < 0 {
			t.Errorf("%s: gridPos %+v outside the 24-column grid", where, p.GridPos)
		}
		if p.Datasource != prometheusVar {
			t.Errorf("%s: datasource %+v, want %+v", where, p.Datasource, prometheusVar)
		}
		// Grafana sorts by the name a column shows, after renames: one
		// renamed away sorts nothing.
		for _, tr := range p.Transformations {
			for _, by := range p.Options.SortBy {
				if _, gone := tr.Options.RenameByName[by.DisplayName]; gone {
					t.Errorf("%s: sorted by %q, which %s renames to %q", where, by.DisplayName, tr.ID, tr.Options.RenameByName[by.DisplayName])
				}
			}
		}
		refs := map[string]bool{}
		if len(p.Targets) == 0 {
			t.Errorf("%s: no query", where)
		}
		for _, q := range p.Targets {
			if q.RefID == "" || refs[q.RefID] || strings.TrimSpace(q.Expr) == "" {
				t.Errorf("%s: query %q with refId %q empty or repeated", where, q.Expr, q.RefID)
			}
			if q.Datasource != prometheusVar {
				t.Errorf("%s: query %s datasource %+v, want %+v", where, q.RefID, q.Datasource, prometheusVar)
			}
			refs[q.RefID] = true
			// Every selector of the project's series is narrowed to the
			// chosen clusters, the pods' ones to the chosen namespaces.
			for _, sel := range selector.FindAllStringSubmatch(q.Expr, -1) {
				if !strings.Contains(sel[2], `cluster=~"$cluster"`) {
					t.Errorf("%s: query %s: %s{%s} not narrowed to $cluster", where, q.RefID, sel[1], sel[2])
				}
				if sel[1] == "iptables_alerter_agent_pod_rules" && !strings.Contains(sel[2], `pod_namespace=~"$namespace"`) {
					t.Errorf("%s: query %s: %s{%s} not narrowed to $namespace", where, q.RefID, sel[1], sel[2])
				}
			}
			// As Grafana sends it with All chosen.
			exprs = append(exprs, strings.NewReplacer("$cluster", ".*", "$namespace", ".*").Replace(q.Expr))
		}
	}
	return exprs
}

// loadConsoleDashboard is every query of the console's copy, as the
// console sends it with All chosen (openshift/monitoring-plugin's
// evaluateVariableTemplate): its panels' queries, in the order of
// loadDashboard's, then its variables' (label_values(X, l) sent as
// count(X) by (l)), each variable as .+ (but one named namespace, as the
// console does) and the range and interval variables as durations of its
// default 30 minutes.
func loadConsoleDashboard(t *testing.T) (panels, variables []string) {
	t.Helper()
	b, err := os.ReadFile(consoleDash)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Templating struct {
			List []struct{ Name, Type, Query string } `json:"list"`
		} `json:"templating"`
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", consoleDash, err)
	}
	values := map[string]string{"__range": "1800s", "__range_ms": "1800000", "__range_s": "1800", "__interval": "5m", "__rate_interval": "5m"}
	for _, v := range d.Templating.List {
		values[v.Name] = ".+"
		if v.Name == "namespace" {
			// The console's own rule for a variable so named: its
			// value, which is All's key, not .+, unless the project
			// picker says All Projects (variable-utils.ts).
			values[v.Name] = "ALL_OPTION_KEY"
		}
	}
	eval := func(expr string) string {
		e := variable.ReplaceAllStringFunc(expr, func(m string) string {
			if v, ok := values[m[1:]]; ok {
				return v
			}
			if strings.HasPrefix(m, "$__auto_interval_") {
				return "5m"
			}
			return m
		})
		// label_replace's $1 is not one (the console replaces
		// only the variables it knows).
		if unknownVariable.MatchString(e) {
			t.Errorf("%s: query %q: a variable the console does not substitute", consoleDash, expr)
		}
		return e
	}
	for _, p := range d.Panels {
		for _, q := range p.Targets {
			panels = append(panels, eval(q.Expr))
		}
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			variables = append(variables, labelValues.ReplaceAllString(eval(v.Query), "count($1) by ($2)"))
		}
	}
	return panels, variables
}

// variable matches a variable in a query, as the console does ($name not
// followed by a name's character).
var variable = regexp.MustCompile(`\$[a-zA-Z0-9_]+`)

// unknownVariable matches a variable name left in a query after the
// console's substitution; label_replace's "$1" is none.
var unknownVariable = regexp.MustCompile(`\$[a-zA-Z_]`)

// labelValues is the console's rewriting of label_values (greedy, as its
// JavaScript regular expression).
var labelValues = regexp.MustCompile(`label_values\((.*), (.*)\)`)

// selector matches a series selector of a dashboard query: the metric
// and what is between the braces.
var selector = regexp.MustCompile(`\b(up|iptables_alerter_[a-z_]+)\{([^}]*)\}`)

// metricName matches the project's metric names in a query.
var metricName = regexp.MustCompile(`\biptables_alerter_[a-z_]+`)

// TestDashboard: the dashboard's structure, and every query, and every
// query of the console's copy as the console sends it, parses (promtool
// check rules, each as a recording rule) and names only metrics the agent
// or forwarder serve. TestAlertEndToEnd runs each against a
// real Prometheus scraping a real agent.
func TestDashboard(t *testing.T) {
	needTool(t, promtool)
	exprs := loadDashboard(t)
	// The console's copy's, as the console sends them.
	console, variables := loadConsoleDashboard(t)
	if len(console) != len(exprs) || len(variables) == 0 {
		t.Errorf("%s: %d panel queries and %d variable queries, want the Grafana copy's %d and a variable's", consoleDash, len(console), len(variables), len(exprs))
	}
	exprs = append(append(exprs, console...), variables...)
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, e := range exprs {
		q, _ := json.Marshal(e)
		fmt.Fprintf(&rules, "      - record: dashboard:query%d\n        expr: %s\n", i, q)
	}
	p := filepath.Join(t.TempDir(), "queries.yaml")
	if err := os.WriteFile(p, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, promtool, "check", "rules", p)
	// The metrics reference is generated from the agent's and the
	// forwarder's registries (hook's TestReference keeps it current).
	ref, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range exprs {
		for _, m := range metricName.FindAllString(e, -1) {
			if !strings.Contains(string(ref), "`"+m+"`") {
				t.Errorf("query %q: metric %s is not one the agent or forwarder serve", e, m)
			}
		}
		if !strings.Contains(e, `job="`+job+`"`) {
			t.Errorf("query %q does not select job=%q", e, job)
		}
	}
}

// TestRulesPerWorkload (issue 27 item 3): 500 pods with breaking rules, of
// 10 Deployments in 2 namespaces, on 5 nodes, fire exactly 10
// IPTablesBreakingOnRHEL10 alerts, one per Deployment at its worst impact,
// each with its pod count and runbook; the per-pod series stay, 500 of
// them. promtool test rules, on a test file written here.
func TestRulesPerWorkload(t *testing.T) {
	needTool(t, promtool)
	dir := t.TempDir()
	ruleFile(t, dir)
	const pods, deployments, nodes = 500, 10, 5
	var in, alerts strings.Builder
	for d := 0; d < deployments; d++ {
		ns := []string{"shop", "mesh"}[d%2]
		owner := fmt.Sprintf("Deployment/app-%d", d)
		legacy := 0
		for p := d; p < pods; p += deployments {
			pod := fmt.Sprintf("app-%d-%03d", d, p)
			series := func(impact, vendor string, rules int) {
				fmt.Fprintf(&in, "      - series: 'iptables_alerter_agent_pod_rules{job=%q,instance=\"n%d\",pod_namespace=%q,pod_name=%q,owner=%q,impact=%q,vendor=%q}'\n        values: '%dx30'\n",
					job, p%nodes, ns, pod, owner, impact, vendor, rules)
			}
			// Istio's sidecar: xt rules, and native ones that never alert.
			series("xt", "istio", 40)
			series("native", "istio", 3)
			if p%7 == 0 {
				series("xt", "linkerd", 5) // a second vendor: one more series, no more alerts
			}
			if d%3 == 0 && p%4 == 0 {
				series("legacy", "unknown", 2) // the worst impact wins
				legacy++
			}
		}
		impact, count := "xt", pods/deployments
		if legacy > 0 {
			impact, count = "legacy", legacy
		}
		fmt.Fprintf(&alerts, `          - exp_labels: {severity: warning, namespace: %s, pod_namespace: %s, owner: %s, impact: %s}
            exp_annotations:
              summary: "%s in namespace %s has iptables rules that break on RHEL 10 (%s)"
              description: "The iptables-alerter agents found rules of impact %s in the network namespaces of %d pods of %s in namespace %s (the pods: pod:iptables_alerter_breaking_rules:max{pod_namespace=\"%s\", owner=\"%s\"}). legacy: iptables-legacy (x_tables) rules, which RHEL 10 kernels cannot load; xt: iptables-nft rules with xt matches or targets, which need kernel-modules-extra on RHEL 10. The workload must move to native nftables (or a newer release of its vendor's image) before its nodes move to RHEL 10."
              runbook_url: https://github.com/iptables-alerter/iptables-alerter/blob/main/docs/runbooks.md#iptablesbreakingonrhel10
`, ns, ns, owner, impact, owner, ns, impact, impact, count, owner, ns, ns, owner)
	}
	test := fmt.Sprintf(`rule_files: [rules.yaml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
%s    promql_expr_test:
      - expr: count(pod:iptables_alerter_breaking_rules:max{impact="xt"})
        eval_time: 5m
        exp_samples: [{value: %d}]
      - expr: count(count by (pod_namespace, owner) (workload:iptables_alerter_breaking_pods:count))
        eval_time: 5m
        exp_samples: [{value: %d}]
    alert_rule_test:
      - eval_time: 5m
        alertname: IPTablesBreakingOnRHEL10
        exp_alerts:
%s`, in.String(), pods, deployments, alerts.String())
	p := filepath.Join(dir, "per_workload_test.yaml")
	if err := os.WriteFile(p, []byte(test), 0o644); err != nil {
		t.Fatal(err)
	}
	// promtool compares the alerts as a set: one more or one fewer fails.
	run(t, promtool, "test", "rules", p)
	if n := strings.Count(alerts.String(), "exp_labels:"); n != deployments {
		t.Fatalf("%d alerts expected, want %d", n, deployments)
	}
}

// TestDashboardOwners: the dashboard's table of breaking pods names each
// pod's owner as the alerts do (Pod/NAME for a pod whose labels name no
// workload, CronJob/NAME for a CronJob's run), so a row is found from the
// alert that sent the admin there. promtool, the table's query with All
// picked in each variable.
func TestDashboardOwners(t *testing.T) {
	needTool(t, promtool)
	b, err := os.ReadFile(dashboard)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	var table []string
	for _, p := range d.Panels {
		if p.Type == "table" {
			for _, q := range p.Targets {
				table = append(table, q.Expr)
			}
		}
	}
	if len(table) != 1 {
		t.Fatalf("%s: %d table queries, want 1", dashboard, len(table))
	}
	expr := strings.NewReplacer(`"$cluster"`, `".*"`, `"$namespace"`, `".*"`).Replace(table[0])
	q, _ := json.Marshal(expr)
	series := func(ns, pod, owner, impact string) string {
		return fmt.Sprintf("      - series: 'iptables_alerter_agent_pod_rules{job=%q,instance=\"n1\",pod_namespace=%q,pod_name=%q,owner=%q,impact=%q,vendor=\"unknown\"}'\n        values: '4x10'\n", job, ns, pod, owner, impact)
	}
	want := func(ns, pod, owner, impact string) string {
		return fmt.Sprintf("          - labels: '{pod_namespace=%q,pod_name=%q,owner=%q,impact=%q}'\n            value: 4\n", ns, pod, owner, impact)
	}
	exprTest(t, series("net", "debug", "", "xt")+
		series("batch", "sync-29000001-x7k2p", "Job/sync-29000001", "legacy")+
		series("shop", "web-5d8f-abcde", "Deployment/web", "xt")+
		series("shop", "web-5d8f-abcde", "Deployment/web", "native"),
		"      - expr: "+string(q)+"\n        eval_time: 5m\n        exp_samples:\n"+
			want("net", "debug", "Pod/debug", "xt")+
			want("batch", "sync-29000001-x7k2p", "CronJob/sync", "legacy")+
			want("shop", "web-5d8f-abcde", "Deployment/web", "xt"))
}

// exprTest runs promtool on one test of queries (promql_expr_test's
// entries) over input series (input_series' entries), a minute apart.
func exprTest(t *testing.T, series, exprs string) {
	t.Helper()
	test := "evaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n" + series + "    promql_expr_test:\n" + exprs
	p := filepath.Join(t.TempDir(), "expr_test.yaml")
	if err := os.WriteFile(p, []byte(test), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, promtool, "test", "rules", p)
}

// TestDashboardClusters: with All clusters picked, the same pod name in
// two clusters is two pods in every panel that counts pods, and two rows
// of the table, not one (a central Prometheus or Thanos, the cluster
// label set by each cluster's). promtool, each query with All picked.
func TestDashboardClusters(t *testing.T) {
	needTool(t, promtool)
	var in strings.Builder
	for _, c := range []string{"east", "west"} {
		fmt.Fprintf(&in, "      - series: 'iptables_alerter_agent_pod_rules{job=%q,cluster=%q,instance=\"n1\",pod_namespace=\"shop\",pod_name=\"web-0\",owner=\"StatefulSet/web\",impact=\"xt\",vendor=\"istio\"}'\n        values: '4x10'\n", job, c)
	}
	all := strings.NewReplacer(`"$cluster"`, `".*"`, `"$namespace"`, `".*"`)
	var cases strings.Builder
	n := 0
	for _, e := range loadDashboard(t) {
		if !strings.Contains(e, "iptables_alerter_agent_pod_rules") {
			continue
		}
		q, _ := json.Marshal(all.Replace(e))
		// Each query counts two pods, or sums two pods' 4 rules, or
		// (the table) has a row for each.
		var want string
		switch {
		case strings.HasPrefix(e, "count("):
			want = "          - value: 2\n"
		case strings.HasPrefix(e, "count by (impact)"):
			want = "          - labels: '{impact=\"xt\"}'\n            value: 2\n"
		case strings.HasPrefix(e, "count by (vendor)"):
			want = "          - labels: '{vendor=\"istio\"}'\n            value: 2\n"
		case strings.HasPrefix(e, "count by (pod_namespace)"):
			want = "          - labels: '{pod_namespace=\"shop\"}'\n            value: 2\n"
		case strings.HasPrefix(e, "sum by (impact)"):
			want = "          - labels: '{impact=\"xt\"}'\n            value: 8\n"
		case strings.HasPrefix(e, "label_replace("):
			for _, c := range []string{"east", "west"} {
				want += fmt.Sprintf("          - labels: '{cluster=%q,pod_namespace=\"shop\",pod_name=\"web-0\",owner=\"StatefulSet/web\",impact=\"xt\"}'\n            value: 4\n", c)
			}
		default:
			t.Fatalf("dashboard query %q: no expectation here for its shape; add one", e)
		}
		fmt.Fprintf(&cases, "      - expr: %s\n        eval_time: 5m\n        exp_samples:\n%s", q, want)
		n++
	}
	if n < 6 {
		t.Fatalf("%d dashboard queries on the per-pod series, want the 6 panels'", n)
	}
	exprTest(t, in.String(), cases.String())
}
