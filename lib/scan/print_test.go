package scan

import (
	"bytes"
	"strings"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// TestPrintFinding: json is the findings file's line; text says the
// counts, an incomplete look's lower bound, unknown as not clean, and
// escapes what the pod named.
func TestPrintFinding(t *testing.T) {
	rec := findings.Record{Netns: "/run/netns/a\x1b[2J", Nft: findings.Nft{Rules: 2, Chains: 1, Tables: []string{"ip filter"}}, Worst: "xt",
		Truncated: true, Error: "cut", Examples: []findings.Example{{Family: "ip", Table: "filter", Rule: "-A INPUT -j DROP", Impact: "native"}}}
	var buf bytes.Buffer
	PrintFinding(&buf, "text", rec)
	out := buf.String()
	for _, want := range []string{`/run/netns/a\x1b[2J: iptables usage: 2 nft rules, 1 chains (ip filter), 0 legacy rules (); worst xt; 0 allowlisted`,
		"  incomplete, the counts are a lower bound: cut\n", "  ip filter -A INPUT -j DROP    # impact: native\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b") {
		t.Errorf("text carries an escape: %q", out)
	}
	buf.Reset()
	PrintFinding(&buf, "text", findings.Record{Netns: "n", State: findings.StateUnknown})
	if out := buf.String(); !strings.Contains(out, "n: iptables usage unknown") || !strings.Contains(out, "unknown is not clean): none;") {
		t.Errorf("unknown: %q", out)
	}
	buf.Reset()
	PrintFinding(&buf, "json", rec)
	line, err := findings.Encode(rec)
	if err != nil || buf.String() != strings.TrimRight(string(line), "\n")+"\n" {
		t.Errorf("json: %q, want %q (%v)", buf.String(), line, err)
	}
}
