package findings

import "testing"

// TestParseSubject (issue 19 item 2): a line without a subject (every line
// before node mode) or with one this reader does not know is a pod's; a
// node's is read as such.
func TestParseSubject(t *testing.T) {
	for _, tc := range []struct {
		name, field string
		want        Subject
	}{
		{"absent", ``, SubjectPod},
		{"pod", `,"subject":"pod"`, SubjectPod},
		{"node", `,"subject":"node"`, SubjectNode},
		{"unknown", `,"subject":"cluster"`, SubjectPod},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Parse([]byte(`{"schema":"iptables-alerter/v1","fingerprint":"f"` + tc.field + `}`))
			if err != nil || r.Subject != tc.want {
				t.Errorf("Parse: subject %q, %v; want %q", r.Subject, err, tc.want)
			}
		})
	}
}
