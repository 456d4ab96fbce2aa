// Package modules names the kernel modules a finding's rules need, and
// which RHEL 10 minor release ships each of them in which kernel package.
//
// It takes a classify.Usage and gives a findings.Modules (Of): per impact
// level, the modules the kernel loads for the level's rules. An xt match
// or target of an iptables-nft rule needs nft_compat and the module the
// kernel requests for the extension (xt_request_find_match asks for the
// alias "ipt_NAME", "ip6t_NAME", "arpt_NAME" or "ebt_NAME" by family,
// which the module's MODULE_ALIAS lines answer: -m owner is xt_owner,
// REDIRECT xt_REDIRECT, -m mark and MARK both xt_mark, SNAT and DNAT
// xt_nat, -p tcp's and -p icmp's own matches xt_tcpudp). A
// legacy table needs its family's x_tables module (ip_tables, ip6_tables,
// arp_tables) and its table module (iptable_nat, ...), and its rules'
// extensions as above. A native rule needs nf_tables and, for expressions
// kept out of nf_tables itself, their nft_* module (nft_ct, nft_reject_ipv4,
// nft_chain_nat for a nat table's chains...). Only the modules a rule names
// are listed, not their dependencies (nf_nat, nf_conntrack, x_tables).
//
// The release table (releases.json, Table) says per release and module
// which package ships it: kernel-modules-core, kernel-modules,
// kernel-modules-extra or absent, each entry with the source that says
// so. Only a counted source verifies an entry (Red Hat's documentation and
// release notes, OpenShift's and MicroShift's own changes, CentOS Stream
// kernel packaging); field reports of other projects are kept as Seen and
// the entry stays "package unverified". Docs: docs/rhel10.md.
package modules
