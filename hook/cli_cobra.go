//go:build !hookonly

package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

const (
	rootSummary = "find pods that create iptables rules in their network namespace"
	rootLong    = `Finds pods that create iptables rules in their network namespace: on RHEL 10
legacy x_tables rules break (no ip_tables modules), rules with an xt match or
target need kernel-modules-extra, and native iptables-nft rules keep loading.
The hook and the agent record each pod's usage in a findings file; the
consumers turn it into metrics, Kubernetes Events, OpenReports Reports and a
readiness report.`
)

// execute runs args through the cobra tree of cmds: help on stdout,
// --flag spelling, completion. It gives the command's status, or the
// usage error and the path of the command it concerns.
func execute(cmds []command, args []string, s stdio) (int, string, error) {
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-v") {
		// The version alone, here rather than through cobra: its way to
		// print just that is a text/template, whose reflection keeps
		// every exported method of every type in the binary (the linker
		// cannot tell which a template calls): 2.6 MB of the agent-only
		// build's 15 MB (docs/performance.md).
		fmt.Fprintln(s.out, about().Version)
		return 0, prog, nil
	}
	root, code := newRoot(cmds, s)
	root.SetArgs(args)
	c, err := root.ExecuteC()
	return *code, c.CommandPath(), err
}

// newRoot builds the command tree of cmds; after Execute, *code is the
// status of the command that ran.
func newRoot(cmds []command, s stdio) (*cobra.Command, *int) {
	code := new(int)
	root := &cobra.Command{
		Use:     prog,
		Short:   rootSummary,
		Long:    rootLong,
		Version: about().Version,
		// dispatch prints the one line; cobra would add the whole usage.
		SilenceErrors:     true,
		SilenceUsage:      true,
		DisableAutoGenTag: true,
		// No "did you mean" over a typo: one line, the help names them all.
		DisableSuggestions: true,
	}
	root.SetIn(s.in)
	root.SetOut(s.out)
	root.SetErr(s.err)
	for _, c := range cmds {
		cfg := c.newConfig()
		cc := &cobra.Command{
			Use:    c.use,
			Short:  c.summary,
			Long:   c.long,
			Hidden: c.hidden,
			Args:   cobra.NoArgs,
			Run: func(cc *cobra.Command, args []string) {
				*code = cfg.run(args, stdio{cc.InOrStdin(), cc.OutOrStdout(), cc.ErrOrStderr()})
			},
		}
		if c.args {
			cc.Args = cobra.ArbitraryArgs
		}
		cfg.register(cc.Flags())
		cc.Flags().SortFlags = true
		cc.Flags().VisitAll(func(f *pflag.Flag) {
			if e, ok := f.Value.(*enum); ok {
				_ = cc.RegisterFlagCompletionFunc(f.Name, func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
					return e.allowed, cobra.ShellCompDirectiveNoFileComp
				})
			}
		})
		root.AddCommand(cc)
	}
	return root, code
}
