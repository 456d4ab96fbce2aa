package scan

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// PrintFinding writes rec as the findings file's JSON line (format
// "json"), or as a few lines of text for a person (the scan command's
// output).
func PrintFinding(w io.Writer, format string, rec findings.Record) {
	if format == "json" {
		line, err := findings.Encode(rec)
		if err != nil {
			line, _ = json.Marshal(rec)
		}
		fmt.Fprintf(w, "%s\n", strings.TrimRight(string(line), "\n"))
		return
	}
	netns := safetext.Display(rec.Netns)
	if rec.KnownState() == findings.StateUnknown {
		// No usage seen of a look that did not finish: zero counts would
		// read as clean, which is not known.
		fmt.Fprintf(w, "%s: iptables usage unknown: the inspection could not finish, so whether it uses iptables is not known (unknown is not clean): %s; %d allowlisted\n",
			netns, safetext.Display(orNone(rec.Error)), rec.Allowlisted)
		return
	}
	fmt.Fprintf(w, "%s: iptables usage: %d nft rules, %d chains (%s), %d legacy rules (%s); worst %s; %d allowlisted\n",
		netns, rec.Nft.Rules, rec.Nft.Chains, displayList(rec.Nft.Tables),
		rec.Legacy.Rules, displayList(rec.Legacy.Tables), orNone(rec.Worst), rec.Allowlisted)
	if rec.Truncated {
		fmt.Fprintf(w, "  incomplete, the counts are a lower bound: %s\n", safetext.Display(orNone(rec.Error)))
	}
	// What breaks on RHEL 10 first: that is what to act on.
	for _, ex := range findings.BreakingFirst(rec.Examples) {
		fmt.Fprintf(w, "  %s %s %s    # impact: %s\n", safetext.Display(ex.Family), safetext.Display(ex.Table),
			safetext.Display(safetext.Cut(ex.Rule, 512)), orNone(ex.Impact))
	}
}

// displayList joins names escaped for a terminal.
func displayList(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = safetext.Display(n)
	}
	return strings.Join(out, ", ")
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
