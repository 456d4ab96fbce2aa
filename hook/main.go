// Command iptables-alerter finds pods that use iptables and reports them.
//
// main only wires subcommands: the table of commands is in commands_*.go
// (one per build), each command in its own file of this package, the
// command line in cli.go and the work itself in lib/.
package main

import (
	"io"
	"os"

	"github.com/spf13/pflag"

	"github.com/iptables-alerter/iptables-alerter/internal/child"
)

// stdio is what a command reads and writes: the process's own in main,
// buffers in tests, so commands run in-process.
type stdio struct {
	in       io.Reader
	out, err io.Writer
}

// config is a command's flags and what runs once they are parsed.
type config interface {
	// register defines the flags on fs, storing into the config.
	register(fs *pflag.FlagSet)
	// run does the command and gives its exit status.
	run(args []string, s stdio) int
}

// command is one subcommand. A hidden one (internal plumbing, such as a
// child process the hook starts) is left out of the usage.
type command struct {
	// use is the synopsis after "iptables-alerter ", the name first.
	use     string
	summary string
	long    string
	hidden  bool
	// args: the command takes arguments besides its flags (files); else
	// an argument is a usage error.
	args bool
	// neverFails: the exit status is 0 whatever happens, a bad flag
	// included (a failing poststart hook kills the container), and stdin
	// (the runtime's state) is read to its end before a bad flag's exit
	// (ocistate.Drain).
	neverFails bool
	// newConfig gives a zero config, its defaults set by register.
	newConfig func() config
}

func main() {
	// A child probe that lib/inspect or lib/ipset started runs here and exits.
	child.Main(probes...)
	os.Exit(dispatch(commands(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
