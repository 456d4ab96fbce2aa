package allowlist

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"regexp"
	"regexp/syntax"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/iptables-alerter/iptables-alerter/internal/fileio"
	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
	"github.com/iptables-alerter/iptables-alerter/lib/classify"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
)

const maxFileBytes = 1 << 20

// Entry is one allowlist entry as written in the JSON file. Empty matchers
// match anything; an entry needs Rule or RuleRegexp so that it can never
// allow a whole table by accident.
type Entry struct {
	Name string `json:"name"`
	// Reason says why the rules are harmless, for the reader; an entry
	// without one still loads (refusing the file would report every rule
	// it was written to take away).
	Reason string `json:"reason,omitempty"`
	// Source says where the rules come from (a URL or file of the project
	// that writes them); optional, for the reader.
	Source string `json:"source,omitempty"`
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
	// Platform names the network plugin or engine an entry of the built-in
	// platform list belongs to: such an entry applies only when the agent's
	// --platform names it (Platform). Empty: what every node runs.
	Platform string `json:"platform,omitempty"`
}

// File is the allowlist file's layout.
type File struct {
	Entries []Entry `json:"entries"`
}

type compiled struct {
	Entry
	// re is the compiled rule_regexp, nil for an exact rule. Compiled at
	// the first text that gets past the cheap matchers (most lists'
	// entries never see one: the built-in list's are in FORWARD and
	// OUTPUT), not by New: the hook compiled them at every container
	// start with usage, a tenth of a millisecond (docs/performance.md).
	// New parses the expression, so a broken one is still its error.
	re func() *regexp.Regexp
	// starts are the strings one of which every text the entry matches
	// starts with ("" when unknown): "-A OUTPUT -p tcp" for a rule, "-A
	// FORWARD " and "-A OUTPUT " for "-A (FORWARD|OUTPUT) -p ...". A rule
	// whose text's head fits none of them is not rendered for this entry.
	starts []string
	// keepsLevel: what the entry takes away leaves the usage, not what
	// the node needs (Result.Worst): the built-in platform list's.
	keepsLevel bool
}

// List is a validated allowlist; each entry's expression is compiled at
// the first text that reaches it (safe to share between goroutines).
type List struct {
	entries []compiled
}

// Parse decodes and validates entries (New); source names them in errors.
func Parse(data []byte, source string) (*List, error) {
	var f File
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("decode allowlist %q: %w", source, err)
	}
	return New(f.Entries, source)
}

// New validates entries, each expression parsed as regexp.Compile would
// (the only place it fails), and keeps what the cheap matchers need.
func New(entries []Entry, source string) (*List, error) {
	l := &List{}
	for i, e := range entries {
		if e.Name == "" {
			return nil, fmt.Errorf("allowlist %q entry %d: no name", source, i)
		}
		if (e.Rule == "") == (e.RuleRegexp == "") {
			return nil, fmt.Errorf("allowlist %q entry %q: needs exactly one of rule and rule_regexp", source, e.Name)
		}
		c := compiled{Entry: e, starts: []string{e.Rule}}
		if e.RuleRegexp != "" {
			expr := `^(?:` + e.RuleRegexp + `)$`
			// What regexp.Compile would refuse (it parses the same way
			// and fails nowhere else).
			if _, err := syntax.Parse(expr, syntax.Perl); err != nil {
				return nil, fmt.Errorf("allowlist %q entry %q: compile rule_regexp: %w", source, e.Name, err)
			}
			c.re = sync.OnceValue(func() *regexp.Regexp {
				re, _ := regexp.Compile(expr)
				return re
			})
			c.starts = []string{""}
			if t, err := syntax.Parse(e.RuleRegexp, syntax.Perl); err == nil {
				c.starts, _ = literalStarts(t.Simplify())
			}
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
	if e := l.match(namespace, r, text, false); e != nil {
		return e.Name
	}
	return ""
}

// match is Match's entry, nil for none; with only, among the entries that
// keep their level alone.
func (l *List) match(namespace string, r inspect.Rule, text func() string, only bool) *compiled {
	rendered, done := "", false
	head := textHead(r)
	for i := range l.entries {
		e := &l.entries[i]
		if only && !e.keepsLevel || !e.scoped(namespace, r) || !e.fits(head) {
			continue
		}
		if !done {
			rendered, done = text(), true
		}
		if e.matches(rendered) {
			return e
		}
	}
	return nil
}

// matches tells whether a rule's (or a declaration's) text is the entry's:
// its regexp's, else its exact rule.
func (e *compiled) matches(text string) bool {
	if e.re != nil {
		re := e.re()
		return re != nil && re.MatchString(text)
	}
	return e.Rule == text
}

func (e compiled) scoped(namespace string, r inspect.Rule) bool {
	if (e.Family != "" && e.Family != string(r.Family)) ||
		(e.Table != "" && e.Table != r.Table) ||
		(e.Chain != "" && e.Chain != r.Chain) {
		return false
	}
	return len(e.Namespaces) == 0 || anyGlob(e.Namespaces, namespace)
}

// textHead is how the canonical text of r starts, without rendering it:
// "-A CHAIN", then the end or a space. A chain name render quotes gives "",
// which fits every entry. Getting it wrong could only leave a rule
// unmatched, reported rather than hidden.
func textHead(r inspect.Rule) string {
	if safetext.Name(r.Chain, len(r.Chain)) != r.Chain {
		return ""
	}
	return "-A " + r.Chain
}

// fits tells whether a text starting with head (then the end, or a space)
// may be one the entry matches.
func (e compiled) fits(head string) bool {
	if head == "" {
		return true
	}
	for _, p := range e.starts {
		if strings.HasPrefix(head, p) {
			return true
		}
		if strings.HasPrefix(p, head) && (len(p) == len(head) || p[len(head)] == ' ') {
			return true
		}
	}
	return false
}

// maxStarts bounds literalStarts' set: an entry with more alternatives is
// simply rendered for every rule in its scope.
const maxStarts = 64

// literalStarts is a set of strings one of which every match of re starts
// with, and whether re matches exactly those strings. It knows literals,
// groups, alternations and sequences of them; anything else starts with
// "", which fits every rule.
func literalStarts(re *syntax.Regexp) ([]string, bool) {
	switch re.Op {
	case syntax.OpLiteral:
		if re.Flags&syntax.FoldCase != 0 {
			return []string{""}, false
		}
		return []string{string(re.Rune)}, true
	case syntax.OpEmptyMatch, syntax.OpBeginText:
		return []string{""}, true
	case syntax.OpCapture:
		return literalStarts(re.Sub[0])
	case syntax.OpAlternate:
		var out []string
		exact := true
		for _, sub := range re.Sub {
			s, e := literalStarts(sub)
			out, exact = append(out, s...), exact && e
		}
		if len(out) > maxStarts {
			return []string{""}, false
		}
		return out, exact
	case syntax.OpConcat:
		out := []string{""}
		for _, sub := range re.Sub {
			s, exact := literalStarts(sub)
			if len(out)*len(s) > maxStarts {
				return out, false
			}
			var next []string
			for _, a := range out {
				for _, b := range s {
					next = append(next, a+b)
				}
			}
			out = next
			if !exact {
				return out, false
			}
		}
		return out, true
	}
	return []string{""}, false
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
	// Count is the number of rules subtracted, and of empty user chains
	// whose declaration an entry matched.
	Count int
	// Entries names the entries that matched, sorted, once each.
	Entries []string
	// Worst is the worst RHEL 10 impact level (classify.Level; an empty
	// chain's declaration is native) of what the built-in platform list's
	// entries took away, "" for nothing: the platform's rules leave the
	// usage but still say what the node needs (lib/scan Result.Platform).
	// A rule an admin's entry, listed first, matched counts too when a
	// platform entry matches it as well.
	Worst string
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
	seen := map[string]bool{}
	keeping := slices.ContainsFunc(l.entries, func(e compiled) bool { return e.keepsLevel })
	// Most rules stay: then out.Rules is u.Rules, not a copy.
	out.Rules = inspect.Kept(u.Rules, func(r inspect.Rule) bool {
		var rendered *string
		once := func() string {
			if rendered == nil {
				t := text(r)
				rendered = &t
			}
			return *rendered
		}
		e := l.match(namespace, r, once, false)
		if e == nil {
			return true
		}
		name := e.Name
		res.Count++
		// An admin's entry takes the rule out of the usage, not what the
		// platform's rules need: one scoped to every pod namespace ("*"
		// matches the node's "") or a broad regexp, written for pods,
		// must not make the node ready.
		if e.keepsLevel || keeping && l.match(namespace, r, once, true) != nil {
			res.Worst = findings.WorseLevel(res.Worst, classify.Level(r))
		}
		if !seen[name] {
			seen[name] = true
			res.Entries = append(res.Entries, name)
		}
		if i, ok := chains[[3]string{string(r.Family), r.Table, r.Chain}]; ok {
			out.Chains[i].Remove(r)
		}
		return false
	})
	// A user chain is usage by its mere existence: one left without rules
	// is taken away by an entry matching its declaration, "-N NAME" (as
	// iptables -S prints it), so a platform's empty canary chains can be
	// allowlisted too.
	for i, c := range out.Chains {
		if !c.User || c.Drop || c.Rules > 0 {
			continue
		}
		e := l.matchChain(namespace, c)
		if e == nil {
			continue
		}
		name := e.Name
		out.Chains[i].User = false
		res.Count++
		if e.keepsLevel {
			res.Worst = findings.WorseLevel(res.Worst, findings.ImpactNative)
		}
		if !seen[name] {
			seen[name] = true
			res.Entries = append(res.Entries, name)
		}
	}
	sort.Strings(res.Entries)
	return out, res
}

// matchChain is Match for a user chain's declaration, "-N NAME"; "" for a
// name render would quote.
func (l *List) matchChain(namespace string, c classify.Chain) *compiled {
	if safetext.Name(c.Name, len(c.Name)) != c.Name {
		return nil
	}
	text := "-N " + c.Name
	r := inspect.Rule{Family: c.Family, Table: c.Table, Chain: c.Name}
	for i := range l.entries {
		e := &l.entries[i]
		if !e.scoped(namespace, r) || !e.fits(text) {
			continue
		}
		if e.matches(text) {
			return e
		}
	}
	return nil
}
