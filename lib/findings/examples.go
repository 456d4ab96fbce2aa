package findings

import (
	"sort"
	"strings"
)

// MaxExamples bounds the example rules of a record.
const MaxExamples = 5

var natTargets = []string{"-j DNAT", "-j SNAT", "-j MASQUERADE", "-j REDIRECT", "-j TPROXY"}

var builtinTargets = map[string]bool{
	"ACCEPT": true, "DROP": true, "RETURN": true, "REJECT": true, "QUEUE": true,
	"DNAT": true, "SNAT": true, "MASQUERADE": true, "REDIRECT": true, "TPROXY": true,
	"MARK": true, "CONNMARK": true, "LOG": true, "CT": true, "NOTRACK": true,
	"NFQUEUE": true, "TCPMSS": true, "CLASSIFY": true, "DSCP": true, "TOS": true,
	"TTL": true, "HL": true, "NFLOG": true, "CHECKSUM": true, "TRACE": true, "AUDIT": true,
}

// rank orders examples by how much they tell an admin: a jump into a user
// chain shows a whole rule framework (Istio, Linkerd), a NAT target shows
// traffic being redirected, the rest follow.
func rank(rule string) int {
	if strings.Contains(rule, " -g ") {
		return 0
	}
	if i := strings.LastIndex(rule, " -j "); i >= 0 {
		target, _, _ := strings.Cut(rule[i+4:], " ")
		if !builtinTargets[target] {
			return 0
		}
	}
	for _, t := range natTargets {
		if strings.Contains(rule, t) {
			return 1
		}
	}
	return 2
}

// PickExamples keeps at most MaxExamples examples so that every level
// present is shown: first the most telling rule of each level, worst level
// first, then the most telling of the others, again worst first. Record
// encoding drops examples from the end, so those of a level already shown
// go first. Within a rank the kernel's rule order decides.
func PickExamples(all []Example) []Example {
	ex := append([]Example(nil), all...)
	sort.SliceStable(ex, func(i, j int) bool { return rank(ex[i].Rule) < rank(ex[j].Rule) })
	var first, rest []Example
	shown := map[string]bool{}
	for _, e := range ex {
		if shown[e.Impact] {
			rest = append(rest, e)
			continue
		}
		shown[e.Impact] = true
		first = append(first, e)
	}
	first = BreakingFirst(first)
	rest = BreakingFirst(rest[:min(len(rest), max(0, MaxExamples-len(first)))])
	out := append(first, rest...)
	return out[:min(len(out), MaxExamples)]
}

// LeftOut counts per level the rules of Impact that Examples do not show.
// The legacy level counts x_tables entries (rules, and two per user chain),
// so what it leaves out includes those.
func (r Record) LeftOut() Impact {
	shown := map[string]int{}
	for _, e := range r.Examples {
		shown[e.Impact]++
	}
	return Impact{
		Legacy: max(0, r.Impact.Legacy-shown[ImpactLegacy]),
		Xt:     max(0, r.Impact.Xt-shown[ImpactXt]),
		Native: max(0, r.Impact.Native-shown[ImpactNative]),
	}
}
