package packaging

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The OpenShift web console's legacy dashboards (openshift/monitoring-plugin,
// web/src/features/legacy-dashboards) read Grafana's old panel model: they
// draw only these panel types, a panel's width is its span of 12 columns,
// they load only query and interval variables (a query variable's query a
// string), and they substitute "All" as .+. The console copy of the
// dashboard, packaging/monitoring/console/console-dashboard.json, is
// generated from grafana-dashboard.json (make dashboards) in that model.
var (
	consolePanelTypes = []string{"gauge", "grafana-piechart-panel", "graph", "singlestat", "table"}
	// consoleUnits are the units the console formats; it shows others as
	// plain numbers (short).
	consoleUnits = []string{"Bytes", "bytes", "bps", "Bps", "pps", "ms", "s", "percentunit", "short"}
)

const (
	grafanaDashboard = "packaging/monitoring/grafana-dashboard.json"
	consoleDashboard = "packaging/monitoring/console/console-dashboard.json"
	// clusterVar is the Grafana copy's variable the console copy goes
	// without: OpenShift's series carry no cluster label, and the console's
	// All (.+) matches no series without one.
	clusterVar = "cluster"
)

// clusterMatcher is a selector's matcher of the cluster variable, with the
// comma joining it to the selector's other matchers.
var clusterMatcher = regexp.MustCompile(`\s*,\s*cluster=~"\$cluster"|cluster=~"\$cluster"\s*,\s*|\{\s*cluster=~"\$cluster"\s*\}`)

// nsVar is the Grafana copy's namespace variable, which the console copy
// names consoleNSVar: the console treats a variable named namespace as
// the project picker's (openshift/monitoring-plugin variable-utils.ts):
// a project picked hides it and filters every panel to that project, and
// with All Projects its own All went into the queries as the literal
// ALL_OPTION_KEY instead of .+ (the pod count read 0).
const (
	nsVar        = "namespace"
	consoleNSVar = "pod_namespace"
)

var nsRef = regexp.MustCompile(`\$` + nsVar + `\b`)

// clusterBy is the cluster label leading an aggregation's labels: the
// Grafana copy tells same-named pods of two clusters apart by it (All
// picked), the console's, of one cluster whose series have no such label,
// does not (its table would show an empty column).
var clusterBy = regexp.MustCompile(`\bby \(cluster, `)

// consoleExpr is expr as the console copy holds it: the cluster
// variable's matchers and the cluster label of its aggregations taken
// out, the namespace variable renamed.
func consoleExpr(expr string) string {
	expr = clusterBy.ReplaceAllString(clusterMatcher.ReplaceAllString(expr, ""), "by (")
	return nsRef.ReplaceAllString(expr, "$$"+consoleNSVar)
}

// dashboardMeta is what the two copies share but for their description:
// the dashboard's identity and defaults.
type dashboardMeta struct {
	Title         string          `json:"title"`
	UID           string          `json:"uid"`
	Description   string          `json:"description"`
	Tags          []string        `json:"tags"`
	Timezone      string          `json:"timezone"`
	SchemaVersion int             `json:"schemaVersion"`
	Version       int             `json:"version"`
	Editable      bool            `json:"editable"`
	GraphTooltip  int             `json:"graphTooltip"`
	Time          json.RawMessage `json:"time"`
	Refresh       string          `json:"refresh"`
	Annotations   json.RawMessage `json:"annotations"`
	Links         json.RawMessage `json:"links"`
}

// dashboard is a dashboard of either model, of its variables V and its
// panels P.
type dashboard[V, P any] struct {
	dashboardMeta
	Templating struct {
		List []V `json:"list"`
	} `json:"templating"`
	Panels []P `json:"panels"`
}

// Grafana's model, the part the dashboard uses.
type gfDashboard = dashboard[gfVariable, gfPanel]

type gfVariable struct {
	Name       string          `json:"name"`
	Label      string          `json:"label"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	IncludeAll bool            `json:"includeAll"`
	Refresh    int             `json:"refresh"`
	Sort       int             `json:"sort"`
	Hide       int             `json:"hide"`
}

type gfPanel struct {
	ID          int     `json:"id"`
	Type        string  `json:"type"`
	Title       string  `json:"title"`
	Description string  `json:"description"`
	GridPos     gridPos `json:"gridPos"`
	FieldConfig struct {
		Defaults struct {
			Unit     string   `json:"unit"`
			Decimals *int     `json:"decimals"`
			Min      *float64 `json:"min"`
			Custom   struct {
				Stacking struct {
					Mode string `json:"mode"`
				} `json:"stacking"`
			} `json:"custom"`
		} `json:"defaults"`
		Overrides []struct {
			Matcher struct {
				ID      string `json:"id"`
				Options string `json:"options"`
			} `json:"matcher"`
			Properties []struct {
				ID    string          `json:"id"`
				Value json.RawMessage `json:"value"`
			} `json:"properties"`
		} `json:"overrides"`
	} `json:"fieldConfig"`
	Options struct {
		Legend *struct {
			ShowLegend *bool `json:"showLegend"`
		} `json:"legend"`
	} `json:"options"`
	Transformations []struct {
		ID      string `json:"id"`
		Options struct {
			ExcludeByName map[string]bool   `json:"excludeByName"`
			RenameByName  map[string]string `json:"renameByName"`
		} `json:"options"`
	} `json:"transformations"`
	Targets []target `json:"targets"`
}

type gridPos struct {
	H int `json:"h"`
	W int `json:"w"`
	X int `json:"x"`
	Y int `json:"y"`
}

// target is a panel's query, in both models.
type target struct {
	RefID        string `json:"refId"`
	Expr         string `json:"expr"`
	LegendFormat string `json:"legendFormat,omitempty"`
	Format       string `json:"format,omitempty"`
	Instant      bool   `json:"instant,omitempty"`
	Range        bool   `json:"range,omitempty"`
}

// The console's model (Grafana's before version 7), as written.
type cDashboard = dashboard[cVariable, cPanel]

type cVariable struct {
	Name       string   `json:"name"`
	Label      string   `json:"label,omitempty"`
	Type       string   `json:"type"`
	Query      string   `json:"query"`
	Definition string   `json:"definition,omitempty"`
	IncludeAll bool     `json:"includeAll"`
	Options    []string `json:"options"`
	Current    struct{} `json:"current"`
	Refresh    int      `json:"refresh"`
	Sort       int      `json:"sort"`
	Hide       int      `json:"hide"`
}

type cPanel struct {
	ID          int      `json:"id"`
	Type        string   `json:"type"`
	Title       string   `json:"title"`
	Description string   `json:"description,omitempty"`
	Span        int      `json:"span"`
	GridPos     gridPos  `json:"gridPos"`
	Format      string   `json:"format,omitempty"`
	Decimals    *int     `json:"decimals,omitempty"`
	Stack       bool     `json:"stack,omitempty"`
	Legend      *cLegend `json:"legend,omitempty"`
	Yaxes       []cYaxis `json:"yaxes,omitempty"`
	Transform   string   `json:"transform,omitempty"`
	Styles      []cStyle `json:"styles,omitempty"`
	Targets     []target `json:"targets"`
}

type cLegend struct {
	Show bool `json:"show"`
}

type cYaxis struct {
	Format string   `json:"format"`
	Min    *float64 `json:"min,omitempty"`
}

// cStyle is an old table's column: pattern a label's name, or Value #refId
// for a query's value.
type cStyle struct {
	Alias    string `json:"alias,omitempty"`
	Pattern  string `json:"pattern"`
	Type     string `json:"type"`
	Unit     string `json:"unit,omitempty"`
	Decimals *int   `json:"decimals,omitempty"`
}

// toConsole writes the Grafana dashboard src in the console's model: the
// same panels, titles, descriptions and queries, but for the cluster
// variable, which it drops with its matchers, and the data source
// variable (the console queries the cluster's own Thanos). What it cannot
// translate fails the test.
func toConsole(t *testing.T, src []byte) []byte {
	t.Helper()
	var g gfDashboard
	dec := json.NewDecoder(bytes.NewReader(src))
	if err := dec.Decode(&g); err != nil {
		t.Fatalf("%s: %v", grafanaDashboard, err)
	}
	c := cDashboard{dashboardMeta: g.dashboardMeta}
	desc, _, _ := strings.Cut(g.Description, " Variables:")
	c.Description = desc + " Variables: the namespace of the pods." +
		" The OpenShift console's copy, generated from grafana-dashboard.json by make dashboards; do not edit."
	for _, v := range g.Templating.List {
		if v.Type == "datasource" || v.Name == clusterVar {
			continue
		}
		if v.Type != "query" {
			t.Fatalf("variable %q of type %q: the console loads only query and interval variables", v.Name, v.Type)
		}
		var q struct{ Query string }
		if err := json.Unmarshal(v.Query, &q); err != nil {
			if err := json.Unmarshal(v.Query, &q.Query); err != nil {
				t.Fatalf("variable %q: query %s", v.Name, v.Query)
			}
		}
		query := consoleExpr(q.Query)
		name := v.Name
		if name == nsVar {
			name = consoleNSVar
		}
		c.Templating.List = append(c.Templating.List, cVariable{
			Name: name, Label: v.Label, Type: v.Type, Query: query, Definition: query, IncludeAll: v.IncludeAll,
			Options: []string{}, Refresh: v.Refresh, Sort: v.Sort, Hide: v.Hide,
		})
	}
	for _, p := range g.Panels {
		c.Panels = append(c.Panels, consolePanel(t, p))
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(c); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// consolePanel is p in the console's model: stat a singlestat (a table of
// its values when it has several queries: a singlestat shows the first),
// timeseries a graph, table an old table whose styles name the columns
// the new one shows.
func consolePanel(t *testing.T, p gfPanel) cPanel {
	t.Helper()
	where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
	d := p.FieldConfig.Defaults
	unit := d.Unit
	if !slices.Contains(consoleUnits, unit) {
		unit = "short"
	}
	c := cPanel{ID: p.ID, Title: p.Title, Description: p.Description, Span: max(1, (p.GridPos.W+1)/2), GridPos: p.GridPos}
	for _, q := range p.Targets {
		q.Expr = consoleExpr(q.Expr)
		c.Targets = append(c.Targets, q)
	}
	switch {
	case p.Type == "stat" && len(p.Targets) == 1:
		c.Type, c.Format, c.Decimals = "singlestat", unit, d.Decimals
	case p.Type == "stat":
		c.Type, c.Transform = "table", "table"
		for _, q := range p.Targets {
			alias := q.LegendFormat
			if alias == "" {
				alias = q.RefID
			}
			c.Styles = append(c.Styles, cStyle{Alias: alias, Pattern: "Value #" + q.RefID, Type: "number", Unit: unit, Decimals: d.Decimals})
		}
	case p.Type == "timeseries":
		c.Type, c.Stack = "graph", d.Custom.Stacking.Mode != "" && d.Custom.Stacking.Mode != "none"
		c.Legend = &cLegend{Show: p.Options.Legend == nil || p.Options.Legend.ShowLegend == nil || *p.Options.Legend.ShowLegend}
		c.Yaxes = []cYaxis{{Format: unit, Min: d.Min}}
	case p.Type == "table":
		c.Type, c.Transform, c.Styles = "table", "table", tableStyles(t, where, p, unit)
	default:
		t.Fatalf("%s: type %q has no console equivalent here", where, p.Type)
	}
	return c
}

// byLabels matches a table's query: an aggregation by labels, outermost
// or inside label_replace calls (which rewrite values of its labels, as
// the owner's, and add none): its labels are the table's label columns.
var byLabels = regexp.MustCompile(`^(?:\s*label_replace\()*\s*[a-z_]+\s+by\s*\(([^)]*)\)`)

// tableStyles are the old table's columns for the new table p: a column
// per label its queries aggregate by, then one per query's value, as p's
// organize transformation and overrides name or hide them; Time hidden.
func tableStyles(t *testing.T, where string, p gfPanel, unit string) []cStyle {
	t.Helper()
	hidden, rename := map[string]bool{"Time": true}, map[string]string{}
	for _, tr := range p.Transformations {
		if tr.ID != "organize" {
			t.Fatalf("%s: transformation %q has no console equivalent here", where, tr.ID)
		}
		for k, v := range tr.Options.ExcludeByName {
			hidden[k] = hidden[k] || v
		}
		for k, v := range tr.Options.RenameByName {
			rename[k] = v
		}
	}
	for _, o := range p.FieldConfig.Overrides {
		for _, prop := range o.Properties {
			var s string
			if o.Matcher.ID != "byName" || prop.ID != "displayName" || json.Unmarshal(prop.Value, &s) != nil {
				t.Fatalf("%s: override %s=%s %s has no console equivalent here", where, o.Matcher.ID, o.Matcher.Options, prop.ID)
			}
			rename[o.Matcher.Options] = s
		}
	}
	styles := []cStyle{{Pattern: "Time", Type: "hidden"}}
	var labels []string
	for _, q := range p.Targets {
		m := byLabels.FindStringSubmatch(consoleExpr(q.Expr))
		if m == nil || q.Format != "table" || !q.Instant {
			t.Fatalf("%s: query %s is not an instant aggregation by labels in the table format", where, q.RefID)
		}
		for _, l := range strings.Split(m[1], ",") {
			if l = strings.TrimSpace(l); !slices.Contains(labels, l) {
				labels = append(labels, l)
			}
		}
	}
	for _, l := range labels {
		s := cStyle{Alias: l, Pattern: l, Type: "string"}
		if rename[l] != "" {
			s.Alias = rename[l]
		}
		if hidden[l] {
			s.Type = "hidden"
		}
		styles = append(styles, s)
	}
	for _, q := range p.Targets {
		// Grafana names a lone query's value column Value.
		name := "Value #" + q.RefID
		if len(p.Targets) == 1 {
			name = "Value"
		}
		s := cStyle{Alias: name, Pattern: "Value #" + q.RefID, Type: "number", Unit: unit, Decimals: p.FieldConfig.Defaults.Decimals}
		if rename[name] != "" {
			s.Alias = rename[name]
		}
		if hidden[name] {
			s.Type = "hidden"
		}
		styles = append(styles, s)
	}
	return styles
}

// TestConsoleDashboard: the console copy of the dashboard is
// grafana-dashboard.json in the console's model (toConsole); -update (make
// dashboards) rewrites it.
func TestConsoleDashboard(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(repo(t), grafanaDashboard))
	if err != nil {
		t.Fatal(err)
	}
	out := toConsole(t, src)
	path := filepath.Join(repo(t), consoleDashboard)
	if *update {
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	committed, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(committed, out) {
		t.Errorf("%s is not %s for the console: run make dashboards", consoleDashboard, grafanaDashboard)
	}
}

// TestConsoleDashboardPanels: the console draws every panel of its copy
// and loads its variable, as openshift/monitoring-plugin's legacy
// dashboards read them (read here as plain JSON, not through toConsole's
// types): each panel of a type it draws, with string queries, a span of
// its 12 columns and what its type reads (a table its styles: without
// them it shows "panel.styles attribute not found"); each variable a
// query or interval one, a query's query a string (the console calls
// .match on it); no query names the cluster or data source variable,
// which the console never substitutes (All is .+, matching no series
// without a cluster label). Its titles and queries are the Grafana
// copy's, less the cluster matchers.
func TestConsoleDashboardPanels(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repo(t), consoleDashboard))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Templating struct {
			List []map[string]any `json:"list"`
		} `json:"templating"`
		Panels []map[string]any `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", consoleDashboard, err)
	}
	for _, s := range []string{"$cluster", "${cluster}", "$datasource", "${datasource}"} {
		if bytes.Contains(b, []byte(s)) {
			t.Errorf("%s names %s, which the console never substitutes", consoleDashboard, s)
		}
	}
	if bytes.Contains(b, []byte("by (cluster")) {
		t.Errorf("%s aggregates by cluster, a label the console's series do not have (an empty table column)", consoleDashboard)
	}
	var queries []string // every panel's, in order
	var titles []string
	var panels func(ps []map[string]any)
	panels = func(ps []map[string]any) {
		for _, p := range ps {
			title, _ := p["title"].(string)
			where := fmt.Sprintf("panel %v %q", p["id"], title)
			typ, _ := p["type"].(string)
			if typ == "row" {
				nested, _ := json.Marshal(p["panels"])
				var inner []map[string]any
				_ = json.Unmarshal(nested, &inner)
				panels(inner)
				continue
			}
			titles = append(titles, title)
			if !slices.Contains(consolePanelTypes, typ) {
				t.Errorf("%s: type %q, which the console does not draw (%v)", where, typ, consolePanelTypes)
				continue
			}
			if span, ok := p["span"].(float64); !ok || span < 1 || span > 12 || span != float64(int(span)) {
				t.Errorf("%s: span %v, want 1 to 12 of the console's columns", where, p["span"])
			}
			targets, _ := p["targets"].([]any)
			if len(targets) == 0 {
				t.Errorf("%s: no queries", where)
			}
			refs := map[string]bool{}
			for _, q := range targets {
				q, _ := q.(map[string]any)
				expr, ok := q["expr"].(string)
				ref, _ := q["refId"].(string)
				if !ok || strings.TrimSpace(expr) == "" || ref == "" {
					t.Errorf("%s: query %v: want a string expr and a refId", where, q)
				}
				refs[ref] = true
				queries = append(queries, expr)
			}
			unit := func(v any) {
				if u, ok := v.(string); !ok || !slices.Contains(consoleUnits, u) {
					t.Errorf("%s: unit %v, not one the console formats (%v)", where, v, consoleUnits)
				}
			}
			switch typ {
			case "singlestat":
				unit(p["format"])
				if len(targets) != 1 {
					t.Errorf("%s: %d queries, and a singlestat shows the first", where, len(targets))
				}
			case "graph":
				legend, _ := p["legend"].(map[string]any)
				yaxes, _ := p["yaxes"].([]any)
				if legend["show"] != true || len(yaxes) == 0 {
					t.Errorf("%s: legend %v, yaxes %v: want the legend shown and the unit on yaxes[0]", where, p["legend"], p["yaxes"])
				} else {
					unit(yaxes[0].(map[string]any)["format"])
				}
			case "table":
				styles, _ := p["styles"].([]any)
				var values, labels int
				for _, s := range styles {
					s, _ := s.(map[string]any)
					pattern, _ := s["pattern"].(string)
					alias, _ := s["alias"].(string)
					switch {
					case s["type"] == "hidden" || alias == "":
					case pattern == "Value" && len(targets) == 1, refs[strings.TrimPrefix(pattern, "Value #")] && strings.HasPrefix(pattern, "Value #"):
						values++
					default:
						labels++
					}
				}
				if values == 0 || len(targets) > 1 && values != len(targets) {
					t.Errorf("%s: styles %v: want a shown column for each query's value", where, p["styles"])
				}
				if strings.Contains(strings.Join(queries[len(queries)-len(targets):], " "), " by ") && labels == 0 {
					t.Errorf("%s: styles %v: no label column, and the console shows only the styled ones", where, p["styles"])
				}
			}
		}
	}
	panels(d.Panels)

	// The Grafana copy's titles and queries, less the cluster matchers.
	var g gfDashboard
	src, err := os.ReadFile(filepath.Join(repo(t), grafanaDashboard))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(src, &g); err != nil {
		t.Fatal(err)
	}
	var gTitles, gQueries []string
	for _, p := range g.Panels {
		gTitles = append(gTitles, p.Title)
		for _, q := range p.Targets {
			gQueries = append(gQueries, consoleExpr(q.Expr))
		}
	}
	if !slices.Equal(titles, gTitles) {
		t.Errorf("panel titles %q, want the Grafana copy's %q", titles, gTitles)
	}
	if !slices.Equal(queries, gQueries) {
		t.Errorf("queries\n%q\nwant the Grafana copy's without cluster matchers\n%q", queries, gQueries)
	}

	// The pods' namespace variable, not named namespace (see nsVar);
	// label_values, which the console rewrites to count(...) by (...).
	var names []string
	for _, v := range d.Templating.List {
		names = append(names, fmt.Sprint(v["name"]))
		q, ok := v["query"].(string)
		if v["type"] != "query" && v["type"] != "interval" || v["type"] == "query" && (!ok || q == "") {
			t.Errorf("variable %v: type %v, query %v: want a query or interval variable, a query's a string", v["name"], v["type"], v["query"])
		}
		if v["hide"] != float64(0) {
			t.Errorf("variable %v: hide %v, and the console hides a variable whose hide is not 0", v["name"], v["hide"])
		}
		if v["name"] == consoleNSVar {
			want := `label_values(iptables_alerter_agent_pod_rules{job="iptables-alerter-metrics"}, pod_namespace)`
			if q != want || v["includeAll"] != true {
				t.Errorf("variable %s: query %q, includeAll %v: want %s with All", consoleNSVar, q, v["includeAll"], want)
			}
		}
	}
	if !slices.Equal(names, []string{consoleNSVar}) {
		t.Errorf("variables %v, want %s alone (a variable named namespace is the console's project picker's)", names, consoleNSVar)
	}
}
