// Command iptables-alerter finds pods that use iptables and reports them.
//
// main only wires subcommands; each lives in its own file of this package and
// the work itself in lib/.
package main

import (
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

type command struct {
	summary string
	run     func(args []string, stdin io.Reader, stderr io.Writer) int
}

// commands is filled by each subcommand's file so main.go never changes when
// one is added.
var commands = map[string]command{}

func register(name, summary string, run func([]string, io.Reader, io.Writer) int) {
	commands[name] = command{summary: summary, run: run}
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: iptables-alerter COMMAND [FLAGS]\n\nFinds pods that create iptables rules in their network namespace.\n\nCommands:\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(w, "  %-10s %s\n\nRun 'iptables-alerter COMMAND --help' for the flags of a command.\n", "version", "print the version")
}

func main() {
	// A legacy x_tables probe that lib/inspect started runs here and exits.
	inspect.ProbeMain()
	if len(os.Args) < 2 {
		usage(os.Stderr)
		os.Exit(2)
	}
	name := os.Args[1]
	switch name {
	case "-h", "--help", "help":
		usage(os.Stdout)
		return
	case "version", "--version":
		fmt.Println(version)
		return
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "iptables-alerter: unknown command %q\n\n", name)
		usage(os.Stderr)
		os.Exit(2)
	}
	os.Exit(cmd.run(os.Args[2:], os.Stdin, os.Stderr))
}
