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

// PickExamples keeps the MaxExamples most telling examples, stable within a
// rank so the kernel's rule order decides ties.
func PickExamples(all []Example) []Example {
	ex := append([]Example(nil), all...)
	sort.SliceStable(ex, func(i, j int) bool { return rank(ex[i].Rule) < rank(ex[j].Rule) })
	if len(ex) > MaxExamples {
		ex = ex[:MaxExamples]
	}
	return ex
}
