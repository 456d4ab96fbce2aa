//go:build hookonly

package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/pflag"
)

// execute parses args with pflag alone, the way the full build's cobra
// tree does (help on stdout, --flag spelling, the same errors), without
// cobra: the runtime execs this build at every container start, and
// cobra's tree and templates cost it about half a millisecond each time
// (measured with tests/bench's start run). It gives the command's status,
// or the usage error and the path of the command it concerns.
func execute(cmds []command, args []string, s stdio) (int, string, error) {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || (args[0] == "help" && len(args) == 1) {
		usage(s.out, cmds)
		return 0, prog, nil
	}
	name, rest := args[0], args[1:]
	switch name {
	case "--version":
		// The version alone, as cobra's --version in the full build.
		if len(rest) == 0 {
			fmt.Fprintln(s.out, about().Version)
			return 0, prog, nil
		}
		name = "version"
	case "help":
		name, rest = args[1], []string{"--help"}
	}
	for _, c := range cmds {
		if c.name() != name {
			continue
		}
		path := prog + " " + name
		fs := pflag.NewFlagSet(path, pflag.ContinueOnError)
		// Errors come back to dispatch, help is printed here.
		fs.SetOutput(io.Discard)
		cfg := c.newConfig()
		cfg.register(fs)
		err := fs.Parse(rest)
		switch {
		case errors.Is(err, pflag.ErrHelp):
			fmt.Fprintf(s.out, "%s\n\nUsage:\n  %s %s [flags]\n\nFlags:\n%s", orShort(c), prog, c.use, fs.FlagUsages())
			return 0, path, nil
		case err != nil:
			return 0, path, err
		case !c.args && fs.NArg() > 0:
			return 0, path, fmt.Errorf("unknown command %q for %q", fs.Arg(0), path)
		}
		return cfg.run(fs.Args(), s), path, nil
	}
	return 0, prog, fmt.Errorf("unknown command %q for %q", name, prog)
}

// orShort is the command's long description, or its summary.
func orShort(c command) string {
	if c.long != "" {
		return c.long
	}
	return c.summary
}

func usage(w io.Writer, cmds []command) {
	fmt.Fprintf(w, "Finds pods that create iptables rules in their network namespace (hook-side commands only).\n\nUsage:\n  %s [command]\n\nAvailable Commands:\n", prog)
	for _, c := range cmds {
		if !c.hidden {
			fmt.Fprintf(w, "  %-10s %s\n", c.name(), c.summary)
		}
	}
	fmt.Fprintf(w, "\nUse \"%s [command] --help\" for more information about a command.\n", prog)
}
