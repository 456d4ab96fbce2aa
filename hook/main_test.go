package main

import (
	"io"
	"strings"
	"testing"
)

// TestDispatch: the command table alone decides what runs and what the
// usage lists; hidden commands run but are not listed.
func TestDispatch(t *testing.T) {
	var ran []string
	cmd := func(name string, hidden bool) command {
		return command{name: name, summary: "does " + name, hidden: hidden, run: func(args []string, _ io.Reader, _ io.Writer) int {
			ran = append(ran, name+":"+strings.Join(args, ","))
			return 3
		}}
	}
	cmds := []command{cmd("alpha", false), cmd("probe", true)}
	tests := []struct {
		name   string
		args   []string
		code   int
		ran    string
		stdout string
		stderr string
	}{
		{name: "runs with its args", args: []string{"alpha", "-x", "y"}, code: 3, ran: "alpha:-x,y"},
		{name: "hidden runs too", args: []string{"probe"}, code: 3, ran: "probe:"},
		{name: "help lists visible only", args: []string{"--help"}, code: 0, stdout: "does alpha"},
		{name: "unknown", args: []string{"nope"}, code: 2, stderr: `unknown command "nope"`},
		{name: "none", args: nil, code: 2, stderr: "Usage:"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ran = nil
			var out, errb strings.Builder
			code := dispatch(cmds, tc.args, strings.NewReader(""), &out, &errb)
			if code != tc.code || strings.Join(ran, " ") != tc.ran {
				t.Errorf("code %d ran %q, want %d %q", code, ran, tc.code, tc.ran)
			}
			if !strings.Contains(out.String(), tc.stdout) || !strings.Contains(errb.String(), tc.stderr) {
				t.Errorf("stdout %q stderr %q, want them to hold %q and %q", out.String(), errb.String(), tc.stdout, tc.stderr)
			}
			if strings.Contains(out.String()+errb.String(), "probe") {
				t.Errorf("hidden command listed: %q", out.String()+errb.String())
			}
		})
	}
}

// TestCommandTable: each build has its commands, named once.
func TestCommandTable(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range commands() {
		if seen[c.name] || c.run == nil || (!c.hidden && c.summary == "") {
			t.Errorf("command %q duplicated or incomplete", c.name)
		}
		seen[c.name] = true
	}
	for _, want := range []string{"hook", "render", "version"} {
		if !seen[want] {
			t.Errorf("command %q missing from this build", want)
		}
	}
}
