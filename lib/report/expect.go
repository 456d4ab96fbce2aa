package report

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/iptables-alerter/iptables-alerter/internal/fileio"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// Expectation says which usage is expected, and why. Namespace, Owner and
// Vendor choose the findings (an empty field matches any); Level and the
// rule fields narrow what of their usage it covers, which is everything
// when none is given. At least one field must be given. A workload is
// expected only when its usage at its worst level is covered (Cover,
// GroupItems): a rule that is not covered keeps it failing.
type Expectation struct {
	// Namespace is a glob (path.Match syntax) on the pod's namespace.
	Namespace string `json:"namespace,omitempty"`
	// Owner is a glob on "Kind/name" of the owning workload, or on the name
	// alone when it holds no "/".
	Owner string `json:"owner,omitempty"`
	// Vendor is a recognised vendor's name ("istio"); "unknown" matches
	// usage with no vendor.
	Vendor string `json:"vendor,omitempty"`
	// Level (legacy, xt or native) covers the usage at that level only.
	Level string `json:"level,omitempty"`
	// Rule is text that an example rule contains; RuleRegexp a regular
	// expression (RE2) that an example rule matches. Either covers only
	// the example rules it matches, and a level only when the finding
	// shows every rule of that level as an example (Cover).
	Rule       string `json:"rule,omitempty"`
	RuleRegexp string `json:"ruleRegexp,omitempty"`
	// Reason is required: it is printed with what it silences.
	Reason string `json:"reason"`

	re *regexp.Regexp
}

// Expectations is the file: `expected:` and a list.
type Expectations struct {
	Expected []Expectation `json:"expected"`
}

// maxExpectations bounds the file read.
const maxExpectations = 4 << 20

// LoadExpectations reads and checks an expectations file (YAML or JSON).
// Unknown fields are errors: a typo must not silently expect everything.
func LoadExpectations(p string) ([]Expectation, error) {
	data, err := fileio.ReadFile(p, maxExpectations)
	if err != nil {
		return nil, fmt.Errorf("read expectations: %w", err)
	}
	var f Expectations
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, fmt.Errorf("decode expectations %q: %w", p, err)
	}
	for i := range f.Expected {
		if err := f.Expected[i].compile(); err != nil {
			return nil, fmt.Errorf("expectations %q entry %d: %w", p, i+1, err)
		}
	}
	return f.Expected, nil
}

func (e *Expectation) compile() error {
	if e.Namespace == "" && e.Owner == "" && e.Vendor == "" && e.Level == "" && e.Rule == "" && e.RuleRegexp == "" {
		return errors.New("names nothing to match (namespace, owner, vendor, level, rule or ruleRegexp)")
	}
	if e.Level != "" && findings.ImpactRank(e.Level) == len(findings.ImpactLevels) {
		return fmt.Errorf("level %q: want one of %s", e.Level, strings.Join(findings.ImpactLevels, ", "))
	}
	if strings.TrimSpace(e.Reason) == "" {
		return errors.New("no reason")
	}
	for _, g := range []string{e.Namespace, e.Owner} {
		if _, err := path.Match(g, ""); err != nil {
			return fmt.Errorf("glob %q: %w", g, err)
		}
	}
	if e.RuleRegexp != "" {
		re, err := regexp.Compile(e.RuleRegexp)
		if err != nil {
			return fmt.Errorf("ruleRegexp: %w", err)
		}
		e.re = re
	}
	return nil
}

// Match reports whether it is a finding of what e chooses: namespace,
// owner and vendor. What of its usage e covers is Cover's.
func (e *Expectation) Match(it Item) bool {
	if e.Namespace != "" && !glob(e.Namespace, it.Namespace) {
		return false
	}
	if e.Owner != "" {
		target := it.Owner.String()
		if !strings.Contains(e.Owner, "/") {
			target = it.Owner.Name
		}
		if !glob(e.Owner, target) {
			return false
		}
	}
	return e.Vendor == "" || hasVendor(it, e.Vendor)
}

// ruled reports whether e covers only the rules it matches.
func (e *Expectation) ruled() bool { return e.Rule != "" || e.RuleRegexp != "" }

func (e *Expectation) matchRule(rule string) bool {
	if e.Rule != "" && !strings.Contains(rule, e.Rule) {
		return false
	}
	if e.re != nil || e.RuleRegexp == "" {
		return e.re == nil || e.re.MatchString(rule)
	}
	// Not loaded from a file: compiled here, a bad one matching nothing.
	ok, err := regexp.MatchString(e.RuleRegexp, rule)
	return err == nil && ok
}

// Cover reports whether exps together cover it's usage at level ("" for
// usage not classified), with the reasons of the expectations that do, in
// file order. An expectation matching it covers the level when it names
// neither rule nor another level. Rule expectations cover it when the
// finding shows every rule at the level as an example and each is matched
// by one of them: a finding carries at most findings.MaxExamples examples,
// picked for what they show, so a rule not shown may be anything, and
// unclassified rules are never all shown. Legacy rules are shown decoded,
// but their level counts two entries more per user chain (its head and
// its closing RETURN), so rules cover it only in tables without one. An unknown look holds no usage to cover.
func Cover(exps []Expectation, it Item, level string) ([]string, bool) {
	if it.State == findings.StateUnknown {
		return nil, false
	}
	var ruled []*Expectation
	for i := range exps {
		e := &exps[i]
		if !e.Match(it) || e.Level != "" && e.Level != level {
			continue
		}
		if !e.ruled() {
			return []string{e.Reason}, true
		}
		ruled = append(ruled, e)
	}
	var shown []string
	for _, ex := range it.Examples {
		if ex.Impact == level {
			shown = append(shown, ex.Rule)
		}
	}
	// A look that stopped early (Truncated) counts a lower bound: its
	// examples cannot be known to show every rule.
	if level == "" || len(ruled) == 0 || len(shown) == 0 || len(shown) != it.Impact.Count(level) || it.Truncated {
		return nil, false
	}
	used := make([]bool, len(ruled))
	for _, rule := range shown {
		hit := false
		for i, e := range ruled {
			if e.matchRule(rule) {
				hit, used[i] = true, true
			}
		}
		if !hit {
			return nil, false
		}
	}
	var reasons []string
	for i, e := range ruled {
		if used[i] {
			reasons = append(reasons, e.Reason)
		}
	}
	return reasons, true
}

func glob(pattern, s string) bool {
	ok, err := path.Match(pattern, s)
	return err == nil && ok
}

func hasVendor(it Item, name string) bool {
	if len(it.Vendors) == 0 {
		return name == "unknown"
	}
	for _, v := range it.Vendors {
		if v.Name == name {
			return true
		}
	}
	return false
}
