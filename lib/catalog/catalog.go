package catalog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/fileio"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// DefaultPath is where the hook looks for the admin's vendor entries.
const DefaultPath = "/etc/iptables-alerter/vendors.json"

// Bounds of the admin's file: the hook reads it in the container-start
// path.
const (
	maxFileBytes = 256 << 10
	// MaxEntries caps the table, built-in entries included.
	MaxEntries = 64
	// maxPatterns caps the chain globs and rule patterns of one entry.
	maxPatterns = 32
)

// Entry is one vendor of the table.
type Entry struct {
	// Name is the short key findings and metrics carry (findings.VendorNames
	// for the built-in ones).
	Name string `json:"name"`
	// Title names the vendor for people.
	Title string `json:"title"`
	// Hint says what to change and from which release that works, for usage
	// in a pod's network namespace.
	Hint string `json:"hint"`
	// NodeHint is the same for usage in a node's own namespace (the
	// agent's node mode), where "a cluster inside the pod" would be wrong;
	// empty: Hint is worded for both.
	NodeHint string `json:"nodeHint"`
	// Doc links the vendor's documentation of the change.
	Doc string `json:"doc"`
	// Checked is the day (YYYY-MM-DD) the hint was last compared with its
	// Sources: a hint ages as vendors release. Every built-in entry has
	// one (TestHintsDated); optional in the admin's file.
	Checked string `json:"checked"`
	// Sources are the vendor's release notes, documentation or merged
	// changes the hint rests on (https links).
	Sources []string `json:"sources"`
	// Chains are chain names, exact or ending in "*" for a prefix; any
	// chain holding usage that fits one matches the entry.
	Chains []string `json:"chains"`
	// Rules are rule patterns; any rule fitting one matches the entry.
	Rules []Rule `json:"rules"`
	// Unless names entries that, when they match too, take this one's place
	// (Istio ambient and sidecar share ISTIO_OUTPUT; App Mesh's Envoy runs
	// as Istio's uid 1337).
	Unless []string `json:"unless"`
}

// Rule is a pattern on one rule's canonical text. Every field given must
// fit; an option's value fits when the text holds "OPTION VALUE" followed
// by a space, a "/" (mask or prefix length) or the end.
type Rule struct {
	Chain  string `json:"chain"`  // the rule's chain, exact or "PREFIX*"
	Target string `json:"target"` // -j TARGET
	UID    string `json:"uid"`    // -m owner --uid-owner UID
	Mark   string `json:"mark"`   // --mark, --set-xmark or --set-mark VALUE (mark or connmark)
	Dst    string `json:"dst"`    // -d ADDRESS
	Port   string `json:"port"`   // --dport PORT
	To     string `json:"to"`     // --to-destination or --to-ports VALUE
}

// Table is the vendor table in force.
type Table struct{ entries []Entry }

// Builtin is the built-in table: vendors.json, carried as a Go literal
// (builtin.go, which `make vendors` writes from it) so that nothing is
// decoded at run time. Each caller gets its own copy of the entry list,
// which Load changes.
func Builtin() *Table { return &Table{entries: slices.Clone(builtinTable)} }

// Load gives the built-in table merged with the admin's file at path: an
// admin entry replaces the built-in entry of its name, others are added, up
// to MaxEntries. A missing file is no change. On a broken file it returns
// the built-in table with the error, so usage is still attributed.
func Load(path string) (*Table, error) {
	t := Builtin()
	if path == "" {
		return t, nil
	}
	data, err := fileio.ReadFile(path, maxFileBytes)
	if errors.Is(err, os.ErrNotExist) {
		return t, nil
	}
	if err != nil {
		return t, fmt.Errorf("load vendors: %w", err)
	}
	admin, err := parse(data, path)
	if err != nil {
		return t, err
	}
	for _, e := range admin.entries {
		if i := slices.IndexFunc(t.entries, func(b Entry) bool { return b.Name == e.Name }); i >= 0 {
			t.entries[i] = e
			continue
		}
		if len(t.entries) >= MaxEntries {
			return t, fmt.Errorf("load vendors %q: more than %d entries with the built-in ones", path, MaxEntries)
		}
		t.entries = append(t.entries, e)
	}
	return t, nil
}

func parse(data []byte, name string) (*Table, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var file struct {
		Vendors []Entry `json:"vendors"`
	}
	if err := dec.Decode(&file); err != nil {
		return nil, fmt.Errorf("parse vendors %q: %w", name, err)
	}
	if len(file.Vendors) > MaxEntries {
		return nil, fmt.Errorf("parse vendors %q: %d entries, at most %d", name, len(file.Vendors), MaxEntries)
	}
	for i, e := range file.Vendors {
		switch {
		case e.Name == "" || e.Hint == "":
			return nil, fmt.Errorf("parse vendors %q: entry %d needs a name and a hint", name, i)
		case len(e.Chains) == 0 && len(e.Rules) == 0:
			return nil, fmt.Errorf("parse vendors %q: entry %q matches nothing (no chains, no rules)", name, e.Name)
		case len(e.Chains) > maxPatterns || len(e.Rules) > maxPatterns:
			return nil, fmt.Errorf("parse vendors %q: entry %q has over %d chains or rules", name, e.Name, maxPatterns)
		}
		if e.Checked != "" {
			if _, err := time.Parse(time.DateOnly, e.Checked); err != nil {
				return nil, fmt.Errorf("parse vendors %q: entry %q: checked %q is not a day (YYYY-MM-DD)", name, e.Name, e.Checked)
			}
		}
		for _, src := range e.Sources {
			if !strings.HasPrefix(src, "https://") {
				return nil, fmt.Errorf("parse vendors %q: entry %q: source %q is not an https link", name, e.Name, src)
			}
		}
		for _, r := range e.Rules {
			if r == (Rule{}) {
				return nil, fmt.Errorf("parse vendors %q: entry %q has an empty rule pattern", name, e.Name)
			}
		}
	}
	return &Table{entries: file.Vendors}, nil
}

// Names lists the table's entry names in table order.
func (t *Table) Names() []string {
	var out []string
	for _, e := range t.entries {
		out = append(out, e.Name)
	}
	return out
}

// RuleText is one rule given to Match: its chain and canonical text.
type RuleText struct {
	Chain string
	Text  string
}

// Match gives the vendors whose chains or rules the usage holds, in table
// order, at most findings.MaxVendors. chains are the names of every chain
// holding usage; rules the rules rendered for the finding.
func (t *Table) Match(chains []string, rules []RuleText) []findings.Vendor {
	if t == nil {
		return nil
	}
	// Quoted strings left out once, not once an entry.
	bare := make([]RuleText, len(rules))
	for i, r := range rules {
		r.Text = unquoted(r.Text)
		bare[i] = r
	}
	matched := map[string]bool{}
	for _, e := range t.entries {
		if e.matchesChains(chains) || e.matchesRules(bare) {
			matched[e.Name] = true
		}
	}
	var out []findings.Vendor
	emitted := map[string]bool{}
	for _, e := range t.entries {
		if !matched[e.Name] || emitted[e.Name] || slices.ContainsFunc(e.Unless, func(n string) bool { return matched[n] }) {
			continue
		}
		if len(out) == findings.MaxVendors {
			break
		}
		out = append(out, findings.Vendor{Name: e.Name, Hint: e.Hint, Doc: e.Doc})
		emitted[e.Name] = true
	}
	return out
}

// ForNode words vendors matched for a node's own namespace: a vendor whose
// hint is its entry's pod hint gets the entry's node hint. The record step
// words with the table in force; readers of records written before node
// hints (Events, report) with the built-in one (NodeWords). Others are
// kept: an admin's entry replaced since, or a hint from another table.
func (t *Table) ForNode(vendors []findings.Vendor) []findings.Vendor {
	if t == nil || len(vendors) == 0 {
		return vendors
	}
	out := slices.Clone(vendors)
	for i, v := range out {
		j := slices.IndexFunc(t.entries, func(e Entry) bool { return e.Name == v.Name })
		if j >= 0 && t.entries[j].NodeHint != "" && v.Hint == t.entries[j].Hint {
			out[i].Hint = t.entries[j].NodeHint
		}
	}
	return out
}

// builtin is the built-in table, copied once for NodeWords.
var builtin = sync.OnceValue(Builtin)

// NodeWords is ForNode with the built-in table, for readers of node
// findings: a record written before node hints carries the pod's.
func NodeWords(vendors []findings.Vendor) []findings.Vendor { return builtin().ForNode(vendors) }

func (e Entry) matchesChains(chains []string) bool {
	for _, c := range chains {
		for _, g := range e.Chains {
			if glob(g, c) {
				return true
			}
		}
	}
	return false
}

func (e Entry) matchesRules(rules []RuleText) bool {
	for _, r := range rules {
		for _, p := range e.Rules {
			if p.matches(r) {
				return true
			}
		}
	}
	return false
}

// glob matches a name exactly or, for a pattern ending in "*", by prefix.
func glob(pattern, name string) bool {
	if p, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(name, p)
	}
	return pattern == name
}

func (p Rule) matches(r RuleText) bool {
	return (p.Chain == "" || glob(p.Chain, r.Chain)) &&
		option(r.Text, p.Target, "-j") &&
		option(r.Text, p.UID, "--uid-owner") &&
		option(r.Text, p.Mark, "--mark", "--set-xmark", "--set-mark") &&
		option(r.Text, p.Dst, "-d") &&
		option(r.Text, p.Port, "--dport") &&
		option(r.Text, p.To, "--to-destination", "--to-ports")
}

// unquoted is a rule's text with every quoted string (render quotes a
// comment, and any name that is not plain, Go-style) emptied to "": the
// pod writes those, and a comment holding "-j DNAT ... --to-destination
// 127.0.0.1:8421" must not make its rule another vendor's.
func unquoted(text string) string {
	if !strings.Contains(text, `"`) {
		return text
	}
	var b strings.Builder
	in, escaped := false, false
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch {
		case !in:
			b.WriteByte(c)
			in = c == '"'
		case escaped:
			escaped = false
		case c == '\\':
			escaped = true
		case c == '"':
			b.WriteByte(c)
			in = false
		}
	}
	return b.String()
}

// option reports whether text holds one of the options with value (true
// for no value): "OPTION VALUE" at a word start, followed by a space, "/"
// or the end.
func option(text, value string, options ...string) bool {
	if value == "" {
		return true
	}
	for _, o := range options {
		needle := o + " " + value
		for rest, at := text, 0; ; {
			i := strings.Index(rest, needle)
			if i < 0 {
				break
			}
			start, end := at+i, at+i+len(needle)
			if (start == 0 || text[start-1] == ' ') && (end == len(text) || text[end] == ' ' || text[end] == '/') {
				return true
			}
			rest, at = rest[i+1:], at+i+1
		}
	}
	return false
}
