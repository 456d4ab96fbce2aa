package kubetest

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSplitYAML(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want []string
	}{
		{name: "one", in: "a: 1\n", want: []string{"\na: 1\n"}},
		{name: "comment header and two", in: "# head\n---\na: 1\n---\nb: 2\n", want: []string{"\na: 1", "\nb: 2\n"}},
		{name: "empty documents dropped", in: "---\n---\n# only a comment\n---\nc: 3", want: []string{"\nc: 3"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, d := range splitYAML([]byte(tc.in)) {
				got = append(got, string(d))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("splitYAML (-want +got):\n%s", diff)
			}
		})
	}
}
