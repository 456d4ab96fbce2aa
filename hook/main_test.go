package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// runCmd runs a command line in-process, as main does, with an empty
// stdin.
func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb strings.Builder
	code = dispatch(commands(), args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// fakeConfig records what it ran with.
type fakeConfig struct {
	format string
	ran    *[]string
}

func (f *fakeConfig) register(fs *pflag.FlagSet) {
	fs.Var(newEnum(&f.format, "text", "text", "json"), "format", "output format")
}

func (f *fakeConfig) run(args []string, s stdio) int {
	*f.ran = append(*f.ran, f.format+":"+strings.Join(args, ","))
	s.out.Write([]byte("ran\n"))
	return 3
}

// TestDispatch: the command table alone decides what runs and what the
// help lists; help goes to stdout; a usage error is one line naming what
// is wrong, exit 2, except for a command that never fails.
func TestDispatch(t *testing.T) {
	var ran []string
	cmd := func(use string, hidden, args, neverFails bool) command {
		return command{use: use, summary: "does " + use, hidden: hidden, args: args, neverFails: neverFails,
			newConfig: func() config { return &fakeConfig{ran: &ran} }}
	}
	cmds := []command{cmd("alpha [FILE...]", false, true, false), cmd("probe", true, false, false), cmd("quiet", false, false, true)}
	tests := []struct {
		name   string
		args   []string
		code   int
		ran    string
		stdout string
		stderr string
	}{
		{name: "runs with its args", args: []string{"alpha", "x", "--format", "json", "y"}, code: 3, ran: "json:x,y", stdout: "ran"},
		{name: "hidden runs too", args: []string{"probe"}, code: 3, ran: "text:", stdout: "ran"},
		{name: "help lists visible only", args: []string{"--help"}, stdout: "does alpha"},
		{name: "no command is help", args: nil, stdout: "does alpha"},
		{name: "command help on stdout", args: []string{"alpha", "--help"}, stdout: "--format string"},
		{name: "unknown command", args: []string{"nope"}, code: 2, stderr: `unknown command "nope"`},
		{name: "unknown flag", args: []string{"alpha", "--nope"}, code: 2, stderr: "unknown flag: --nope"},
		{name: "single-dash long flag", args: []string{"alpha", "-format", "json"}, code: 2, stderr: "long flags take two dashes: --format"},
		{name: "bad enum names value and allowed", args: []string{"alpha", "--format", "xml"}, code: 2,
			stderr: `iptables-alerter alpha: invalid argument "xml" for "--format" flag: want text, json (see 'iptables-alerter alpha --help')` + "\n"},
		{name: "argument where none is taken", args: []string{"probe", "x"}, code: 2, stderr: `unknown command "x"`},
		{name: "never fails on a bad flag", args: []string{"quiet", "--nope"}, code: 0, stderr: "unknown flag: --nope"},
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
			if tc.code == 2 && (strings.Count(errb.String(), "\n") != 1 || out.Len() != 0) {
				t.Errorf("usage error: want one line on stderr and nothing on stdout, got %q and %q", errb.String(), out.String())
			}
			if !slices.Contains(tc.args, "probe") && strings.Contains(out.String()+errb.String(), "probe") {
				t.Errorf("hidden command listed: %q", out.String()+errb.String())
			}
		})
	}
}

// TestCommandTable: each build has its commands, named once, each flag
// spelt --long (what every caller in packaging/ and tests/ passes); the
// only shorthands are kubectl's: -n --namespace, -A --all-namespaces and
// -o --format (its --output).
func TestCommandTable(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range commands() {
		if seen[c.name()] || c.newConfig == nil || (!c.hidden && c.summary == "") {
			t.Errorf("command %q duplicated or incomplete", c.name())
		}
		seen[c.name()] = true
		fs := pflag.NewFlagSet(c.name(), pflag.ContinueOnError)
		c.newConfig().register(fs)
		fs.VisitAll(func(f *pflag.Flag) {
			kubectls := map[string]string{"n": "namespace", "A": "all-namespaces", "o": "format"}
			if (f.Shorthand != "" && kubectls[f.Shorthand] != f.Name) || len(f.Name) < 2 {
				t.Errorf("%s --%s: want long flags only", c.name(), f.Name)
			}
		})
	}
	for _, want := range []string{"hook", "render", "scan", "version"} {
		if !seen[want] {
			t.Errorf("command %q missing from this build", want)
		}
	}
}

// TestHelp: help goes to stdout for every command and lists its flags
// with two dashes.
func TestHelp(t *testing.T) {
	for _, c := range commands() {
		code, out, errs := runCmd(t, c.name(), "--help")
		if code != 0 || errs != "" || !strings.Contains(out, "Usage:") || !strings.Contains(out, "iptables-alerter "+c.name()) {
			t.Errorf("%s --help: exit %d, stdout %q, stderr %q", c.name(), code, out, errs)
		}
		if slices.Contains([]string{"hook", "render", "scan"}, c.name()) && !strings.Contains(out, "      --allowlist string") {
			t.Errorf("%s --help lacks --allowlist:\n%s", c.name(), out)
		}
	}
}

// TestHookBadFlag: a bad flag to the hook is one line and exit 0: a
// failing poststart hook kills the container.
func TestHookBadFlag(t *testing.T) {
	for _, args := range [][]string{{"hook", "--nope"}, {"hook", "--timeout", "soon"}, {"hook", "-findings", "x"}} {
		code, out, errs := runCmd(t, args...)
		if code != 0 || out != "" || strings.Count(errs, "\n") != 1 || !strings.HasPrefix(errs, "iptables-alerter hook: ") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 0 and one line", args, code, out, errs)
		}
	}
}
