package classify

import (
	"sort"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
)

// Chain is the usage found in one chain.
type Chain struct {
	Family inspect.Family
	Table  string
	Name   string
	// User is set for a user-defined chain in a shaped table: its mere
	// existence is usage.
	User bool
	// Drop is set for a shaped base chain whose policy is drop, and for an
	// ebtables-nft user chain whose policy (-P DROP) is.
	Drop bool
	// Rules counts the chain's rules that are usage, XT those of them
	// holding an xt match or target (impact level xt; the rest are native).
	Rules int
	XT    int
	// Sum stands for the chain's rules (inspect.Chain.Sum) in fingerprints.
	Sum uint64
}

// Used reports whether the chain still holds usage (after an allowlist took
// rules away).
func (c Chain) Used() bool { return c.User || c.Drop || c.Rules > 0 }

// Legacy is one legacy x_tables table holding more than its untouched
// entries, or a built-in chain with a drop policy; Rules counts the extra
// entries (rules, and two per user chain).
type Legacy struct {
	Family inspect.Family
	Table  string
	Rules  int
	// Chains names the table's user chains where inspect read them.
	Chains []string
	// Policies lists its built-in chains whose policy is not ACCEPT.
	Policies []inspect.LegacyChain
	// Cut is set when Usage.LegacyRules lacks some of its rules.
	Cut bool
	// Sum stands for the table's rules in fingerprints
	// (inspect.LegacyTable.Sum).
	Sum uint64
}

// Usage is what classify found.
type Usage struct {
	Chains []Chain
	// Rules are the kept rules (inspect's detail) that are usage, in dump
	// order; the allowlist and the examples work on these.
	Rules  []inspect.Rule
	Legacy []Legacy
	// Tables counts the chains of every shaped table (the save tools list
	// it), by "family name", as the save tools' ":" lines do: every
	// built-in chain of the table (listed even before iptables-nft creates
	// it), plus every user chain.
	Tables map[string]int
	// LegacyRules are the legacy tables' rules inspect read, in table and
	// rule order; every one is usage, at level findings.ImpactLegacy.
	LegacyRules []inspect.LegacyRule
	// Truncated carries the snapshot's flag: counts are a lower bound.
	// NftPartial and LegacyPartial carry the snapshot's: which part was
	// not read whole.
	Truncated                 bool
	NftPartial, LegacyPartial bool
}

// Classify finds the iptables usage in a snapshot.
func Classify(s inspect.Snapshot) Usage {
	shaped := shapedTables(s.Chains)
	u := Usage{Truncated: s.Truncated, NftPartial: s.NftPartial, LegacyPartial: s.LegacyPartial, Tables: map[string]int{}}
	for _, c := range s.Chains {
		isShaped := shaped[tableKey{c.Family, c.Table}]
		ch := Chain{Family: c.Family, Table: c.Table, Name: c.Name, Sum: c.Sum}
		if isShaped {
			k := string(c.Family) + " " + c.Table
			if _, ok := u.Tables[k]; !ok {
				u.Tables[k] = len(templates[tableKey{c.Family, c.Table}])
			}
			if !c.Base {
				u.Tables[k]++
			}
			// A chain holding rules, none of which an iptables client
			// could have written, is native whatever its name: neither
			// its existence nor its policy is usage.
			native := c.Rules > 0 && c.NativeRules == c.Rules
			ch.User = !c.Base && !native
			// An ebtables-nft user chain's policy is a rule inspect
			// set apart (PolicyRule): shown as the chain's, like a
			// base chain's.
			ch.Drop = (c.Base || c.PolicyRule) && c.Policy == 0 && !native
			ch.Rules = c.Rules - c.NativeRules
		} else {
			ch.Rules = c.XTRules
		}
		ch.XT = c.XTRules
		if ch.Used() {
			u.Chains = append(u.Chains, ch)
		}
	}
	// Most kept rules are usage: then u.Rules is s.Rules, not a copy.
	u.Rules = inspect.Kept(s.Rules, func(r inspect.Rule) bool {
		return shaped[tableKey{r.Family, r.Table}] && !r.Native || hasXT(r)
	})
	for _, l := range s.Legacy {
		untouched := l.Untouched()
		// A built-in chain's drop policy is usage without an entry of
		// its own, as an nftables chain's is (Chain.Drop).
		switch {
		case l.Entries > untouched || len(l.Policies) > 0:
			u.Legacy = append(u.Legacy, Legacy{Family: l.Family, Table: l.Name, Rules: max(int(l.Entries)-int(untouched), 0), Chains: l.Chains,
				Policies: l.Policies, Cut: l.Cut, Sum: l.Sum})
		case l.Cut:
			// An untouched table whose entries could not be read: its
			// policies are not known, so neither is whether it is usage:
			// never clean (as inspect marks a failed legacy look).
			u.LegacyPartial, u.Truncated = true, true
		}
	}
	u.LegacyRules = s.LegacyRules
	sort.Slice(u.Chains, func(i, j int) bool { return chainLess(u.Chains[i], u.Chains[j]) })
	return u
}

// shapedTables finds the tables whose family and name iptables uses, whose
// base chains all follow the template and none of whose rules makes the
// save tools refuse the table (inspect.Chain.Foreign).
func shapedTables(chains []inspect.Chain) map[tableKey]bool {
	shaped := map[tableKey]bool{}
	for _, c := range chains {
		k := tableKey{c.Family, c.Table}
		tmpl, ok := templates[k]
		if !ok {
			continue
		}
		if _, seen := shaped[k]; !seen {
			shaped[k] = true
		}
		if c.Foreign {
			shaped[k] = false
		}
		if !c.Base {
			continue
		}
		want, ok := tmpl[c.Name]
		if !ok || want.hook != c.Hook || want.typ != c.Type || want.priority != c.Priority {
			shaped[k] = false
		}
	}
	return shaped
}

// Remove takes one usage rule away from the chain's counts (the allowlist
// took it).
func (c *Chain) Remove(r inspect.Rule) {
	if c.Rules == 0 {
		return
	}
	c.Rules--
	if hasXT(r) && c.XT > 0 {
		c.XT--
	}
}

// Level is the RHEL 10 impact level of an nftables rule: xt when it holds
// an xt match or target (it needs nft_compat and xt_* modules), native
// otherwise. Legacy x_tables rules are never nftables rules: their level
// is findings.ImpactLegacy, counted per table.
func Level(r inspect.Rule) string {
	if hasXT(r) {
		return findings.ImpactXt
	}
	return findings.ImpactNative
}

func hasXT(r inspect.Rule) bool {
	for _, e := range r.Exprs {
		if e.Name == "match" || e.Name == "target" {
			return true
		}
	}
	return false
}

func chainLess(a, b Chain) bool {
	if a.Family != b.Family {
		return a.Family < b.Family
	}
	if a.Table != b.Table {
		return a.Table < b.Table
	}
	return a.Name < b.Name
}

// Empty reports whether no usage is left.
func (u Usage) Empty() bool {
	for _, c := range u.Chains {
		if c.Used() {
			return false
		}
	}
	return len(u.Legacy) == 0
}
