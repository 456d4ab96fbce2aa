package events

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// NoteLimit is the API server's limit on an Event's note, in bytes
// (NoteLengthLimit in k8s.io/kubernetes/pkg/apis/core/validation).
const NoteLimit = 1024

// deprecation opens every note so that people and searches recognise it the
// way they recognise OpenShift's alerter.
const deprecation = "This pod created iptables rules in its network namespace. " +
	"iptables is deprecated in RHEL 9 and removed in RHEL 10: move these rules to nftables or eBPF."

const examplesHeading = "Example iptables rules seen in this pod:"

// minExample is the shortest cut rule worth showing.
const minExample = 24

// ellipsis marks a cut; ASCII so that it never needs more room than counted.
const ellipsis = "..."

// Note renders the Event note for a record: the deprecation, the counts and
// as many example rules as fit in NoteLimit bytes.
func Note(rec findings.Record) string {
	var b strings.Builder
	b.WriteString(deprecation)
	b.WriteString("\n")
	b.WriteString(counts(rec))

	var lines []string
	for _, ex := range rec.Examples {
		lines = append(lines, exampleLine(ex))
	}
	if len(lines) == 0 {
		return capBytes(b.String(), NoteLimit)
	}
	b.WriteString("\n")
	b.WriteString(examplesHeading)
	head := b.String()
	if len(head) >= NoteLimit {
		return capBytes(head, NoteLimit)
	}

	// Whole lines first, so the admin sees complete rules; the first line
	// that does not fit is cut and the rest are counted.
	out := head
	for i, l := range lines {
		rest := len(lines) - i - 1
		tail := ""
		if rest > 0 {
			tail = fmt.Sprintf("\n(%d more)", rest)
		}
		if len(out)+1+len(l)+len(tail) <= NoteLimit {
			out += "\n" + l
			continue
		}
		// The tail was reserved when the previous line went in, so
		// "(rest+1 more)" always fits where a cut rule would be useless.
		if room := NoteLimit - len(out) - 1 - len(tail); room >= minExample {
			out += "\n" + capBytes(l, room) + tail
		} else {
			out += fmt.Sprintf("\n(%d more)", rest+1)
		}
		break
	}
	return capBytes(out, NoteLimit)
}

// counts states what the hook found; the record's numbers are its own, so
// only the table names (strings) need escaping.
func counts(rec findings.Record) string {
	var parts []string
	if rec.Nft.Used() {
		parts = append(parts, fmt.Sprintf("iptables-nft: %d rules, %d chains%s", rec.Nft.Rules, rec.Nft.Chains, tableList(rec.Nft.Tables)))
	}
	if rec.Legacy.Used() {
		parts = append(parts, fmt.Sprintf("iptables-legacy: %d rules%s", rec.Legacy.Rules, tableList(rec.Legacy.Tables)))
	}
	if len(parts) == 0 {
		parts = append(parts, "no rule counts reported")
	}
	s := "Found " + strings.Join(parts, "; ")
	var who []string
	if rec.Container != "" {
		who = append(who, "container "+Escape(rec.Container))
	}
	if rec.Image != "" {
		who = append(who, "image "+Escape(rec.Image))
	}
	if len(who) > 0 {
		s += " (" + strings.Join(who, ", ") + ")"
	}
	s += "."
	if rec.Truncated {
		s += " The check stopped early: the counts are a lower bound."
	}
	if rec.Allowlisted > 0 {
		s += fmt.Sprintf(" %d allowlisted rules not counted.", rec.Allowlisted)
	}
	return s
}

func tableList(tables []string) string {
	if len(tables) == 0 {
		return ""
	}
	esc := make([]string, len(tables))
	for i, t := range tables {
		esc[i] = Escape(t)
	}
	return " in " + strings.Join(esc, ", ")
}

func exampleLine(ex findings.Example) string {
	where := strings.TrimSpace(Escape(ex.Family) + " " + Escape(ex.Table))
	if where == "" {
		return Escape(ex.Rule)
	}
	return "[" + where + "] " + Escape(ex.Rule)
}

// Escape makes text from the record safe to show: invalid UTF-8 bytes,
// control characters, bidi controls and line separators are written as Go
// escapes, so a rule cannot forge lines or reorder what the admin reads.
func Escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x80 && (r < 0x20 || r == 0x7f):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.IsControl(r), unicode.Is(unicode.Bidi_Control, r),
			unicode.In(r, unicode.Zl, unicode.Zp), r == '\ufeff':
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// capBytes cuts s to at most limit bytes on a rune boundary, marking the cut.
func capBytes(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	if limit <= len(ellipsis) {
		return ellipsis[:max(limit, 0)]
	}
	cut := limit - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}
