// Command iptables-alerter finds pods that use iptables and reports them.
//
// main only wires subcommands: the table of commands is in commands_*.go
// (one per build), each command in its own file of this package and the
// work itself in lib/.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/iptables-alerter/iptables-alerter/internal/child"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// command is one subcommand. A hidden one (internal plumbing, such as a
// child process the hook starts) is left out of the usage.
type command struct {
	name    string
	summary string
	hidden  bool
	run     func(args []string, stdin io.Reader, stderr io.Writer) int
}

// versionCommand is in every build.
var versionCommand = command{name: "version", summary: "print the version", run: func([]string, io.Reader, io.Writer) int {
	fmt.Println(version)
	return 0
}}

func usage(w io.Writer, cmds []command) {
	fmt.Fprintf(w, "Usage: iptables-alerter COMMAND [FLAGS]\n\nFinds pods that create iptables rules in their network namespace.\n\nCommands:\n")
	for _, c := range cmds {
		if !c.hidden {
			fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
		}
	}
	fmt.Fprintf(w, "\nRun 'iptables-alerter COMMAND --help' for the flags of a command.\n")
}

func main() {
	// A child probe that lib/inspect or lib/ipset started runs here and exits.
	child.Main(probes...)
	os.Exit(dispatch(commands(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// dispatch runs the command args[0] names.
func dispatch(cmds []command, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr, cmds)
		return 2
	}
	switch args[0] {
	case "-h", "--help", "help":
		usage(stdout, cmds)
		return 0
	case "--version":
		args[0] = "version"
	}
	for _, c := range cmds {
		if c.name == args[0] {
			return c.run(args[1:], stdin, stderr)
		}
	}
	fmt.Fprintf(stderr, "iptables-alerter: unknown command %q\n\n", args[0])
	usage(stderr, cmds)
	return 2
}
