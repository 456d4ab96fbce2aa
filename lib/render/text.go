package render

import (
	"sort"
	"strings"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
)

// Text renders one iptables-nft rule as canonical iptables-save-like text.
// It never panics and always returns text; see the package doc.
func Text(r inspect.Rule) string { return Names{}.Text(r) }

// Text is Text with the names n knows.
func (n Names) Text(r inspect.Rule) (out string) {
	head := "-A " + safetext.Name(r.Chain, MaxField)
	defer func() {
		// The decoders bounds-check, but a panic in a third-party
		// unmarshaller must not cost the rule: it still counts, opaquely.
		if recover() != nil {
			out = head + " " + opaqueRule(r)
		}
	}()
	b := newBuilder(r.Family)
	b.names = n
	for _, e := range r.Exprs {
		if b.targeted && b.after == 0 && e.Name != "counter" {
			// A counter after the target carries no meaning; anything
			// else there is marked and rendered after it
			// (afterTargetToken).
			b.after = rankAfter
			b.add(0, "", afterTargetToken)
		}
		b.expr(e)
	}
	return b.text(head)
}

// text orders the parts and joins them after head.
func (b *builder) text(head string) string {
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

// SetIndexes lists, once each, the ipset indexes that the xt set matches
// of rules refer to.
func SetIndexes(rules []inspect.Rule) []uint16 {
	seen := map[uint16]bool{}
	var ids []uint16
	for _, r := range rules {
		for _, e := range r.Exprs {
			if e.Name != "match" {
				continue
			}
			x, ok := parseXT(e.Data)
			if id, ok := setIndex(x, ok); ok && !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// LegacySetIndexes is SetIndexes for legacy rules.
func LegacySetIndexes(rules []inspect.LegacyRule) []uint16 {
	seen := map[uint16]bool{}
	var ids []uint16
	for _, r := range rules {
		for _, m := range r.Matches {
			if id, ok := setIndex(xtInfo{name: m.Name, rev: uint32(m.Rev), info: m.Data}, true); ok && !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// setIndex is the ipset index an xt set match refers to.
func setIndex(x xtInfo, ok bool) (uint16, bool) {
	if !ok || x.name != "set" || x.rev < 1 || x.rev > 4 || len(x.info) < 2 {
		return 0, false
	}
	return u16(x.info, 0), true
}
