package report

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/iptables-alerter/iptables-alerter/internal/fileio"
)

// Expectation says which usage is expected, and why. Every field given
// must match (an empty field matches anything); at least one must be given.
type Expectation struct {
	// Namespace is a glob (path.Match syntax) on the pod's namespace.
	Namespace string `json:"namespace,omitempty"`
	// Owner is a glob on "Kind/name" of the owning workload, or on the name
	// alone when it holds no "/".
	Owner string `json:"owner,omitempty"`
	// Vendor is a recognised vendor's name ("istio"); "unknown" matches
	// usage with no vendor.
	Vendor string `json:"vendor,omitempty"`
	// Rule is text that an example rule contains; RuleRegexp a regular
	// expression (RE2) that an example rule matches.
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
	if e.Namespace == "" && e.Owner == "" && e.Vendor == "" && e.Rule == "" && e.RuleRegexp == "" {
		return errors.New("names nothing to match (namespace, owner, vendor, rule or ruleRegexp)")
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

// Match reports whether e expects it.
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
	if e.Vendor != "" && !hasVendor(it, e.Vendor) {
		return false
	}
	if e.Rule != "" || e.re != nil {
		hit := false
		for _, ex := range it.Examples {
			if (e.Rule == "" || strings.Contains(ex.Rule, e.Rule)) && (e.re == nil || e.re.MatchString(ex.Rule)) {
				hit = true
				break
			}
		}
		if !hit {
			return false
		}
	}
	return true
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

// Expect returns the reason of the first expectation matching it, "" for
// none.
func Expect(exps []Expectation, it Item) string {
	for i := range exps {
		if exps[i].Match(it) {
			return exps[i].Reason
		}
	}
	return ""
}
