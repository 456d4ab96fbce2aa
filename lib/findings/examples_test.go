package findings

import (
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
