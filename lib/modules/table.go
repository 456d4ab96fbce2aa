package modules

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Packages an entry can name. Unverified is an entry no counted source
// backs: the report says so rather than guess.
const (
	PackageCore       = "kernel-modules-core"
	PackageModules    = "kernel-modules"
	PackageExtra      = "kernel-modules-extra"
	PackageAbsent     = "absent"
	PackageUnverified = "unverified"
)

// Source kinds; only Counted ones verify an entry.
const (
	KindRedHat    = "red-hat"   // Red Hat documentation and release notes
	KindOpenShift = "openshift" // OpenShift's, MicroShift's, the MCO's own changes
	KindPackaging = "packaging" // CentOS Stream kernel packaging
	KindField     = "field"     // another project's report or fix
)

// Source is one document the table cites.
type Source struct {
	URL  string `json:"url"`
	Kind string `json:"kind"`
	// Says is what the source says, in short, with its date.
	Says string `json:"says"`
}

// Counted reports whether the source may verify an entry.
func (s Source) Counted() bool {
	return s.Kind == KindRedHat || s.Kind == KindOpenShift || s.Kind == KindPackaging
}

// Entry is what the table says of one module in some releases.
type Entry struct {
	Module   string   `json:"module"`
	Releases []string `json:"releases"`
	// Package is one of the Package* values.
	Package string `json:"package"`
	// Seen is, for an unverified entry, the package field reports saw.
	Seen   string `json:"seen,omitempty"`
	Source string `json:"source"`
	Note   string `json:"note,omitempty"`
}

// Table is the release table.
type Table struct {
	Releases []string          `json:"releases"`
	Sources  map[string]Source `json:"sources"`
	Entries  []Entry           `json:"entries"`
	// raw is the built-in table's JSON, parsed at its first use: the hook
	// links this package for Of and never reads the table, and parsing it
	// at start cost every hook process about 1 ms.
	raw  []byte
	once sync.Once
}

//go:embed releases.json
var releasesJSON []byte

// Releases is the built-in table (releases.json), loaded and checked by
// Load at its first use; a method of Table reads it.
var Releases = &Table{raw: releasesJSON}

// ready loads the built-in table; a table from Load is ready already.
func (t *Table) ready() {
	t.once.Do(func() {
		if t.raw == nil {
			return
		}
		l, err := Load(t.raw)
		if err != nil {
			panic(err)
		}
		t.Releases, t.Sources, t.Entries = l.Releases, l.Sources, l.Entries
	})
}

// Load parses and checks a table: every entry names known releases, a
// known package and a cited source; a verified package needs a counted
// source.
func Load(b []byte) (*Table, error) {
	var t Table
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("release table: %w", err)
	}
	seen := map[string]bool{}
	for _, e := range t.Entries {
		s, ok := t.Sources[e.Source]
		if !ok || s.URL == "" || s.Says == "" {
			return nil, fmt.Errorf("release table: %s: source %q not cited", e.Module, e.Source)
		}
		switch e.Package {
		case PackageCore, PackageModules, PackageExtra, PackageAbsent:
			if !s.Counted() {
				return nil, fmt.Errorf("release table: %s: %s from a %s source: only %s, %s or %s sources verify", e.Module, e.Package, s.Kind, KindRedHat, KindOpenShift, KindPackaging)
			}
		case PackageUnverified:
		default:
			return nil, fmt.Errorf("release table: %s: unknown package %q", e.Module, e.Package)
		}
		for _, r := range e.Releases {
			if !slices.Contains(t.Releases, r) {
				return nil, fmt.Errorf("release table: %s: unknown release %q", e.Module, r)
			}
			if k := e.Module + " " + r; seen[k] {
				return nil, fmt.Errorf("release table: %s listed twice for %s", e.Module, r)
			} else {
				seen[k] = true
			}
		}
	}
	return &t, nil
}

// Verified is true when the table verifies where the module is (a
// package, or absent) in some release.
func (t *Table) Verified(module string) bool {
	t.ready()
	return slices.ContainsFunc(t.Entries, func(e Entry) bool { return e.Module == module && e.Package != PackageUnverified })
}

// Lookup is the table's entry for a module in a release; Package
// unverified (and no source) when the table has none.
func (t *Table) Lookup(release, module string) Entry {
	t.ready()
	for _, e := range t.Entries {
		if e.Module == module && slices.Contains(e.Releases, release) {
			return e
		}
	}
	return Entry{Module: module, Releases: []string{release}, Package: PackageUnverified}
}

// Target parses a --target value, "rhel-10.2"; "" is Default.
func (t *Table) Target(s string) (string, error) {
	t.ready()
	if s == "" {
		return t.Default(), nil
	}
	r := strings.TrimPrefix(s, "rhel-")
	if !slices.Contains(t.Releases, r) {
		return "", fmt.Errorf("unknown target %q: want one of %s", s, strings.Join(t.Targets(), ", "))
	}
	return r, nil
}

// Targets are the --target values, oldest first.
func (t *Table) Targets() []string {
	t.ready()
	out := make([]string, len(t.Releases))
	for i, r := range t.Releases {
		out[i] = "rhel-" + r
	}
	return out
}

// Default is the newest release with a verified entry for a module that
// is not absent in every release (what sets the releases apart), else the
// newest.
func (t *Table) Default() string {
	t.ready()
	for i := len(t.Releases) - 1; i >= 0; i-- {
		r := t.Releases[i]
		for _, e := range t.Entries {
			if e.Package != PackageUnverified && e.Package != PackageAbsent && slices.Contains(e.Releases, r) {
				return r
			}
		}
	}
	return t.Releases[len(t.Releases)-1]
}

// Words says what a workload needing mods meets on release: which are not
// shipped (the rules break), which need kernel-modules-extra, which have
// no verified package; modules a verified entry puts in
// kernel-modules-core or kernel-modules are not named. "" when there is
// nothing to say.
func (t *Table) Words(release string, mods []string) string {
	t.ready()
	var absent, extra, unverified []string
	for _, m := range mods {
		e := t.Lookup(release, m)
		switch e.Package {
		case PackageAbsent:
			absent = append(absent, m)
		case PackageExtra:
			extra = append(extra, m)
		case PackageUnverified:
			if e.Seen != "" {
				m += " (reported in " + e.Seen + ")"
			}
			unverified = append(unverified, m)
		}
	}
	var parts []string
	if len(absent) > 0 {
		verb := " is"
		if len(absent) > 1 {
			verb = " are"
		}
		parts = append(parts, "breaks: "+strings.Join(absent, ", ")+verb+" not shipped")
	}
	if len(extra) > 0 {
		parts = append(parts, "needs "+PackageExtra+": "+strings.Join(extra, ", "))
	}
	if len(unverified) > 0 {
		parts = append(parts, "package unverified: "+strings.Join(unverified, ", "))
	}
	if len(parts) == 0 {
		return ""
	}
	return "RHEL " + release + ": " + strings.Join(parts, "; ")
}
