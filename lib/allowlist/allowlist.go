package allowlist

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"regexp"
	"sort"

	"github.com/iptables-alerter/iptables-alerter/internal/fileio"
	"github.com/iptables-alerter/iptables-alerter/lib/classify"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
)

const maxFileBytes = 1 << 20

// Entry is one allowlist entry as written in the JSON file. Empty matchers
// match anything; an entry needs Rule or RuleRegexp so that it can never
// allow a whole table by accident.
type Entry struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
	Family string `json:"family,omitempty"`
	Table  string `json:"table,omitempty"`
	Chain  string `json:"chain,omitempty"`
	// Rule is the exact canonical text, e.g. "-A OUTPUT -p tcp --dport 22623 --syn -j REJECT".
	Rule string `json:"rule,omitempty"`
	// RuleRegexp must match the whole canonical text.
	RuleRegexp string `json:"rule_regexp,omitempty"`
	// Namespaces scopes the entry to pods in these namespaces (shell globs,
	// e.g. "openshift-*"); empty means every namespace.
	Namespaces []string `json:"namespaces,omitempty"`
}

// File is the allowlist file's layout.
type File struct {
	Entries []Entry `json:"entries"`
}

type compiled struct {
	Entry
	re *regexp.Regexp
}

// List is a validated, compiled allowlist.
type List struct {
	entries []compiled
}

// Parse validates and compiles entries; source names them in errors.
func Parse(data []byte, source string) (*List, error) {
	var f File
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("decode allowlist %q: %w", source, err)
	}
	return New(f.Entries, source)
}

// New compiles entries.
func New(entries []Entry, source string) (*List, error) {
	l := &List{}
	for i, e := range entries {
		if e.Name == "" {
			return nil, fmt.Errorf("allowlist %q entry %d: no name", source, i)
		}
		if (e.Rule == "") == (e.RuleRegexp == "") {
			return nil, fmt.Errorf("allowlist %q entry %q: needs exactly one of rule and rule_regexp", source, e.Name)
		}
		c := compiled{Entry: e}
		if e.RuleRegexp != "" {
			re, err := regexp.Compile(`^(?:` + e.RuleRegexp + `)$`)
			if err != nil {
				return nil, fmt.Errorf("allowlist %q entry %q: compile rule_regexp: %w", source, e.Name, err)
			}
			c.re = re
		}
		for _, ns := range e.Namespaces {
			if _, err := path.Match(ns, ""); err != nil {
				return nil, fmt.Errorf("allowlist %q entry %q: namespace pattern %q: %w", source, e.Name, ns, err)
			}
		}
		l.entries = append(l.entries, c)
	}
	return l, nil
}

// Load reads an allowlist file. A missing file is an empty list: the
// default path need not exist on every node.
func Load(p string) (*List, error) {
	data, err := fileio.ReadFile(p, maxFileBytes)
	if errors.Is(err, os.ErrNotExist) {
		return &List{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load allowlist: %w", err)
	}
	return Parse(data, p)
}

// Join makes one list of several, first list first.
func Join(lists ...*List) *List {
	j := &List{}
	for _, l := range lists {
		if l != nil {
			j.entries = append(j.entries, l.entries...)
		}
	}
	return j
}

// Match returns the name of the first entry matching the rule for a pod in
// namespace, or "". text is called at most once, and only when an entry's
// cheap matchers (family, table, chain, namespace) fit: rendering is the
// costly part.
func (l *List) Match(namespace string, r inspect.Rule, text func() string) string {
	rendered, done := "", false
	for _, e := range l.entries {
		if !e.scoped(namespace, r) {
			continue
		}
		if !done {
			rendered, done = text(), true
		}
		if (e.re != nil && e.re.MatchString(rendered)) || (e.re == nil && e.Rule == rendered) {
			return e.Name
		}
	}
	return ""
}

func (e compiled) scoped(namespace string, r inspect.Rule) bool {
	if (e.Family != "" && e.Family != string(r.Family)) ||
		(e.Table != "" && e.Table != r.Table) ||
		(e.Chain != "" && e.Chain != r.Chain) {
		return false
	}
	return len(e.Namespaces) == 0 || anyGlob(e.Namespaces, namespace)
}

func anyGlob(patterns []string, s string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, s); ok {
			return true
		}
	}
	return false
}

// Result says what Apply took away.
type Result struct {
	// Count is the number of rules subtracted.
	Count int
	// Entries names the entries that matched, sorted, once each.
	Entries []string
}

// Apply takes the allowlisted rules out of u. text renders a rule to its
// canonical text; it is called once per kept rule.
func (l *List) Apply(u classify.Usage, namespace string, text func(inspect.Rule) string) (classify.Usage, Result) {
	var res Result
	if l == nil || len(l.entries) == 0 {
		return u, res
	}
	chains := make(map[[3]string]int, len(u.Chains))
	out := u
	out.Chains = append([]classify.Chain(nil), u.Chains...)
	for i, c := range out.Chains {
		chains[[3]string{string(c.Family), c.Table, c.Name}] = i
	}
	out.Rules = nil
	seen := map[string]bool{}
	for _, r := range u.Rules {
		name := l.Match(namespace, r, func() string { return text(r) })
		if name == "" {
			out.Rules = append(out.Rules, r)
			continue
		}
		res.Count++
		if !seen[name] {
			seen[name] = true
			res.Entries = append(res.Entries, name)
		}
		if i, ok := chains[[3]string{string(r.Family), r.Table, r.Chain}]; ok {
			out.Chains[i].Remove(r)
		}
	}
	sort.Strings(res.Entries)
	return out, res
}
