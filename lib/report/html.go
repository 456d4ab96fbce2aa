package report

import (
	"cmp"
	"fmt"
	"html/template"
	"io"
	"slices"
	"strings"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// The HTML format is one self-contained file for a ticket or a CI
// artifact: inline CSS, the chart an inline SVG drawn here, no script and
// nothing fetched. html/template escapes every value for where it lands
// (text, attribute); the values are the other formats' (columns, summary),
// Display-escaped first so a control or bidi character shows as text.

// Chart geometry, in SVG user units.
const (
	chartLabel = 190 // the label column
	chartBar   = 320 // the longest bar
	chartRow   = 24
	chartWidth = chartLabel + chartBar + 60
	// chartVendors bounds the vendor bars: anyone allowed to create Events
	// can name vendors, one bar each would not end.
	chartVendors = 12
	// chartName bounds a label, in bytes.
	chartName = 28
)

// levelColours are the impact bars' fills, worst reddest.
var levelColours = map[string]string{
	findings.ImpactLegacy: "#c62828",
	findings.ImpactXt:     "#ef6c00",
	findings.ImpactNative: "#2e7d32",
	"unclassified":        "#757575",
	"unknown":             "#6a1b9a",
}

const vendorColour = "#1565c0"

type htmlBar struct {
	Label, Colour  string
	Count, Y, Wide int
}

type htmlChart struct {
	ID, Title string
	Height    int
	Bars      []htmlBar
}

type htmlRow struct {
	Status string
	Cells  []string
}

type htmlPage struct {
	Origin string
	// Clusters are a fleet report's lines per cluster.
	Clusters []string
	Header   []string
	Rows     []htmlRow
	Charts   []htmlChart
	Summary  []string
}

var htmlTemplate = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>iptables-alerter report: RHEL 10 readiness</title>
<style>
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #212121; background: #fff; }
h1 { font-size: 1.4em; }
.origin { color: #424242; }
.charts { display: flex; flex-wrap: wrap; gap: 2em; margin: 1em 0; }
.chart text { font-size: 13px; fill: #212121; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border: 1px solid #bdbdbd; padding: 4px 6px; text-align: left; vertical-align: top; }
th { background: #eeeeee; }
td { overflow-wrap: anywhere; max-width: 28em; }
td:first-child { white-space: nowrap; }
tr[data-status="FAIL"] td:first-child { background: #ffcdd2; font-weight: bold; }
tr[data-status="error"] td:first-child { background: #e1bee7; }
tr[data-status="unexpected"] td:first-child { background: #ffe0b2; }
tr[data-status="expected"] td:first-child { background: #c8e6c9; }
.summary li { margin: 0.2em 0; }
</style>
</head>
<body>
<h1>iptables-alerter report: RHEL 10 readiness</h1>
{{if .Origin}}<p class="origin" id="origin">{{.Origin}}</p>
{{end}}{{if .Clusters}}<ul class="clusters" id="clusters">
{{range .Clusters}}<li>{{.}}</li>
{{end}}</ul>
{{end}}<div class="charts">
{{range .Charts}}<svg class="chart" id="{{.ID}}" xmlns="http://www.w3.org/2000/svg" role="img" width="` + fmt.Sprint(chartWidth) + `" height="{{.Height}}" viewBox="0 0 ` + fmt.Sprint(chartWidth) + ` {{.Height}}">
<title>{{.Title}}</title>
<text x="0" y="16" font-weight="bold">{{.Title}}</text>
{{range .Bars}}<g class="bar"><text x="0" y="{{.Y}}" dy="15">{{.Label}}</text><rect x="` + fmt.Sprint(chartLabel) + `" y="{{.Y}}" height="18" width="{{.Wide}}" fill="{{.Colour}}"></rect><text x="{{.CountX}}" y="{{.Y}}" dy="15">{{.Count}}</text></g>
{{end}}</svg>
{{end}}</div>
<table id="workloads">
<thead><tr>{{range .Header}}<th>{{.}}</th>{{end}}</tr></thead>
<tbody>
{{range .Rows}}<tr class="workload" data-status="{{.Status}}">{{range .Cells}}<td>{{.}}</td>{{end}}</tr>
{{end}}</tbody>
</table>
<ul class="summary">
{{range .Summary}}<li>{{.}}</li>
{{end}}</ul>
</body>
</html>
`))

// CountX places a bar's count after it.
func (b htmlBar) CountX() int { return chartLabel + b.Wide + 6 }

func writeHTML(w io.Writer, r Report) error {
	p := htmlPage{Header: tableHeader(r.Fleet())}
	if lines := r.HeaderLines(); len(lines) > 0 {
		p.Origin, p.Clusters = lines[0], lines[1:]
	}
	for _, g := range r.Groups {
		p.Rows = append(p.Rows, htmlRow{Status: status(g), Cells: columns(g, r.Fleet(), safetext.Display)})
	}
	p.Summary = strings.Split(summary(r), "\n")
	p.Charts = []htmlChart{chart("by-impact", "Workloads by worst impact", impactCounts(r.Groups), levelColour),
		chart("by-vendor", "Workloads by vendor", vendorCounts(r.Groups), func(string) string { return vendorColour })}
	if err := htmlTemplate.Execute(w, p); err != nil {
		return fmt.Errorf("write html: %w", err)
	}
	return nil
}

func levelColour(l string) string { return levelColours[l] }

type count struct {
	label string
	n     int
}

// impactCounts counts workloads by worst level, every level shown (a 0 bar
// says so), an incomplete inspection as "unknown".
func impactCounts(gs []Group) []count {
	labels := append(slices.Clone(findings.ImpactLevels), "unclassified", "unknown")
	n := map[string]int{}
	for _, g := range gs {
		switch {
		case g.State == findings.StateUnknown:
			n["unknown"]++
		case g.NoRules():
			// No rules: no level to count it under.
		case g.Worst == "":
			n["unclassified"]++
		default:
			n[g.Worst]++
		}
	}
	var out []count
	for _, l := range labels {
		out = append(out, count{l, n[l]})
	}
	return out
}

// vendorCounts counts workloads using iptables by vendor (a workload of two
// vendors under both), most first, the tail past chartVendors folded into
// one bar.
func vendorCounts(gs []Group) []count {
	n := map[string]int{}
	for _, g := range gs {
		if g.State == findings.StateUnknown {
			continue
		}
		if len(g.Vendors) == 0 {
			n[findings.VendorUnknown]++
		}
		seen := map[string]bool{}
		for _, v := range g.Vendors {
			if !seen[v.Name] {
				seen[v.Name] = true
				n[v.Name]++
			}
		}
	}
	var out []count
	for l, c := range n {
		out = append(out, count{l, c})
	}
	slices.SortFunc(out, func(a, b count) int { return cmp.Or(b.n-a.n, strings.Compare(a.label, b.label)) })
	if len(out) > chartVendors {
		rest := 0
		for _, c := range out[chartVendors-1:] {
			rest += c.n
		}
		out = append(out[:chartVendors-1], count{fmt.Sprintf("%d others", len(out)-chartVendors+1), rest})
	}
	return out
}

// chart lays out one bar per count, the longest chartBar wide.
func chart(id, title string, counts []count, colour func(string) string) htmlChart {
	most := 1
	for _, c := range counts {
		most = max(most, c.n)
	}
	ch := htmlChart{ID: id, Title: title, Height: 28 + chartRow*max(len(counts), 1)}
	for i, c := range counts {
		ch.Bars = append(ch.Bars, htmlBar{
			Label:  safetext.Display(safetext.Cut(c.label, chartName)),
			Colour: colour(c.label),
			Count:  c.n,
			Y:      28 + chartRow*i,
			Wide:   c.n * chartBar / most,
		})
	}
	return ch
}
