package inspect

import "golang.org/x/sys/unix"

// sumExpr adds one expression to a rule's Sum. The Sum must be a function of
// the rule's meaning only: state the kernel updates with traffic (counter
// values, quota consumed, the last match time) is left out, or every
// container start of a pod with such a rule would give a new fingerprint.
func sumExpr(h fnv64a, name string, data []byte) fnv64a {
	h = h.str(name).byte(0)
	switch name {
	case "counter", "last":
		// Nothing but state: packets and bytes; whether and when it matched.
		return h
	case "quota":
		return h.attrsExcept(data, unix.NFTA_QUOTA_CONSUMED)
	case "dynset":
		// Its own expressions (a counter per element, say) are nested in it.
		eachAttr(data, func(typ uint16, v []byte) {
			h = h.byte(byte(typ))
			switch typ {
			case unix.NFTA_DYNSET_EXPR:
				n, d := exprOf(v)
				h = sumExpr(h, n, d)
			case nftaDynsetExpressions:
				eachAttr(v, func(_ uint16, elem []byte) {
					n, d := exprOf(elem)
					h = sumExpr(h, n, d)
				})
			default:
				h = h.bytes(v)
			}
		})
		return h
	}
	return h.bytes(data)
}

// attrsExcept hashes the attributes of b but the one of type skip.
func (h fnv64a) attrsExcept(b []byte, skip uint16) fnv64a {
	eachAttr(b, func(typ uint16, v []byte) {
		if typ != skip {
			h = h.byte(byte(typ)).bytes(v)
		}
	})
	return h
}

// fnv64a is FNV-1a kept in a value: hash.Hash64 would allocate per rule.
type fnv64a uint64

const (
	fnvOffset fnv64a = 14695981039346656037
	fnvPrime  fnv64a = 1099511628211
)

func (h fnv64a) byte(c byte) fnv64a { return (h ^ fnv64a(c)) * fnvPrime }

func (h fnv64a) bytes(b []byte) fnv64a {
	for _, c := range b {
		h = (h ^ fnv64a(c)) * fnvPrime
	}
	return h
}

func (h fnv64a) str(s string) fnv64a {
	for i := 0; i < len(s); i++ {
		h = (h ^ fnv64a(s[i])) * fnvPrime
	}
	return h
}

// nftaDynsetExpressions is NFTA_DYNSET_EXPRESSIONS (linux 5.11), which
// x/sys/unix does not name.
const nftaDynsetExpressions = 10
