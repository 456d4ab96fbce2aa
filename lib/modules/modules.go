package modules

import (
	"maps"
	"slices"

	"github.com/iptables-alerter/iptables-alerter/lib/classify"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"github.com/iptables-alerter/iptables-alerter/lib/render"
)

// Of names per level the modules the usage's rules need. Rules beyond
// inspect's detail bound are known only by their counts: an xt one still
// needs nft_compat (its chain counts it), its extension is not known.
func Of(u classify.Usage) findings.Modules {
	sets := map[string]map[string]bool{findings.ImpactLegacy: {}, findings.ImpactXt: {}, findings.ImpactNative: {}}
	add := func(level string, names ...string) {
		for _, n := range names {
			sets[level][n] = true
		}
	}
	for _, r := range u.Rules {
		add(classify.Level(r), Rule(r)...)
	}
	for _, c := range u.Chains {
		if !c.Used() {
			continue
		}
		if c.XT > 0 {
			add(findings.ImpactXt, "nft_compat")
		}
		if c.Rules > c.XT || c.User || c.Drop {
			add(findings.ImpactNative, "nf_tables")
		}
	}
	for _, l := range u.Legacy {
		add(findings.ImpactLegacy, LegacyTable(l.Family, l.Table)...)
	}
	for _, r := range u.LegacyRules {
		ext := func(kind, name string) {
			if name != "" {
				add(findings.ImpactLegacy, Extension(r.Family, kind, name)...)
			}
		}
		for _, x := range r.Matches {
			ext("match", x.Name)
		}
		ext("target", r.Target.Name)
	}
	leftOut := 0
	list := func(level string) []string {
		out := slices.Sorted(maps.Keys(sets[level]))
		if len(out) <= findings.MaxModules {
			return out
		}
		// Past the bound the modules the release table verifies (moved
		// to a package, or gone) go first: they are the ones a reader
		// acts on, and by name ebt_*, ip6t_* and ipt_* came before
		// nft_compat and xt_CT. Then the ones judged at all: nf_tables
		// and the nft_* modules RHEL 10 keeps are never shown
		// (Modules.Judged), and by name they came before every xt_*.
		rank := func(n string) int {
			switch {
			case Releases.Verified(n):
				return 0
			case !findings.KeptModule(n):
				return 1
			}
			return 2
		}
		keep := slices.Clone(out)
		slices.SortStableFunc(keep, func(a, b string) int { return rank(a) - rank(b) })
		leftOut += len(keep) - findings.MaxModules
		keep = keep[:findings.MaxModules]
		slices.Sort(keep)
		return keep
	}
	return findings.Modules{Legacy: list(findings.ImpactLegacy), Xt: list(findings.ImpactXt), Native: list(findings.ImpactNative), LeftOut: leftOut}
}

// Rule names the modules one nftables rule needs, sorted, without
// repeats: nf_tables, nft_chain_nat for a rule of a nat table (its base
// chains are of type nat), the nft_* module of each expression kept out of
// nf_tables, and for an xt match or target nft_compat and the extension's
// module.
func Rule(r inspect.Rule) []string {
	out := []string{"nf_tables"}
	if r.Table == "nat" && (r.Family == inspect.IP || r.Family == inspect.IP6 || r.Family == inspect.INet) {
		out = append(out, "nft_chain_nat")
	}
	for _, e := range r.Exprs {
		switch e.Name {
		case "match", "target":
			out = append(out, "nft_compat")
		default:
			out = append(out, nativeModules(r.Family, e.Name)...)
		}
	}
	for _, x := range render.Extensions(r) {
		out = append(out, Extension(r.Family, x.Kind, x.Name)...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// LegacyTable names the modules a legacy x_tables table needs: its
// family's x_tables module and the table's own.
func LegacyTable(fam inspect.Family, table string) []string {
	switch fam {
	case inspect.IP:
		return []string{"ip_tables", "iptable_" + table}
	case inspect.IP6:
		return []string{"ip6_tables", "ip6table_" + table}
	case inspect.ARP:
		return []string{"arp_tables", "arptable_" + table}
	}
	return nil
}

// Extension names the module (and, for ipset matches, the ipset core) the
// kernel loads for an xt extension of kind "match" or "target" in a table
// of family fam. The name is the kernel's (it accepted the rule), never
// the pod's text.
func Extension(fam inspect.Family, kind, name string) []string {
	if fam == inspect.Bridge && ebtables[kind][name] {
		return []string{"ebt_" + name}
	}
	if m, ok := perFamily[name]; ok {
		if f, ok := m[fam]; ok {
			return []string{f}
		}
	}
	if m, ok := extensions[name]; ok {
		return m
	}
	// Most extensions live in xt_NAME: the kernel's naming rule for
	// everything net/netfilter holds.
	return []string{"xt_" + name}
}

// ebtables lists ebtables' own extensions (net/bridge/netfilter/ebt_*.c,
// module ebt_NAME) by the list the kernel keeps them in: the watchers log
// and nflog are targets. Any other extension in a bridge table is an xt
// one of no family, which xt_find_match and xt_find_target fall back to
// (-m comment is xt_comment), and a match named mark is xt_mark: the
// ebtables mark match is mark_m, and the target mark is not a match.
var ebtables = map[string]map[string]bool{
	"match": {"802_3": true, "among": true, "arp": true, "ip": true, "ip6": true, "limit": true, "mark_m": true,
		"pkttype": true, "stp": true, "vlan": true},
	"target": {"arpreply": true, "dnat": true, "log": true, "mark": true, "nflog": true, "redirect": true, "snat": true},
}

// extensions maps the xt extension names whose module is not xt_NAME (or
// that need a second module) to their modules, as their MODULE_ALIAS
// lines in net/netfilter/*.c say.
var extensions = map[string][]string{
	"tcp": {"xt_tcpudp"}, "udp": {"xt_tcpudp"}, "udplite": {"xt_tcpudp"},
	// Linux 6.x moved the icmp and icmp6 matches out of ip_tables and
	// ip6_tables into xt_tcpudp (MODULE_ALIAS("ipt_icmp")), so that
	// iptables-nft need not load the legacy modules; RHEL 10 runs 6.12.
	"icmp": {"xt_tcpudp"}, "icmp6": {"xt_tcpudp"},
	"MARK": {"xt_mark"}, "CONNMARK": {"xt_connmark"},
	"SNAT": {"xt_nat"}, "DNAT": {"xt_nat"},
	"NOTRACK": {"xt_CT"},
	"set":     {"xt_set", "ip_set"}, "SET": {"xt_set", "ip_set"},
	"tos": {"xt_dscp"}, "TOS": {"xt_DSCP"},
	"ttl": {"xt_hl"}, "hl": {"xt_hl"}, "TTL": {"xt_HL"}, "HL": {"xt_HL"},
	"state": {"xt_state"},
	"dst":   {"ip6t_hbh"}, "hbh": {"ip6t_hbh"},
	"frag": {"ip6t_frag"}, "rt": {"ip6t_rt"}, "ipv6header": {"ip6t_ipv6header"},
	"mh": {"ip6t_mh"}, "eui64": {"ip6t_eui64"}, "srh": {"ip6t_srh"},
	"CLUSTERIP": {"ipt_CLUSTERIP"}, "ECN": {"ipt_ECN"},
	"mangle": {"arpt_mangle"},
}

// perFamily maps the extensions that are one module per family (ip and
// ip6: net/ipv4/netfilter/ipt_*.c, net/ipv6/netfilter/ip6t_*.c).
var perFamily = map[string]map[inspect.Family]string{
	"REJECT":   {inspect.IP: "ipt_REJECT", inspect.IP6: "ip6t_REJECT"},
	"ah":       {inspect.IP: "ipt_ah", inspect.IP6: "ip6t_ah"},
	"rpfilter": {inspect.IP: "ipt_rpfilter", inspect.IP6: "ip6t_rpfilter"},
	"SYNPROXY": {inspect.IP: "ipt_SYNPROXY", inspect.IP6: "ip6t_SYNPROXY"},
	// ip6t_NPT.c registers the targets SNPT and DNPT; no extension is
	// named NPT.
	"SNPT": {inspect.IP6: "ip6t_NPT"},
	"DNPT": {inspect.IP6: "ip6t_NPT"},
}

// nativeModules names the module of a native expression kept out of
// nf_tables (whose own object holds payload, cmp, immediate, bitwise,
// byteorder, range, lookup, dynset, meta, rt, exthdr, last, counter,
// objref and inner since Linux 6.x; RHEL 10 runs 6.12).
func nativeModules(fam inspect.Family, name string) []string {
	switch name {
	case "ct", "notrack":
		return []string{"nft_ct"}
	case "limit", "log", "quota", "numgen", "hash", "socket", "queue", "connlimit", "osf", "synproxy", "xfrm", "tunnel", "tproxy",
		"nat", "masq", "redir":
		return []string{"nft_" + name}
	case "reject", "fib", "dup":
		suffix := map[inspect.Family]string{inspect.IP: "ipv4", inspect.IP6: "ipv6", inspect.INet: "inet", inspect.Bridge: "bridge", inspect.Netdev: "netdev"}[fam]
		if suffix == "" {
			return []string{"nft_" + name}
		}
		if name == "dup" && fam == inspect.Netdev {
			return []string{"nft_dup_netdev"}
		}
		return []string{"nft_" + name + "_" + suffix}
	}
	return nil
}
