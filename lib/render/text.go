package render

import (
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"

	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
)

// Ranks fix the order of the parts of a rule, so that the same meaning
// gives the same text whatever order the writing client emitted the
// expressions in. The base order is the one iptables-save uses for the
// built-in options; modules then sort by name.
const (
	rankSrc      = 10
	rankDst      = 20
	rankIn       = 30
	rankOut      = 40
	rankProto    = 50
	rankFrag     = 60
	rankProtoOpt = 70 // --sport, --dport, --syn, --icmp-type: the -p module
	rankModule   = 100
	rankOpaque   = 800
	rankTarget   = 1000
)

// part is one option group of the text, e.g. "-m mark --mark 0x1".
type part struct {
	rank int
	key  string // orders parts of one rank (module name, option)
	text string
}

// Text renders one iptables-nft rule as canonical iptables-save-like text.
// It never panics and always returns text; see the package doc.
func Text(r inspect.Rule) (out string) {
	head := "-A " + Escape(r.Chain, MaxField)
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
	b.finish()
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

// maxHex bytes of an opaque blob are shown; longer blobs are cut and carry
// their length and an FNV-1a hash so different blobs stay different.
const maxHex = 64

// blob renders bytes for an opaque token: "[hex]" or "[hex...+N#hash]".
func blob(data []byte) string {
	if len(data) <= maxHex {
		return "[" + hex.EncodeToString(data) + "]"
	}
	h := fnv.New32a()
	h.Write(data)
	return fmt.Sprintf("[%s...+%d#%08x]", hex.EncodeToString(data[:maxHex]), len(data)-maxHex, h.Sum32())
}

// opaque is the token for anything not decoded: "-m unknown:KIND/NAME[hex]".
func opaque(kind, name string, data []byte) string {
	flag := "-m"
	if kind == "target" {
		flag = "-j"
	}
	return flag + " unknown:" + kind + "/" + Escape(name, 64) + blob(data)
}
