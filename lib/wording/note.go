package wording

import (
	"fmt"
	"strings"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
)

// NoteLimit is the API server's limit on an Event's note, in bytes
// (NoteLengthLimit in k8s.io/kubernetes/pkg/apis/core/validation).
const NoteLimit = 1024

// deprecation opens every note so that people and searches recognise it the
// way they recognise OpenShift's alerter.
const deprecation = "This pod created iptables rules in its network namespace. " +
	"iptables is deprecated in RHEL 9 and removed in RHEL 10: move these rules to nftables or eBPF."

// execDeprecation replaces deprecation and the counts for a command's own
// record (a failed write, a read): it holds no rules.
const execDeprecation = "This pod runs iptables commands in its network namespace (no rule of this one is counted here). " +
	"iptables is deprecated in RHEL 9 and removed in RHEL 10: move them to nftables or eBPF."

const examplesHeading = "Example iptables rules seen in this pod:"

// unknownHead opens the note of an unknown record: what happened and what
// it means, in plain words.
const unknownHead = "The check of this pod's network namespace for iptables rules could not finish, so whether the pod uses iptables is unknown. " +
	"Unknown is not clean: a pod can hide rules this way, for example by keeping the kernel's x_tables lock busy."

// cutHead opens the note of a present record whose look stopped early
// without seeing legacy rules: the level it saw is a lower bound, so it
// gives no verdict (Note), only what was seen (cutSeen).
const cutHead = "RHEL 10 impact not known: the check of this pod's rules stopped early and saw only "

// cutSeen says what such a look saw, by its worst level.
var cutSeen = map[string]string{
	findings.ImpactXt:     "iptables-nft rules, some with xt matches or targets (these break unless kernel-modules-extra is installed)",
	findings.ImpactNative: "native nftables rules",
}

// maxWhy bounds the record's error in a usage note, so the counts and
// some examples still fit.
const maxWhy = 300

// unknownTail says what to do about it.
const unknownTail = "It is checked again with the next scan of the pod; to look now, run `iptables-alerter scan` on the node."

// plainWhy puts an inspection error in plain words, by the text of the
// error class it wraps (lib/inspect's; the forwarder does not link the
// inspection, and a test keeps the two in step). The first match wins.
var plainWhy = []struct{ class, words string }{
	{"legacy x_tables busy", "the kernel's x_tables lock, which every pod on the node shares, stayed busy, so the legacy iptables tables could not be read"},
	{"inspection deadline reached", "the check ran out of time"},
	{"too many chains", "the namespace holds more chains than the check reads"},
	{"the ruleset changed while it was read", "the pod's rules changed while they were read, at every look"},
	{"nftables dump incomplete", "the kernel could not list every rule, or the check could not count them all (a rule too big to list, too many verdict maps)"},
}

// maxVendorLine bounds one vendor's line, so two vendors' hints and some
// examples still fit.
const maxVendorLine = 300

// Note renders the Event note for a record: the RHEL 10 impact in plain
// words, the owning workload (zero Owner: not known), the recognised
// vendors with their hints, the deprecation, the counts and as many example
// rules as fit in NoteLimit bytes.
//
// A look that stopped early (Truncated) below legacy is no verdict: rules
// it did not see may break (the x_tables lock kept busy hides the legacy
// ones). Its note says so and why instead.
func Note(rec findings.Record, o owner.Owner) string {
	var b strings.Builder
	if level := rec.WorstLevel(); rec.Truncated && level != findings.ImpactLegacy {
		seen, ok := cutSeen[level]
		if !ok {
			seen = "rules of no known RHEL 10 impact"
		}
		b.WriteString(cutHead + seen + "; rules it did not see may break. " + whySentence(rec, maxWhy))
	} else {
		b.WriteString(findings.ImpactWords(level) + ".")
	}
	if o.Kind != "" {
		b.WriteString(" Owner: " + safetext.Display(o.Kind) + " " + safetext.Display(rec.Pod.Namespace) + "/" + safetext.Display(o.Name) + ".")
	}
	b.WriteString("\n")
	for _, v := range rec.Vendors {
		l := "Recognised " + safetext.Display(v.Name)
		if v.Hint != "" {
			l += ": " + safetext.Display(v.Hint)
		}
		if v.Doc != "" {
			l += " (" + safetext.Display(v.Doc) + ")"
		}
		b.WriteString(safetext.Cut(l, maxVendorLine) + "\n")
	}
	b.WriteString(writerSentence(rec.Writer, "\n"))
	if l := ExecLine(rec.Exec); l != "" {
		b.WriteString("Command: " + l + "\n")
	}
	if rec.Exec != nil && !rec.HasUsage() {
		b.WriteString(execDeprecation)
		return safetext.Cut(b.String(), NoteLimit)
	}
	b.WriteString(deprecation)
	b.WriteString("\n")
	b.WriteString(counts(rec))

	if len(rec.Examples) == 0 {
		return safetext.Cut(b.String(), NoteLimit)
	}
	b.WriteString("\n")
	b.WriteString(examplesHeading)
	head := b.String()
	if len(head) >= NoteLimit {
		return safetext.Cut(head, NoteLimit)
	}
	// Cut only matters when the heading leaves no room for the count line.
	return safetext.Cut(head+exampleLines(rec.Examples, NoteLimit-len(head)), NoteLimit)
}

// UnknownNote renders the note of a record whose state is unknown: that
// the inspection could not finish, why (the record's error, escaped), the
// owning workload (zero Owner: not known), the container and what to do.
func UnknownNote(rec findings.Record, o owner.Owner) string {
	var b strings.Builder
	b.WriteString(unknownHead + "\n")
	b.WriteString(whySentence(rec, NoteLimit))
	if o.Kind != "" {
		b.WriteString(" Owner: " + safetext.Display(o.Kind) + " " + safetext.Display(rec.Pod.Namespace) + "/" + safetext.Display(o.Name) + ".")
	}
	if rec.Container != "" {
		b.WriteString(" Container: " + safetext.Display(rec.Container) + ".")
	}
	b.WriteString(writerSentence(rec.Writer, ""))
	b.WriteString("\n" + unknownTail)
	return safetext.Cut(b.String(), NoteLimit)
}

// unquoted is an inspection error without its quoted parts (lib/inspect
// quotes every name with %q): a pod names its chains and tables, and a
// chain named "legacy x_tables busy" must not choose the plain words (it
// put the blame for its own oversized rule on the node's shared lock).
// A quote left open (the error cut) hides the rest.
func unquoted(s string) string {
	var b strings.Builder
	in, esc := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case !in && c == '"':
			in = true
		case !in:
			b.WriteByte(c)
		case esc:
			esc = false
		case c == '\\':
			esc = true
		case c == '"':
			in = false
		}
	}
	return b.String()
}

// whySentence says why a look could not see everything, in plain words
// (plainWhy), then the record's error escaped and cut to limit bytes.
func whySentence(rec findings.Record, limit int) string {
	why := ""
	own := unquoted(rec.Error)
	for _, p := range plainWhy {
		if strings.Contains(own, p.class) {
			why = p.words
			break
		}
	}
	switch {
	case why == "" && rec.Error == "":
		// Truncated alone: Encode or the inspection hit a size bound.
		why = "a size bound was reached"
	case why == "":
		why = "the check failed"
	}
	if rec.Error != "" {
		why += " (" + safetext.Cut(safetext.Display(rec.Error), limit) + ")"
	}
	return "Why: " + why + "."
}

// writerSentence names the process whose change the agent's watch
// looked after, one bounded sentence (WriterLine), then end; "" for none.
func writerSentence(w *findings.Writer, end string) string {
	if w == nil {
		return ""
	}
	s := "Last change by " + WriterLine(w) + "."
	if end == "" {
		return " " + s
	}
	return s + end
}

// exampleLines are the example rules, breaking ones first, each on its own
// line after a newline, in at most room bytes. A rule is shown whole or not
// at all (a cut rule reads as a different rule); the rules left out are
// counted on a last line.
func exampleLines(exs []findings.Example, room int) string {
	ordered := findings.BreakingFirst(exs)
	all := ""
	for _, ex := range ordered {
		all += "\n" + ExampleLine(ex)
	}
	if len(all) <= room {
		return all
	}
	// Some are left out: keep room for the longest count line there can be.
	room -= len(leftOut(len(ordered)))
	var b strings.Builder
	left := 0
	for _, ex := range ordered {
		l := "\n" + ExampleLine(ex)
		if b.Len()+len(l) > room {
			left++
			continue
		}
		b.WriteString(l)
	}
	if left > 0 {
		b.WriteString(leftOut(left))
	}
	return b.String()
}

// Count is n and noun, the noun in the plural (an s added) unless n is 1:
// "1 rule", "3 rules".
func Count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func leftOut(n int) string {
	return fmt.Sprintf("\n(%s left out: an Event note holds %d bytes)", Count(n, "more example rule"), NoteLimit)
}

// counts states what the hook found; the record's numbers are its own, so
// only the table names (strings) need escaping.
func counts(rec findings.Record) string {
	var parts []string
	if rec.Nft.Used() {
		parts = append(parts, fmt.Sprintf("iptables-nft: %s, %s%s", Count(rec.Nft.Rules, "rule"), Count(rec.Nft.Chains, "chain"), tableList(rec.Nft.Tables)))
	}
	if rec.Legacy.Used() {
		parts = append(parts, fmt.Sprintf("iptables-legacy: %s%s", Count(rec.Legacy.Rules, "rule"), tableList(rec.Legacy.Tables)))
	}
	if len(parts) == 0 {
		parts = append(parts, "no rule counts reported")
	}
	s := "Found " + strings.Join(parts, "; ")
	var who []string
	if rec.Container != "" {
		who = append(who, "container "+safetext.Display(rec.Container))
	}
	if rec.Image != "" {
		who = append(who, "image "+safetext.Display(rec.Image))
	}
	if len(who) > 0 {
		s += " (" + strings.Join(who, ", ") + ")"
	}
	s += "."
	if rec.Truncated {
		s += " The check stopped early: the counts are a lower bound."
	}
	if rec.Allowlisted > 0 {
		s += fmt.Sprintf(" %s not counted.", Count(rec.Allowlisted, "allowlisted rule"))
	}
	return s
}

func tableList(tables []string) string {
	if len(tables) == 0 {
		return ""
	}
	esc := make([]string, len(tables))
	for i, t := range tables {
		esc[i] = safetext.Display(t)
	}
	return " in " + strings.Join(esc, ", ")
}

// ExampleLine shows an example rule escaped for a person, after its family,
// table and level: "[ip nat, xt] -A OUTPUT ...".
func ExampleLine(ex findings.Example) string {
	where := strings.TrimSpace(safetext.Display(ex.Family) + " " + safetext.Display(ex.Table))
	// The rule's RHEL 10 level, when the hook classified it (Encode keeps
	// only the three level names).
	if findings.ImpactRank(ex.Impact) < len(findings.ImpactLevels) {
		where = strings.TrimSpace(where + ", " + ex.Impact)
	}
	if where == "" {
		return safetext.Display(ex.Rule)
	}
	return "[" + where + "] " + safetext.Display(ex.Rule)
}
