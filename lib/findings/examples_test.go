package findings

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func ex(level, rule string) Example {
	return Example{Family: "ip", Table: "nat", Chain: "C", Rule: rule, Impact: level}
}

// TestPickExamples: every level present gets an example, worst first, even
// when the other level's rules are more telling or come first.
func TestPickExamples(t *testing.T) {
	nat := func(i int) string {
		return "-A C -p tcp --dport " + strings.Repeat("1", i) + " -j DNAT --to-destination 10.0.0.1"
	}
	tests := []struct {
		name string
		all  []Example
		want []Example
	}{
		{name: "none", all: nil, want: nil},
		{
			name: "one xt behind many native jumps",
			all: []Example{
				ex(ImpactNative, "-A C -j A1"), ex(ImpactNative, "-A C -j A2"), ex(ImpactNative, "-A C -j A3"),
				ex(ImpactNative, "-A C -j A4"), ex(ImpactNative, "-A C -j A5"), ex(ImpactNative, "-A C -j A6"),
				ex(ImpactXt, "-A C -m owner --uid-owner 1 -j RETURN"),
			},
			want: []Example{
				ex(ImpactXt, "-A C -m owner --uid-owner 1 -j RETURN"),
				ex(ImpactNative, "-A C -j A1"), ex(ImpactNative, "-A C -j A2"), ex(ImpactNative, "-A C -j A3"),
				ex(ImpactNative, "-A C -j A4"),
			},
		},
		{
			name: "one native behind many xt",
			all: []Example{
				ex(ImpactXt, nat(1)), ex(ImpactXt, nat(2)), ex(ImpactXt, nat(3)), ex(ImpactXt, nat(4)),
				ex(ImpactXt, nat(5)), ex(ImpactXt, nat(6)), ex(ImpactNative, "-A C -j ACCEPT"),
			},
			// The native one second: encoding drops examples from the end.
			want: []Example{
				ex(ImpactXt, nat(1)), ex(ImpactNative, "-A C -j ACCEPT"),
				ex(ImpactXt, nat(2)), ex(ImpactXt, nat(3)), ex(ImpactXt, nat(4)),
			},
		},
		{
			name: "within a level, jumps then NAT then the rest",
			all: []Example{
				ex(ImpactNative, "-A C -j ACCEPT"), ex(ImpactXt, nat(1)), ex(ImpactNative, "-A C -j A1"),
			},
			want: []Example{
				ex(ImpactXt, nat(1)), ex(ImpactNative, "-A C -j A1"), ex(ImpactNative, "-A C -j ACCEPT"),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d := cmp.Diff(tt.want, PickExamples(tt.all)); d != "" {
				t.Errorf("PickExamples (-want +got):\n%s", d)
			}
		})
	}
}

// TestExamplesLeftOut: the per-level count of rules not shown follows the
// examples the line really holds, after the size bound dropped some.
func TestExamplesLeftOut(t *testing.T) {
	rec := Record{
		Pod:         Pod{Namespace: "ns", Name: "p"},
		Fingerprint: "0123456789abcdef0123456789abcdef",
		Nft:         Nft{Rules: 30},
		Legacy:      Legacy{Rules: 2},
		Impact:      Impact{Legacy: 2, Xt: 10, Native: 20},
		Examples: []Example{
			ex(ImpactXt, "-A C -j X"), ex(ImpactNative, "-A C -j N"), ex(ImpactNative, "-A C -j M"),
		},
	}
	if got, want := rec.LeftOut(), (Impact{Legacy: 2, Xt: 9, Native: 18}); got != want {
		t.Errorf("LeftOut = %+v, want %+v", got, want)
	}
	// Rules of 512 bytes, six in JSON each: the line holds only some.
	long := "-A C -m comment --comment " + strings.Repeat("<", 600)
	rec.Examples = []Example{ex(ImpactXt, long), ex(ImpactNative, long), ex(ImpactNative, long), ex(ImpactNative, long), ex(ImpactNative, long)}
	back, _ := roundTrip(t, rec)
	if len(back.Examples) == len(rec.Examples) {
		t.Fatalf("all %d examples fit: the test does not test", len(back.Examples))
	}
	if back.ExamplesLeftOut != back.LeftOut() {
		t.Errorf("examples_left_out %+v, the line's %d examples leave out %+v", back.ExamplesLeftOut, len(back.Examples), back.LeftOut())
	}
	if len(back.Examples) == 0 || back.Examples[0].Impact != ImpactXt {
		t.Errorf("the xt example was dropped: %+v", back.Examples)
	}
}

// roundTrip encodes a record and parses its line back.
func roundTrip(t *testing.T, rec Record) (Record, []byte) {
	t.Helper()
	line, err := Encode(rec)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(line[:len(line)-1])
	if err != nil {
		t.Fatal(err)
	}
	return back, line
}

// TestLegacyExamplesOnTheLine: a legacy example is written under legacy, so
// the top-level list holds only rules an nftables save tool lists, and read
// back into one list, worst first.
func TestLegacyExamplesOnTheLine(t *testing.T) {
	leg := Example{Family: "ip", Table: "filter", Chain: "OUTPUT", Rule: "-A OUTPUT -d 169.254.169.254/32 -j DROP", Impact: ImpactLegacy}
	xt := Example{Family: "ip", Table: "nat", Chain: "POSTROUTING", Rule: "-A POSTROUTING -j MASQUERADE", Impact: ImpactXt}
	rec := Record{Fingerprint: "f", Legacy: Legacy{Tables: []string{"ip filter"}, Rules: 1}, Nft: Nft{Tables: []string{"ip nat"}, Rules: 1},
		Impact: Impact{Legacy: 1, Xt: 1}, Worst: ImpactLegacy, Examples: []Example{leg, xt}}
	line, err := Encode(rec)
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Examples []Example `json:"examples"`
		Legacy   struct {
			Examples []Example `json:"examples"`
		} `json:"legacy"`
	}
	if err := json.Unmarshal(line, &raw); err != nil {
		t.Fatal(err)
	}
	if len(raw.Examples) != 1 || raw.Examples[0] != xt || len(raw.Legacy.Examples) != 1 || raw.Legacy.Examples[0] != leg {
		t.Fatalf("on the line: examples %+v, legacy.examples %+v", raw.Examples, raw.Legacy.Examples)
	}
	back, err := Parse(line[:len(line)-1])
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Examples) != 2 || back.Examples[0] != leg || back.Examples[1] != xt || back.Legacy.Examples != nil {
		t.Fatalf("read back: %+v / %+v", back.Examples, back.Legacy.Examples)
	}
	if lo := back.LeftOut(); lo != (Impact{}) {
		t.Errorf("left out %+v, want none", lo)
	}
	// Encoding what Parse gave writes the same line.
	again, err := Encode(back)
	if err != nil || string(again) != string(line) {
		t.Errorf("re-encoded differs: %v\n%s\n%s", err, line, again)
	}
	// Without legacy examples the list is present and empty.
	plain, _ := Encode(Record{Fingerprint: "f"})
	if !bytes.Contains(plain, []byte(`"legacy":{"tables":[],"rules":0,"examples":[]}`)) {
		t.Errorf("no legacy examples: %s", plain)
	}
}
