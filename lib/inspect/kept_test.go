package inspect

import (
	"slices"
	"testing"
)

// TestKept: a keep of every rule gives the rules themselves (no copy);
// one that drops some gives a new slice in order and leaves the input as
// it was; none kept, or none given, is nil; keep is called once per rule,
// in order.
func TestKept(t *testing.T) {
	rules := []Rule{{Handle: 1}, {Handle: 2}, {Handle: 3}, {Handle: 4}}
	handles := func(rs []Rule) []uint64 {
		var h []uint64
		for _, r := range rs {
			h = append(h, r.Handle)
		}
		return h
	}
	for _, tc := range []struct {
		name string
		drop []uint64
		want []uint64
	}{
		{"all kept", nil, []uint64{1, 2, 3, 4}},
		{"first dropped", []uint64{1}, []uint64{2, 3, 4}},
		{"middle dropped", []uint64{2, 4}, []uint64{1, 3}},
		{"none kept", []uint64{1, 2, 3, 4}, nil},
	} {
		var called []uint64
		got := Kept(rules, func(r Rule) bool {
			called = append(called, r.Handle)
			return !slices.Contains(tc.drop, r.Handle)
		})
		if !slices.Equal(handles(got), tc.want) || (tc.want == nil) != (got == nil) {
			t.Errorf("%s: kept %v, want %v", tc.name, handles(got), tc.want)
		}
		if !slices.Equal(called, []uint64{1, 2, 3, 4}) {
			t.Errorf("%s: keep called for %v, want each rule once in order", tc.name, called)
		}
		if shared := len(got) > 0 && &got[0] == &rules[0]; shared != (tc.drop == nil) {
			t.Errorf("%s: shares the input's array: %v", tc.name, shared)
		}
		if !slices.Equal(handles(rules), []uint64{1, 2, 3, 4}) {
			t.Fatalf("%s: the input changed: %v", tc.name, handles(rules))
		}
	}
	if got := Kept([]Rule{}, func(Rule) bool { return true }); got != nil {
		t.Errorf("no rules: %v, want nil", got)
	}
}
