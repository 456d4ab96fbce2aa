//go:build !hookonly && !agentonly

package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"github.com/spf13/pflag"

	"github.com/iptables-alerter/iptables-alerter/lib/agent"
	"github.com/iptables-alerter/iptables-alerter/lib/consumer"
	"github.com/iptables-alerter/iptables-alerter/lib/events"
	"github.com/iptables-alerter/iptables-alerter/lib/kubeapi"
	"github.com/iptables-alerter/iptables-alerter/lib/nodemark"
	"github.com/iptables-alerter/iptables-alerter/lib/openreports"
)

// updateDocs makes TestReference write the pages and the README section
// instead of comparing them (make docs).
var updateDocs = flag.Bool("update-docs", false, "rewrite docs/man/ and the README's generated CLI reference")

const (
	manDir      = "../docs/man"
	cliPath     = "../docs/cli.md"
	metricsPath = "../docs/metrics.md"
	readmePath  = "../README.md"
	beginMarker = "<!-- BEGIN GENERATED CLI REFERENCE -->\n"
	endMarker   = "<!-- END GENERATED CLI REFERENCE -->\n"
)

// manDate is the date the pages carry: fixed, or every page would be stale
// each month (cobra prints month and year).
var manDate = time.Date(2025, time.November, 1, 0, 0, 0, 0, time.UTC)

// docsRoot is the full build's command tree, completion and help included,
// as the binary builds it.
func docsRoot() *cobra.Command {
	var out, errb bytes.Buffer
	root, _ := newRoot(commands(), stdio{strings.NewReader(""), &out, &errb})
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	return root
}

// manPages gives each man page's name and text: iptables-alerter(8) and
// one per command.
func manPages(t *testing.T) map[string]string {
	dir := t.TempDir()
	header := &doc.GenManHeader{Title: "IPTABLES-ALERTER", Section: "8", Date: &manDate,
		Source: "iptables-alerter", Manual: "System Administration"}
	root := docsRoot()
	literalMan(root)
	if err := doc.GenManTree(root, header, dir); err != nil {
		t.Fatal(err)
	}
	pages := readDir(t, dir)
	for name, text := range pages {
		// No help text asks for italics: where md2man made some, a
		// character of the text was lost to it.
		if i := strings.Index(text, `\fI`); i >= 0 {
			t.Errorf("%s: italics from the help text's markup: %q", name, text[i:min(i+60, len(text))])
		}
	}
	return pages
}

// manMarkup escapes what markdown would read as emphasis in help text:
// the man pages go through md2man, --help does not, and a help text says
// xt_* or node-role.kubernetes.io/* literally.
var manMarkup = strings.NewReplacer(`\`, `\\`, "*", `\*`, "_", `\_`)

// manLiteral is s with manMarkup applied outside its `code spans`, which
// md2man shows as they are.
func manLiteral(s string) string {
	parts := strings.Split(s, "`")
	for i := 0; i < len(parts); i += 2 {
		parts[i] = manMarkup.Replace(parts[i])
	}
	return strings.Join(parts, "`")
}

// literalMan makes the help texts of c's tree literal for md2man, but for
// cobra's completion commands, whose texts are markdown. A flag's default
// needs nothing: one marker alone in its paragraph is no emphasis. Each
// flag is escaped once, by the command that defines it: a persistent
// flag's is the same Flag in every subcommand's inherited set.
func literalMan(c *cobra.Command) {
	if c.Name() == "completion" {
		return
	}
	c.Short, c.Long = manLiteral(c.Short), manLiteral(c.Long)
	for _, fs := range []*pflag.FlagSet{c.LocalNonPersistentFlags(), c.PersistentFlags()} {
		fs.VisitAll(func(f *pflag.Flag) { f.Usage = manLiteral(f.Usage) })
	}
	for _, sub := range c.Commands() {
		literalMan(sub)
	}
}

func readDir(t *testing.T, dir string) map[string]string {
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = string(b)
	}
	return files
}

// visibleCommands are the commands a reference lists.
func visibleCommands() []*cobra.Command {
	var cmds []*cobra.Command
	for _, c := range docsRoot().Commands() {
		if c.IsAvailableCommand() && c.Name() != "help" {
			cmds = append(cmds, c)
		}
	}
	return cmds
}

// markdownReference is docs/cli.md: every command's summary, synopsis and
// flags, as --help prints them.
func markdownReference() string {
	var b strings.Builder
	b.WriteString("# Command reference\n\n")
	b.WriteString("Generated from the flag definitions by `make docs`: do not edit. `iptables-alerter COMMAND --help`\n")
	b.WriteString("prints the same with the command's description, and so do the man pages in\n")
	b.WriteString("[man/](man/) (`man 8 iptables-alerter-COMMAND`). Flags are spelt `--flag`;\n")
	b.WriteString("the hookonly build (`iptables-alerter-hook`) has `hook`, `render`, `scan` and `version`.\n")
	for _, c := range visibleCommands() {
		fmt.Fprintf(&b, "\n## `%s`\n\n%s.\n\n```\n%s\n", c.CommandPath(), strings.TrimSuffix(c.Short, "."), c.UseLine())
		if c.HasAvailableSubCommands() {
			for _, sub := range c.Commands() {
				if sub.IsAvailableCommand() {
					fmt.Fprintf(&b, "%s\n", sub.UseLine())
				}
			}
		}
		if fs := c.NonInheritedFlags(); fs.HasAvailableFlags() {
			fmt.Fprintf(&b, "\n%s", fs.FlagUsagesWrapped(100))
		}
		b.WriteString("```\n")
	}
	return b.String()
}

// readmeReference is the README's short reference: one row per command
// with its flags' names; docs/cli.md has their meanings and defaults.
func readmeReference() string {
	var b strings.Builder
	b.WriteString("Generated by `make docs` from the flag definitions, like [docs/cli.md](docs/cli.md)\n")
	b.WriteString("(every flag with its meaning and default) and the man pages in [docs/man/](docs/man/).\n")
	b.WriteString("`iptables-alerter COMMAND --help` prints the same on stdout.\n\n")
	b.WriteString("| command | what it does | flags |\n|---|---|---|\n")
	for _, c := range visibleCommands() {
		var names []string
		c.NonInheritedFlags().VisitAll(func(f *pflag.Flag) {
			if !f.Hidden && f.Name != "help" {
				names = append(names, "`--"+f.Name+"`")
			}
		})
		fmt.Fprintf(&b, "| [`%s`](docs/cli.md#%s) | %s | %s |\n", c.Name(), anchor(c.CommandPath()), strings.TrimSuffix(c.Short, "."), strings.Join(names, " "))
	}
	return b.String()
}

// anchor is the heading anchor GitHub gives "## `CMD`".
func anchor(heading string) string {
	return strings.ReplaceAll(strings.ToLower(heading), " ", "-")
}

// readmeSection splits the README around its generated section.
func readmeSection(t *testing.T, readme string) (before, section, after string) {
	i, j := strings.Index(readme, beginMarker), strings.Index(readme, endMarker)
	if i < 0 || j < i {
		t.Fatalf("%s: no %q ... %q section", readmePath, strings.TrimSpace(beginMarker), strings.TrimSpace(endMarker))
	}
	return readme[:i+len(beginMarker)], readme[i+len(beginMarker) : j], readme[j:]
}

// daemonRegistry is one daemon's /metrics, built by the function the
// daemon builds it with.
type daemonRegistry struct {
	name, where string
	reg         *prometheus.Registry
}

// metricRegistries are the registries the reference lists: the daemons'
// own, built by the functions they serve /metrics from. (textfile writes
// node-exporter's file, documented in docs/consumers-textfile.md.)
func metricRegistries(t *testing.T) []daemonRegistry {
	a, err := agent.New(agent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	refusals := kubeapi.NewRefusals()
	keeper := openreports.NewKeeper(nil, nil, nil, log)
	fwd := forwardMetrics(&consumer.Runner{}, events.NewConsumer(nil, log, refusals), keeper, refusals)
	(*nodemark.Marker)(nil).Register(fwd)
	return []daemonRegistry{
		{"agent", "`/metrics` on `--health-addr` (9757) or `--metrics-addr`", agentRegistry(a)},
		{"forward", "`/metrics` on `--health-addr` (9756), or behind TLS on `--secure-metrics-addr`", fwd},
	}
}

// descRE reads a prometheus.Desc's String(): its fields have no getters.
var descRE = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: ("(?:[^"\\]|\\.)*"), unit: "(?:[^"\\]|\\.)*", constLabels: \{(.*)\}, variableLabels: \{(.*)\}\}$`)

// metricsReference is docs/metrics.md: every iptables_alerter_ series each
// registry can serve, with its labels and help (go_* and process_* are
// client_golang's own).
func metricsReference(t *testing.T) string {
	var b strings.Builder
	b.WriteString("# Metrics reference\n\n")
	b.WriteString("Generated from the Prometheus registries by `make docs`: do not edit. Each daemon also\n")
	b.WriteString("serves client_golang's `go_*` and `process_*` series, and\n")
	b.WriteString("`promhttp_metric_handler_errors_total` (cause: gathering, encoding), the pages that failed.\n")
	b.WriteString("Every `/metrics` is client_golang's promhttp handler: the Prometheus text format, or\n")
	b.WriteString("OpenMetrics when the scraper asks for it, gzip-compressed when it accepts gzip.\n")
	for _, d := range metricRegistries(t) {
		type metric struct {
			help   string
			labels []string
		}
		metrics := map[string]*metric{}
		ch := make(chan *prometheus.Desc)
		go func() { d.reg.Describe(ch); close(ch) }()
		// The text above says every daemon serves these.
		runtime := map[string]bool{"go_goroutines": false, "process_resident_memory_bytes": false}
		for desc := range ch {
			m := descRE.FindStringSubmatch(desc.String())
			if m == nil {
				t.Fatalf("cannot read %s", desc)
			}
			name, _ := strconv.Unquote(m[1])
			help, _ := strconv.Unquote(m[2])
			if _, ok := runtime[name]; ok {
				runtime[name] = true
			}
			if !strings.HasPrefix(name, "iptables_alerter_") {
				continue
			}
			var labels []string
			for _, l := range append(strings.Split(m[3], ","), strings.Split(m[4], ",")...) {
				if l, _, _ = strings.Cut(l, "="); l != "" {
					labels = append(labels, l)
				}
			}
			if metrics[name] == nil {
				metrics[name] = &metric{help: help}
			}
			metrics[name].labels = append(metrics[name].labels, labels...)
		}
		for name, seen := range runtime {
			if !seen {
				t.Errorf("%s's registry does not serve %s", d.name, name)
			}
		}
		names := make([]string, 0, len(metrics))
		for n := range metrics {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintf(&b, "\n## %s\n\n%s.\n\n| metric | labels | meaning |\n|---|---|---|\n", d.name, d.where)
		for _, n := range names {
			m := metrics[n]
			sort.Strings(m.labels)
			m.labels = slices.Compact(m.labels)
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", n, strings.Join(m.labels, ", "), strings.ReplaceAll(m.help, "|", "\\|"))
		}
	}
	return b.String()
}

// TestReference: docs/man/, docs/cli.md, docs/metrics.md and the README's
// reference are what the flag definitions and the metric registries give;
// make docs (-update-docs) rewrites them.
func TestReference(t *testing.T) {
	pages := manPages(t)
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	before, section, after := readmeSection(t, string(readme))
	ref, cli, metrics := readmeReference(), markdownReference(), metricsReference(t)
	if *updateDocs {
		if err := os.WriteFile(cliPath, []byte(cli), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(metricsPath, []byte(metrics), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(manDir); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(manDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, text := range pages {
			if err := os.WriteFile(filepath.Join(manDir, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(readmePath, []byte(before+ref+after), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if diff := cmp.Diff(pages, readDir(t, manDir)); diff != "" {
		t.Errorf("docs/man/ is stale, run make docs (-generated +tracked):\n%s", diff)
	}
	if tracked, err := os.ReadFile(cliPath); err != nil || string(tracked) != cli {
		t.Errorf("docs/cli.md is stale, run make docs (%v)", err)
	}
	if tracked, err := os.ReadFile(metricsPath); err != nil || string(tracked) != metrics {
		t.Errorf("docs/metrics.md is stale, run make docs (%v)", err)
	}
	if diff := cmp.Diff(ref, section); diff != "" {
		t.Errorf("the README's CLI reference is stale, run make docs (-generated +tracked):\n%s", diff)
	}
	if _, ok := pages["iptables-alerter.8"]; !ok || len(pages) < 12 {
		t.Errorf("man pages %d, want iptables-alerter.8 and one per command", len(pages))
	}
}
