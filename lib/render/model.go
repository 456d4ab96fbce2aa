package render

import (
	"fmt"

	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
)

// This file is the model a rule is decoded into: the parts of its text,
// each with a rank that fixes its place, and the registers native
// expressions load.

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
	// rankAfter is added to the rank of every part decoded after the
	// target, so that those parts come after it, behind an
	// afterTargetToken, instead of moving in front of it.
	rankAfter = 2000
)

// afterTargetToken marks the expressions of a rule that come after its
// target. iptables-nft writes the target last (only the counter may come
// between it and the matches), and the kernel stops a rule at its first
// verdict: a rule shaped otherwise does not do what its matches would say
// in front of the target, so its text must never be that of a rule
// iptables-nft writes (an allowlist entry would hide it).
const afterTargetToken = "-m unknown:after-target"

// part is one option group of the text, e.g. "-m mark --mark 0x1".
type part struct {
	rank int
	key  string // orders parts of one rank (module name, option)
	text string
}

// builder accumulates the parts of one rule.
type builder struct {
	fam   inspect.Family
	famB  byte
	parts []part
	regs  map[uint32]*source
	proto int // the -p protocol seen so far, -1 when none
	names Names
	// targeted is set once a part of rank rankTarget was added; after is
	// rankAfter once an expression other than a counter followed it.
	targeted bool
	after    int
}

func newBuilder(fam inspect.Family) *builder {
	return &builder{fam: fam, famB: fam.Number(), regs: map[uint32]*source{}, proto: -1}
}

func (b *builder) add(rank int, key, text string) int {
	b.targeted = b.targeted || rank == rankTarget
	b.parts = append(b.parts, part{rank: b.after + rank, key: key, text: text})
	return len(b.parts) - 1
}

func (b *builder) module(name, text string) {
	if text != "" {
		text = " " + text
	}
	b.add(rankModule, name, "-m "+name+text)
}

func (b *builder) target(text string) { b.add(rankTarget, "", "-j "+text) }

func (b *builder) opaqueExpr(e inspect.Expr) { b.add(rankOpaque, "", opaque("expr", e.Name, e.Data)) }

func (b *builder) opaqueNft(s *source, what string) {
	b.add(rankOpaque, "", "-m unknown:nft["+s.desc()+","+what+"]")
}

// source is what a register holds: the load that filled it, plus the
// bitwise mask/xor applied since.
type source struct {
	kind       string // "meta", "payload", "ct", "imm"
	key        uint32 // meta or ct key
	dir        uint32 // ct direction
	base       uint32 // payload base
	off, len   uint32 // payload offset and length
	data       []byte // immediate data
	mask, xor  []byte // bitwise applied, nil when none
	mangled    bool   // a transform we do not model (shift, second bitwise)
	rangePart  int    // index of a port part opened by cmp gte, -1 if none
	rangeLoTxt string
}

// desc is a safe (digits, letters, punctuation we choose) description of a
// source for opaque tokens.
func (s *source) desc() string {
	d := "?"
	switch s.kind {
	case "meta":
		d = fmt.Sprintf("meta/%d", s.key)
	case "ct":
		d = fmt.Sprintf("ct/%d.%d", s.key, s.dir)
	case "payload":
		d = fmt.Sprintf("payload/%d+%d:%d", s.base, s.off, s.len)
	case "imm":
		d = fmt.Sprintf("imm/%x", s.data)
	}
	if s.mask != nil {
		d += fmt.Sprintf("&%x^%x", s.mask, s.xor)
	}
	if s.mangled {
		d += "~"
	}
	return d
}

// xtInfo is an xt-compat match or target: its name, revision and the
// kernel struct it carries, still raw.
type xtInfo struct {
	name string
	rev  uint32
	info []byte
}

// Names resolves what a rule refers to only by number.
type Names struct {
	// Sets maps an ipset's kernel index to its name (lib/ipset reads them
	// for the indexes SetIndexes lists); an index not in it prints as id:N.
	Sets map[uint16]string
}
