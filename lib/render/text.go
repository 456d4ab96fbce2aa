package render

import (
	"sort"
	"strings"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
)

// Text renders one iptables-nft rule as canonical iptables-save-like text.
// It never panics and always returns text; see the package doc.
func Text(r inspect.Rule) (out string) {
	head := "-A " + safetext.Name(r.Chain, MaxField)
	defer func() {
		// The decoders bounds-check, but a panic in a third-party
		// unmarshaller must not cost the rule: it still counts, opaquely.
		if recover() != nil {
			out = head + " " + opaqueRule(r)
		}
	}()
	b := newBuilder(r.Family)
	for _, e := range r.Exprs {
		b.expr(e)
	}
	sort.SliceStable(b.parts, func(i, j int) bool {
		if b.parts[i].rank != b.parts[j].rank {
			return b.parts[i].rank < b.parts[j].rank
		}
		return b.parts[i].key < b.parts[j].key
	})
	var sb strings.Builder
	sb.WriteString(head)
	for _, p := range b.parts {
		if p.text == "" {
			continue
		}
		sb.WriteByte(' ')
		sb.WriteString(p.text)
	}
	return sb.String()
}

// opaqueRule is the last resort when decoding itself failed: every
// expression as an opaque token, in rule order.
func opaqueRule(r inspect.Rule) string {
	var s []string
	for _, e := range r.Exprs {
		s = append(s, opaque("expr", e.Name, e.Data))
	}
	if len(s) == 0 {
		return "-m unknown:empty"
	}
	return strings.Join(s, " ")
}
