package inspect

import "encoding/binary"

// This file walks a legacy table's entries (the blob *_SO_GET_ENTRIES
// copies out) into its chains and rules, as iptables-legacy-save reads
// them. The blob is walked as hostile: every offset and size is checked
// against the buffer and the entry it belongs to, a walk never loops, and
// what does not fit the layout ends the walk instead of being guessed at.

// XTExt is one x_tables match or target of a legacy rule: its name,
// revision and the kernel struct it carries, raw (lib/render decodes it
// like an xt-compat blob, which holds the same struct).
type XTExt struct {
	Name string
	Rev  uint8
	Data []byte
}

// LegacyRule is one rule of a legacy x_tables table.
type LegacyRule struct {
	Family Family
	Table  string
	Chain  string
	// Head is the entry's fixed match (struct ipt_ip, ip6t_ip6 or
	// arpt_arp), raw.
	Head    []byte
	Matches []XTExt
	// Target is the rule's target; for the standard target (Name "")
	// Verdict says what it does instead.
	Target XTExt
	// Verdict is the standard target's meaning: ACCEPT, DROP, QUEUE,
	// RETURN, a user chain's name (a jump, or a goto with Goto), "" for
	// none (a rule that only counts), or "?" for a verdict that is none
	// of these.
	Verdict string
	Goto    bool
}

// LegacyChain is a chain of a legacy table: a built-in one with its
// policy, or a user chain.
type LegacyChain struct {
	Name    string
	Builtin bool
	Policy  string // built-in chains: ACCEPT or DROP ("?" if neither)
}

// entryLayout is where a family's entry keeps what the walk reads.
type entryLayout struct {
	head         int // sizeof the fixed match (struct ipt_ip, ...)
	size         int // sizeof(struct *t_entry): matches start here
	targetOffset int // u16 target_offset, u16 next_offset follows
	counters     int // struct xt_counters (u64 aligned, after u32 comefrom)
	flags        int // the head's flags byte, -1 when it has no goto flag
	gotoFlag     byte
	hooks        []string // built-in chain names by hook number
}

var entryLayouts = map[Family]entryLayout{
	IP:  {84, 112, 88, 96, 82, 0x02, []string{"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"}},
	IP6: {136, 168, 140, 152, 131, 0x04, []string{"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"}},
	ARP: {164, 192, 164, 176, -1, 0, []string{"INPUT", "OUTPUT", "FORWARD"}},
}

// Standard verdicts as a standard target holds them (-NF_x - 1).
var standardVerdicts = map[int32]string{-1: "DROP", -2: "ACCEPT", -4: "QUEUE", -5: "RETURN"}

// extHeader is struct xt_entry_match / xt_entry_target: u16 size,
// name[29], u8 revision.
const extHeader = 32

// tableHooks is what GET_INFO says of a table's built-in chains: the
// offsets of their first entries and of their policy entries.
type tableHooks struct {
	valid     uint32
	entry     []uint32
	underflow []uint32
}

// walkEntries reads the entries in blob (the first bytes of a table of
// GET_INFO's hooks) and hands each rule to rule, in order, until rule
// returns false (the chains are still all read). It returns the chains,
// and whether every rule was handed on: a blob cut short (the read cap),
// or one that does not follow the layout, ends the walk there.
func walkEntries(fam Family, table string, blob []byte, th tableHooks, rule func(LegacyRule) bool) ([]LegacyChain, bool) {
	lay, ok := entryLayouts[fam]
	if !ok {
		return nil, false
	}
	type entry struct {
		off, next, target int
	}
	// One pass for the entries' bounds, so a jump's offset can be checked
	// against them and a user chain's end found (its entry before the
	// next chain head).
	var ents []entry
	byOff := map[int]int{}
	for off := 0; off < len(blob); {
		if off+lay.size > len(blob) {
			break
		}
		to := int(binary.NativeEndian.Uint16(blob[off+lay.targetOffset:]))
		next := int(binary.NativeEndian.Uint16(blob[off+lay.targetOffset+2:]))
		if next < lay.size+extHeader || off+next > len(blob) || to < lay.size || to+extHeader > next {
			break // cut short, or not an entry: what follows cannot be read
		}
		tsize := int(binary.NativeEndian.Uint16(blob[off+to:]))
		if tsize < extHeader || to+tsize > next {
			break
		}
		byOff[off] = len(ents)
		ents = append(ents, entry{off, next, to})
		off += next
	}
	name := func(e entry) string { return cstring(blob[e.off+e.target+2 : e.off+e.target+2+29]) }
	isError := func(e entry) bool {
		return name(e) == "ERROR" && e.target+extHeader+30 <= e.next
	}
	errorName := func(e entry) string { return cstring(blob[e.off+e.target+extHeader : e.off+e.target+extHeader+30]) }
	// A table ends with an ERROR entry named ERROR, and nothing after it.
	last := len(ents) - 1
	complete := last >= 0 && ents[last].off+ents[last].next == len(blob) && isError(ents[last]) && errorName(ents[last]) == "ERROR"
	verdictOf := func(e entry) (int32, bool) {
		if name(e) != "" || e.target+extHeader+4 > e.next {
			return 0, false
		}
		return int32(binary.NativeEndian.Uint32(blob[e.off+e.target+extHeader:])), true
	}
	// Chain starts: built-in chains at their hook entries, user chains
	// at the entry after their ERROR head; a jump names the chain whose
	// start it points at.
	hookAt := map[int]int{}
	policyAt := map[int]int{}
	for h := range lay.hooks {
		if th.valid&(1<<h) == 0 || h >= len(th.entry) || h >= len(th.underflow) {
			continue
		}
		hookAt[int(th.entry[h])] = h
		policyAt[int(th.underflow[h])] = h
	}
	userAt := map[int]string{}
	for i, e := range ents {
		if isError(e) && i+1 < len(ents) {
			if n := errorName(e); n != "ERROR" {
				userAt[ents[i+1].off] = n
			}
		}
	}
	var chains []LegacyChain
	chain, user := "", false
	handing := true
	for i, e := range ents {
		if h, ok := hookAt[e.off]; ok {
			chain, user = lay.hooks[h], false
			chains = append(chains, LegacyChain{Name: chain, Builtin: true})
		}
		if isError(e) {
			chain, user = "", false
			if n := errorName(e); n != "ERROR" {
				chain, user = n, true
				chains = append(chains, LegacyChain{Name: n})
			}
			continue
		}
		v, std := verdictOf(e)
		if _, ok := policyAt[e.off]; ok && len(chains) > 0 && !user {
			// The built-in chain's policy: an unconditional verdict.
			p := standardVerdicts[v]
			if !std || p != "ACCEPT" && p != "DROP" {
				p = "?"
			}
			chains[len(chains)-1].Policy = p
			chain = ""
			continue
		}
		if user && std && v == -5 && (i+1 == len(ents) || isError(ents[i+1])) && unconditional(blob[e.off:e.off+e.next], lay) {
			// The RETURN that ends every user chain is its policy,
			// not a rule.
			continue
		}
		if !handing {
			continue
		}
		if chain == "" {
			// An entry outside every chain cannot come from iptables;
			// it still counts, so it goes to a chain of its own name.
			chain = "?"
		}
		r := LegacyRule{Family: fam, Table: table, Chain: chain, Head: clone(blob[e.off : e.off+lay.head])}
		for m := e.off + lay.size; m < e.off+e.target; {
			ms := int(binary.NativeEndian.Uint16(blob[m:]))
			if ms < extHeader || m+ms > e.off+e.target {
				r.Matches = append(r.Matches, XTExt{Name: "?", Data: clone(blob[m : e.off+e.target])})
				break
			}
			r.Matches = append(r.Matches, XTExt{Name: cstring(blob[m+2 : m+31]), Rev: blob[m+31], Data: clone(blob[m+extHeader : m+ms])})
			m += ms
		}
		t := e.off + e.target
		tsize := int(binary.NativeEndian.Uint16(blob[t:]))
		r.Target = XTExt{Name: name(e), Rev: blob[t+31], Data: clone(blob[t+extHeader : t+tsize])}
		if std {
			switch {
			case v >= 0 && int(v) == e.off+e.next:
				// Falls through to the next rule: no target.
			case v >= 0:
				r.Verdict = "?"
				if n, ok := userAt[int(v)]; ok {
					r.Verdict = n
				}
				r.Goto = lay.flags >= 0 && blob[e.off+lay.flags]&lay.gotoFlag != 0
			default:
				r.Verdict = "?"
				if n, ok := standardVerdicts[v]; ok {
					r.Verdict = n
				}
			}
		}
		if handing && !rule(r) {
			handing = false
		}
	}
	return chains, complete && handing
}

// unconditional reports whether an entry matches every packet: its head
// all zero (no address, interface, protocol or flag) and no match.
func unconditional(e []byte, lay entryLayout) bool {
	for _, c := range e[:lay.head] {
		if c != 0 {
			return false
		}
	}
	return int(binary.NativeEndian.Uint16(e[lay.targetOffset:])) == lay.size
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }
