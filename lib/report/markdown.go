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
	// The header, and a fleet's clusters as a list under it.
	for i, l := range r.HeaderLines() {
		if i == 1 {
			b.WriteString("\n")
		}
		if i > 0 {
			b.WriteString("- ")
		}
		b.WriteString(mdEscape(l) + "\n")
	}
	if len(r.HeaderLines()) > 0 {
		b.WriteString("\n")
	}
	head := tableHeader(r.Fleet())
	b.WriteString("| " + strings.Join(head, " | ") + " |\n")
	b.WriteString(strings.Repeat("|---", len(head)) + "|\n")
	for _, g := range r.Groups {
		b.WriteString("| " + strings.Join(columns(g, r.Fleet(), mdEscape), " | ") + " |\n")
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
