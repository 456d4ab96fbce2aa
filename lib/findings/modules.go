package findings

import (
	"slices"
	"strings"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
)

// Modules names, per impact level, the kernel modules the level's rules
// need to load (lib/modules decides them from the decoded rules: nft_compat
// and the xt_* module of every xt extension, ip_tables and its table
// modules for legacy tables, nf_tables and any separate nft_* module of a
// native expression). Each list is sorted, without repeats; empty when the
// level has no rule. Lines of older writers have none: read as empty (not
// known), never as "needs nothing".
type Modules struct {
	Legacy []string `json:"legacy"`
	Xt     []string `json:"xt"`
	Native []string `json:"native"`
	// LeftOut counts the names the lists leave out, past MaxModules a
	// level (lib/modules keeps the ones its release table verifies);
	// absent when none (and in lines of older writers, which cut without
	// saying so).
	LeftOut int `json:"left_out,omitempty"`
}

// Bounds of the module lists: module names are the kernel's (an xt
// extension must be registered for the kernel to accept the rule), but a
// reader must not trust the line.
const (
	MaxModules    = 24
	maxModuleName = 32
)

// Level returns one level's list, nil for anything else.
func (m Modules) Level(level string) []string {
	switch level {
	case ImpactLegacy:
		return m.Legacy
	case ImpactXt:
		return m.Xt
	case ImpactNative:
		return m.Native
	}
	return nil
}

// All is every module of every level, sorted, without repeats.
func (m Modules) All() []string {
	var out []string
	for _, l := range ImpactLevels {
		out = append(out, m.Level(l)...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// KeptModule tells nf_tables and the native nft_* modules, which every
// RHEL 10 release keeps, from the ones it may lack (nft_compat is one).
func KeptModule(n string) bool {
	return n == "nf_tables" || strings.HasPrefix(n, "nft_") && n != "nft_compat"
}

// Judged are the modules a RHEL 10 release may lack: those of the levels
// that break (legacy, xt), without nf_tables and the native nft_* modules,
// which RHEL 10 keeps (it runs nftables only); nft_compat is judged.
// Sorted, without repeats.
func (m Modules) Judged() []string {
	var out []string
	for _, n := range append(slices.Clone(m.Legacy), m.Xt...) {
		if KeptModule(n) {
			continue
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// bounded is m with every list present (never null), at most MaxModules
// names of at most maxModuleName bytes each, and LeftOut counting what it
// cut besides what the lists already left out. lib/modules.Of chooses
// which names to keep; here a longer list loses its last names.
func (m Modules) bounded() Modules {
	left := max(m.LeftOut, 0)
	cut := func(l []string) []string {
		out := make([]string, 0, min(len(l), MaxModules))
		for _, s := range l[:min(len(l), MaxModules)] {
			out = append(out, safetext.Cut(s, maxModuleName))
		}
		left += len(l) - len(out)
		return out
	}
	return Modules{Legacy: cut(m.Legacy), Xt: cut(m.Xt), Native: cut(m.Native), LeftOut: left}
}
