package report

import (
	"fmt"
	"github.com/iptables-alerter/iptables-alerter/lib/wording"
	"io"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// The text format is for a terminal: every line fits TextWidth columns
// (counted in runes). A row names the workload; the long values (counts,
// reasons, hint, example rules) follow on their own indented lines,
// wrapped, so nothing is cut to fit a column.
const (
	TextWidth = 120
	// textDetail bounds one detail before wrapping: a hostile Event's
	// hint must not fill the screen.
	textDetail = 1024
	// textMinCell is the narrowest a shrunk column gets.
	textMinCell = 10
	textGap     = "  "
	textIndent  = "    "
)

// textColumns are the text table's columns, in order: CLUSTER only in a
// report over several clusters. giveWay orders the columns that give way
// when a row is too wide: pods and nodes first (a cut list is repeated
// whole under the row), then the names; 0 never (short words of ours).
var textColumns = []struct {
	name    string
	giveWay int
}{{"STATUS", 0}, {"CLUSTER", 2}, {"NAMESPACE", 2}, {"OWNER", 2}, {"WORST", 0}, {"PODS", 1}, {"NODES", 1}, {"VENDOR", 2}}

// textTable is the text header of a report (fleet: over several
// clusters), and each column's giveWay.
type textTable struct {
	header  []string
	giveWay []int
}

func newTextTable(fleet bool) textTable {
	var t textTable
	for _, c := range textColumns {
		if c.name != "CLUSTER" || fleet {
			t.header = append(t.header, c.name)
			t.giveWay = append(t.giveWay, c.giveWay)
		}
	}
	return t
}

func writeText(w io.Writer, r Report) error {
	tt := newTextTable(r.Fleet())
	rows := [][]string{tt.header}
	for _, g := range r.Groups {
		rows = append(rows, tt.row(g, r.Fleet()))
	}
	widths := tt.fit(rows, TextWidth)
	var b strings.Builder
	if lines := r.HeaderLines(); len(lines) > 0 {
		// A fleet's clusters indented under the first line.
		for i, hl := range lines {
			first, rest := "", textIndent
			if i > 0 {
				first, rest = textIndent, textIndent+textIndent
			}
			for _, l := range wrap(first, rest, hl, TextWidth) {
				b.WriteString(l + "\n")
			}
		}
		b.WriteString("\n")
	}
	for i, row := range rows {
		b.WriteString(formatRow(row, widths) + "\n")
		if i > 0 {
			for _, l := range tt.details(r.Groups[i-1], row, widths) {
				b.WriteString(l + "\n")
			}
		}
	}
	b.WriteString("\n")
	for _, l := range strings.Split(summary(r), "\n") {
		for _, wl := range wrap("", textIndent, l, TextWidth) {
			b.WriteString(wl + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// row is a group's row: the Markdown table's cells in the text header's
// order, the hint and rule left for the lines below. Display escapes tabs
// and newlines, so a cell cannot add a column or a row.
func (tt textTable) row(g Group, fleet bool) []string {
	c := columns(g, fleet, func(s string) string { return safetext.Display(safetext.Cut(s, textDetail)) })
	head := tableHeader(fleet)
	row := make([]string, len(tt.header))
	for i, name := range tt.header {
		row[i] = c[slices.Index(head, name)]
	}
	return row
}

// details are the indented lines under a group's row: first the lists
// the row had to cut, whole (up to two lines), then the long values.
func (tt textTable) details(g Group, row []string, widths []int) []string {
	var out []string
	lines := func(label, text string) {
		out = append(out, wrap(textIndent+label, textIndent+strings.Repeat(" ", len(label)), text, TextWidth)...)
	}
	for _, name := range []string{"PODS", "NODES"} {
		if c := slices.Index(tt.header, name); utf8.RuneCountInString(row[c]) > widths[c] {
			label := strings.ToLower(name) + ":"
			label += strings.Repeat(" ", len("expected: ")-len(label))
			// Two lines of a long list tell enough; the JSON holds all.
			lines(label, safetext.Cut(row[c], 2*(TextWidth-len(textIndent+label))))
		}
	}
	detail := func(label, text string) { lines(label, safetext.Display(safetext.Cut(text, textDetail))) }
	if g.Impact != (findings.Impact{}) {
		s := fmt.Sprintf("%d legacy, %d xt, %d native", g.Impact.Legacy, g.Impact.Xt, g.Impact.Native)
		// Each pod counted once (Group.Impact): the sum is over pods.
		if len(g.Pods) > 1 {
			s += fmt.Sprintf(" (in %d pods)", len(g.Pods))
		}
		detail("rules:    ", s)
	}
	if g.Kernel != "" {
		detail("kernel:   ", g.Kernel)
	}
	if g.MixedBackends {
		detail("backends: ", MixedWords)
	}
	if g.State == findings.StateUnknown {
		detail("error:    ", unknownWords(g))
	}
	if g.Expected && len(g.Reasons) > 0 {
		detail("expected: ", strings.Join(g.Reasons, "; "))
	}
	if hint, doc := g.Hint(); hint != "" || doc != "" {
		detail("hint:     ", strings.TrimSpace(hint+" "+doc))
	}
	for _, ex := range g.Examples {
		// ExampleLine escapes the rule itself.
		lines("rule:     ", wording.ExampleLine(ex))
	}
	for _, w := range g.Writers {
		detail("writer:   ", w)
	}
	for _, c := range g.Commands {
		detail("command:  ", c)
	}
	return out
}

// fit gives each column the width of its widest cell, then takes from
// the widest column that gives way first, one rune at a time, until a row
// fits width (or every such column is down to textMinCell).
func (tt textTable) fit(rows [][]string, width int) []int {
	widths := make([]int, len(tt.header))
	for _, row := range rows {
		for i, c := range row {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	total := func() int {
		n := len(textGap) * (len(widths) - 1)
		for _, w := range widths {
			n += w
		}
		return n
	}
	for rank := 1; rank <= 2; rank++ {
		for total() > width {
			widest := -1
			for i, w := range widths {
				if tt.giveWay[i] == rank && w > textMinCell && (widest < 0 || w > widths[widest]) {
					widest = i
				}
			}
			if widest < 0 {
				break
			}
			widths[widest]--
		}
	}
	return widths
}

// formatRow pads each cell to its width, cutting it with safetext.Ellipsis
// when longer; the last cell is not padded.
func formatRow(row []string, widths []int) string {
	var b strings.Builder
	for i, c := range row {
		if i > 0 {
			b.WriteString(textGap)
		}
		c = cutRunes(c, widths[i])
		b.WriteString(c)
		if i < len(row)-1 {
			b.WriteString(strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c)))
		}
	}
	return b.String()
}

// cutRunes cuts s to at most n runes, ending in safetext.Ellipsis when cut.
func cutRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	keep := max(n-len(safetext.Ellipsis), 0)
	return string(r[:keep]) + safetext.Ellipsis[:min(n, len(safetext.Ellipsis))]
}

// wrap breaks text at spaces into lines of at most width runes, the first
// starting with first, the others with rest; a word longer than a line is
// split.
func wrap(first, rest, text string, width int) []string {
	var lines []string
	line, prefix := first, first
	room := func() int { return width - utf8.RuneCountInString(line) }
	for _, word := range strings.Fields(text) {
		sep := " "
		if line == prefix {
			sep = ""
		}
		if utf8.RuneCountInString(sep+word) <= room() {
			line += sep + word
			continue
		}
		if line != prefix {
			lines = append(lines, line)
			line, prefix = rest, rest
		}
		for r := []rune(word); len(r) > 0; {
			n := min(len(r), max(room(), 1))
			line += string(r[:n])
			r = r[n:]
			if len(r) > 0 {
				lines = append(lines, line)
				line, prefix = rest, rest
			}
		}
	}
	if line != prefix || len(lines) == 0 {
		lines = append(lines, strings.TrimRight(line, " "))
	}
	return lines
}
