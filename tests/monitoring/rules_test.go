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
				Name, Type, Query string
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
	if len(d.Templating.List) == 0 || d.Templating.List[0].Name != "datasource" || d.Templating.List[0].Type != "datasource" || d.Templating.List[0].Query != "prometheus" {
		t.Errorf("dashboard: the first variable is %+v, want the Prometheus data source \"datasource\"", d.Templating.List)
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
			exprs = append(exprs, q.Expr)
		}
	}
	return exprs
}

// metricName matches the project's metric names in a query.
var metricName = regexp.MustCompile(`\biptables_alerter_[a-z_]+`)

// TestDashboard: the dashboard's structure, and every query parses
// (promtool check rules, each as a recording rule) and names only metrics
// the agent or forwarder serve. TestAlertEndToEnd runs each against a
// real Prometheus scraping a real agent.
func TestDashboard(t *testing.T) {
	needTool(t, promtool)
	exprs := loadDashboard(t)
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
