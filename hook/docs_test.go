//go:build !hookonly

package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// updateDocs makes TestReference write the pages and the README section
// instead of comparing them (make docs).
var updateDocs = flag.Bool("update-docs", false, "rewrite docs/man/ and the README's generated CLI reference")

const (
	manDir      = "../docs/man"
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
	if err := doc.GenManTree(docsRoot(), header, dir); err != nil {
		t.Fatal(err)
	}
	return readDir(t, dir)
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

// markdownReference is the README's reference of every command: summary,
// synopsis and flags, as --help prints them.
func markdownReference() string {
	var b strings.Builder
	b.WriteString("Generated from the flag definitions by `make docs`; `iptables-alerter COMMAND --help`\n")
	b.WriteString("prints the same with the command's description, and so do the man pages in\n")
	b.WriteString("[docs/man/](docs/man/) (`man 8 iptables-alerter-COMMAND`). Flags are spelt `--flag`;\n")
	b.WriteString("the hookonly build (`iptables-alerter-hook`) has `hook`, `render`, `scan` and `version`.\n")
	for _, c := range docsRoot().Commands() {
		if !c.IsAvailableCommand() || c.Name() == "help" {
			continue
		}
		fmt.Fprintf(&b, "\n#### `%s`\n\n%s.\n\n```\n%s\n", c.CommandPath(), strings.TrimSuffix(c.Short, "."), c.UseLine())
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

// readmeSection splits the README around its generated section.
func readmeSection(t *testing.T, readme string) (before, section, after string) {
	i, j := strings.Index(readme, beginMarker), strings.Index(readme, endMarker)
	if i < 0 || j < i {
		t.Fatalf("%s: no %q ... %q section", readmePath, strings.TrimSpace(beginMarker), strings.TrimSpace(endMarker))
	}
	return readme[:i+len(beginMarker)], readme[i+len(beginMarker) : j], readme[j:]
}

// TestReference: docs/man/ and the README's reference are what the flag
// definitions give; make docs (-update-docs) rewrites them.
func TestReference(t *testing.T) {
	pages := manPages(t)
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	before, section, after := readmeSection(t, string(readme))
	ref := markdownReference()
	if *updateDocs {
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
	if diff := cmp.Diff(ref, section); diff != "" {
		t.Errorf("the README's CLI reference is stale, run make docs (-generated +tracked):\n%s", diff)
	}
	if _, ok := pages["iptables-alerter.8"]; !ok || len(pages) < 12 {
		t.Errorf("man pages %d, want iptables-alerter.8 and one per command", len(pages))
	}
}
