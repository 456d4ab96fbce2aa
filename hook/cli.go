package main

import (
	"errors"
	"fmt"
	"io"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/iptables-alerter/iptables-alerter/lib/ocistate"
)

// prog names the program in help and errors: both builds are one program
// to the person reading.
const prog = "iptables-alerter"

// dispatch runs the command args[0] names and gives the exit status: the
// command's own, 0 for help, 2 for a usage error (an unknown command or
// flag, a bad flag value, an argument where none is taken), which is one
// line on stderr naming what is wrong, never the whole usage. The full
// build parses with cobra (cli_cobra.go), the hookonly build with pflag
// alone (cli_hookonly.go): the same flag definitions either way.
func dispatch(cmds []command, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	neverFails := false
	for _, c := range cmds {
		if c.neverFails && len(args) > 0 && args[0] == c.name() {
			// Before the flags are parsed, so before anything is
			// written: a flag error's line to a stderr nobody reads must
			// give a write error, not death by SIGPIPE.
			signal.Ignore(syscall.SIGPIPE)
			neverFails = true
		}
	}
	code, path, err := execute(cmds, args, stdio{stdin, stdout, stderr})
	if err == nil {
		return code
	}
	var unknown *pflag.NotExistError
	if errors.As(err, &unknown) && len(unknown.GetSpecifiedShortnames()) > 1 {
		// Go's flag package, which the commands used before, took -flag
		// too; pflag reads it as a run of one-letter flags.
		long, _, _ := strings.Cut(unknown.GetSpecifiedShortnames(), "=")
		err = fmt.Errorf("%w; long flags take two dashes: --%s", err, long)
	}
	fmt.Fprintf(stderr, "%s: %v (see '%s --help')\n", path, err, path)
	if neverFails {
		// A flag the installed binary does not know (a hooks.d JSON of
		// another version) must not fail the container either.
		ocistate.Drain(stdin, ocistate.DrainWithin)
		return 0
	}
	return 2
}

// name is the command's name, the first word of its synopsis.
func (c command) name() string {
	name, _, _ := strings.Cut(c.use, " ")
	return name
}

// enum is a string flag whose value must be one of allowed: a bad value is
// refused while the flags are parsed, in an error naming it and the
// allowed ones.
type enum struct {
	value   *string
	allowed []string
}

// newEnum gives the flag value storing into p, set to def.
func newEnum(p *string, def string, allowed ...string) *enum {
	*p = def
	return &enum{value: p, allowed: allowed}
}

func (e *enum) String() string { return *e.value }
func (e *enum) Type() string   { return "string" }

func (e *enum) Set(v string) error {
	if !slices.Contains(e.allowed, v) {
		return errors.New("want " + strings.Join(e.allowed, ", "))
	}
	*e.value = v
	return nil
}
