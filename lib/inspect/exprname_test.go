package inspect

import (
	"strings"
	"testing"
)

// TestExprName: the interning table maps each name to itself, a known name
// costs no allocation, and an unknown one is kept, bounded.
func TestExprName(t *testing.T) {
	for k, v := range knownExprs {
		if k != v {
			t.Errorf("knownExprs[%q] = %q, want the name itself", k, v)
		}
	}
	b := []byte("counter")
	if n := testing.AllocsPerRun(100, func() { _ = exprName(b) }); n != 0 {
		t.Errorf("exprName(%q) allocates %v times", b, n)
	}
	for _, tc := range []struct{ name, in, want string }{
		{"known", "payload", "payload"},
		{"unknown", "newexpr", "newexpr"},
		{"long", strings.Repeat("x", 40), strings.Repeat("x", 32)},
	} {
		if got := exprName([]byte(tc.in)); got != tc.want {
			t.Errorf("%s: exprName(%q) = %q, want %q", tc.name, tc.in, got, tc.want)
		}
	}
}
