package report

import (
	"io"
	"strings"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
)

// mdEscape keeps a cell one cell of plain text: no pipes, no HTML, no code
// spans or emphasis from the pod's strings.
func mdEscape(s string) string {
	s = safetext.Display(s)
	var b strings.Builder
	for _, c := range s {
		switch c {
		case '|', '\\', '`', '*', '_', '[', ']', '<', '>', '#', '~':
			b.WriteByte('\\')
		case '&':
			b.WriteString("&amp;")
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

func writeMarkdown(w io.Writer, r Report) error {
	var b strings.Builder
	if !r.Origin.Time.IsZero() {
		b.WriteString(mdEscape(r.Origin.Line()) + "\n\n")
	}
	b.WriteString("| " + strings.Join(header, " | ") + " |\n")
	b.WriteString(strings.Repeat("|---", len(header)) + "|\n")
	for _, g := range r.Groups {
		b.WriteString("| " + strings.Join(columns(g, mdEscape), " | ") + " |\n")
	}
	for i, l := range strings.Split(summary(r), "\n") {
		if i == 0 {
			b.WriteString("\n" + mdEscape(l) + "\n\n")
			continue
		}
		b.WriteString("- " + mdEscape(l) + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
