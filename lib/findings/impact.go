package findings

import (
	"slices"
	"sort"
)

// Impact levels: what a RHEL 10 node's kernel needs to load a rule, not which
// binary wrote it (the iptables binary ships inside the image). lib/classify
// decides the level of each rule; docs/rhel10.md gives the facts behind them.
const (
	// ImpactLegacy: an x_tables rule; RHEL 10 has no ip_tables, ip6_tables
	// or arp_tables modules, so it breaks.
	ImpactLegacy = "legacy"
	// ImpactXt: an iptables-nft rule holding an xt match or target; it needs
	// nft_compat and xt_* modules, which RHEL 10 moved to
	// kernel-modules-extra: it breaks unless that package is installed.
	ImpactXt = "xt"
	// ImpactNative: an iptables-nft rule of native nftables expressions only;
	// it keeps loading, only the tooling is deprecated.
	ImpactNative = "native"
)

// ImpactLevels lists the levels worst first; metrics and reports use exactly
// these values, so a label on them has three values.
var ImpactLevels = []string{ImpactLegacy, ImpactXt, ImpactNative}

// Impact counts a finding's rules per impact level.
type Impact struct {
	Legacy int `json:"legacy"`
	Xt     int `json:"xt"`
	Native int `json:"native"`
}

// Count returns the count of one level, 0 for anything else.
func (i Impact) Count(level string) int {
	switch level {
	case ImpactLegacy:
		return i.Legacy
	case ImpactXt:
		return i.Xt
	case ImpactNative:
		return i.Native
	}
	return 0
}

// Worst returns the worst level with a rule, "" when no rule was counted.
func (i Impact) Worst() string {
	for _, l := range ImpactLevels {
		if i.Count(l) > 0 {
			return l
		}
	}
	return ""
}

// ImpactRank orders levels for comparison: 0 is the worst; "" and anything
// that is not a level rank after every level.
func ImpactRank(level string) int {
	for i, l := range ImpactLevels {
		if l == level {
			return i
		}
	}
	return len(ImpactLevels)
}

// WorseLevel is the worse of two levels by ImpactRank ("" the mildest).
func WorseLevel(a, b string) string {
	if ImpactRank(b) < ImpactRank(a) {
		return b
	}
	return a
}

// Breaks reports whether a level stops loading on a default RHEL 10 node.
func Breaks(level string) bool { return level == ImpactLegacy || level == ImpactXt }

// BreakingFirst returns a copy of exs ordered by impact, worst first (legacy,
// xt, native, then not classified), keeping their order within a level: what
// a person reads first is what breaks. It picks nothing (PickExamples does).
func BreakingFirst(exs []Example) []Example {
	out := slices.Clone(exs)
	sort.SliceStable(out, func(i, j int) bool { return ImpactRank(out[i].Impact) < ImpactRank(out[j].Impact) })
	return out
}

// ImpactWords says a level in plain words, as a sentence without its
// full stop, for notes and reports.
func ImpactWords(level string) string {
	switch level {
	case ImpactLegacy:
		return "Breaks on RHEL 10: legacy x_tables rules, and RHEL 10 kernels have no ip_tables modules"
	case ImpactXt:
		return "Breaks on RHEL 10 unless kernel-modules-extra is installed: iptables-nft rules with xt matches or targets need nft_compat and xt_* modules"
	case ImpactNative:
		return "Keeps loading on RHEL 10: native nftables rules, written by the deprecated iptables tooling"
	}
	return "RHEL 10 impact not classified"
}

// Vendor label values besides VendorNames: VendorUnknown for usage that
// matches no vendor, VendorOther for a vendor the admin added to the table.
const (
	VendorUnknown = "unknown"
	VendorOther   = "other"
)

// VendorNames are the vendor table's keys, the only vendor names a metrics
// label may carry: Prometheus series stay bounded whatever the admin's
// table or the file hold. The vendor table uses exactly these names.
var VendorNames = []string{
	"istio",               // sidecar: ISTIO_* chains, uid 1337
	"istio-ambient",       // ambient in-pod rules: ISTIO_PRERT, ISTIO_OUTPUT, marks 0x539/0x111
	"linkerd",             // PROXY_INIT_*
	"consul",              // CONSUL_PROXY_*, CONSUL_DNS_REDIRECT
	"kuma",                // Kuma and Kong Mesh: KUMA_MESH_*
	"osm",                 // Open Service Mesh: OSM_PROXY_*
	"appmesh",             // AWS App Mesh: APPMESH_*
	"azure-monitor-agent", // DNAT of 169.254.169.254:80 to 127.0.0.1:8421
	"docker",              // Docker-in-Docker: DOCKER, DOCKER-USER, DOCKER-ISOLATION-*
	"kube-proxy",          // KUBE-* chains in a pod netns
	"calico",              // cali-*
	"cilium",              // CILIUM_*
	"chaos-mesh",          // chaos-daemon's NetworkChaos: CHAOS-INPUT, CHAOS-OUTPUT
}

// VendorLabels gives the metrics label values of a record's vendors:
// known names as they are, any other name VendorOther, and VendorUnknown
// when the record names none. Sorted, without repeats.
func VendorLabels(vs []Vendor) []string {
	if len(vs) == 0 {
		return []string{VendorUnknown}
	}
	seen := map[string]bool{}
	var out []string
	for _, v := range vs {
		l := VendorOther
		if slices.Contains(VendorNames, v.Name) {
			l = v.Name
		}
		if !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}
	sort.Strings(out)
	return out
}

// Vendor names a known rule framework recognised in the pod's rules and what
// to change so it stops using iptables. Values come from a vendor table
// (lib/classify's), not from the pod; Encode bounds them all the same since
// an admin can extend that table.
type Vendor struct {
	// Name is the table's short key ("istio", "linkerd"): metrics labels use it.
	Name string `json:"name"`
	// Hint says what to change and from which release that works.
	Hint string `json:"hint"`
	// Doc links the vendor's documentation of the change.
	Doc string `json:"doc"`
}

// Bounds of the vendor list; a pod matching more vendors than MaxVendors is
// unusual enough that the first ones tell the story.
const (
	MaxVendors    = 4
	maxVendorName = 32
	maxHint       = 320
)

// Levels is the record's rule count per level: Impact, with the legacy
// count taken from Legacy when the hook did not classify (every x_tables
// rule is at the legacy level, classified or not).
func (r Record) Levels() Impact {
	i := r.Impact
	if i.Legacy == 0 {
		i.Legacy = r.Legacy.Rules
	}
	return i
}

// WorstLevel is the record's worst impact level: Worst when the hook
// classified the rules, else legacy when it saw legacy usage (that level
// needs no classification), else "" (not known).
func (r Record) WorstLevel() string {
	if r.Worst != "" {
		return r.Worst
	}
	if r.Legacy.Used() {
		return ImpactLegacy
	}
	return ""
}
