package scan

import (
	"fmt"
	"strings"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// TestExamplesEveryLevel: one xt rule behind more native rules than are
// rendered as candidates is still an example, and the first; the record
// counts per level the rules it does not show.
func TestExamplesEveryLevel(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft-restore")
	ns := nstest.New(t)
	const native = 2 * maxExampleCandidates
	var b strings.Builder
	b.WriteString("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n")
	for i := range native {
		fmt.Fprintf(&b, "-A OUTPUT -d 10.0.%d.%d/32 -j ACCEPT\n", i/250, i%250+1)
	}
	b.WriteString("-A OUTPUT -m owner --uid-owner 1000 -j DROP\nCOMMIT\n")
	ns.Restore(b.String(), "iptables-nft-restore")

	rec := Build(Meta{}, readNS(t, ns))
	if rec.Impact != (findings.Impact{Xt: 1, Native: native}) {
		t.Fatalf("impact %+v, want 1 xt and %d native: the test does not test", rec.Impact, native)
	}
	if len(rec.Examples) != findings.MaxExamples {
		t.Fatalf("%d examples, want %d", len(rec.Examples), findings.MaxExamples)
	}
	if ex := rec.Examples[0]; ex.Impact != findings.ImpactXt || !strings.Contains(ex.Rule, "--uid-owner 1000") {
		t.Errorf("first example %+v, want the xt rule", ex)
	}
	want := findings.Impact{Native: native - (findings.MaxExamples - 1)}
	if rec.ExamplesLeftOut != want {
		t.Errorf("examples_left_out %+v, want %+v", rec.ExamplesLeftOut, want)
	}
	line, err := findings.Encode(rec)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(line), fmt.Sprintf(`"examples_left_out":{"legacy":0,"xt":0,"native":%d}`, want.Native)) {
		t.Errorf("line lacks examples_left_out: %s", line)
	}
}
