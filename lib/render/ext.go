package render

import "github.com/iptables-alerter/iptables-alerter/lib/inspect"

// Extension is an xt match or target of an nftables rule, as nft_compat
// holds it: Kind "match" or "target", the extension's name and revision.
type Extension struct {
	Kind string
	Name string
	Rev  uint32
}

// Extensions lists the rule's xt matches and targets in order; an
// expression kept without its data (beyond inspect's detail bound) or that
// does not parse gives none (lib/modules still counts the rule's
// nft_compat from the expression's name).
func Extensions(r inspect.Rule) []Extension {
	var out []Extension
	for _, e := range r.Exprs {
		if e.Name != "match" && e.Name != "target" {
			continue
		}
		if x, ok := parseXT(e.Data); ok {
			out = append(out, Extension{Kind: e.Name, Name: x.name, Rev: x.rev})
		}
	}
	return out
}
