package render

import (
	"fmt"

	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"golang.org/x/sys/unix"
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
	regs  regFile
	proto int // the -p protocol seen so far, -1 when none
	names Names
	// targeted is set once a part of rank rankTarget was added; after is
	// rankAfter once an expression other than a counter followed it.
	targeted bool
	after    int
}

func newBuilder(fam inspect.Family) *builder {
	return &builder{fam: fam, famB: fam.Number(), proto: -1}
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
	// word and words are where the load sits in the register file.
	word, words int
}

// regFile is the kernel's register file as nft_parse_register lays it
// out: sixteen 32-bit words, which NFT_REG_1..4 (16 bytes each) and
// NFT_REG32_00..15 both name (reg 1 is words 0-3, the same storage as
// reg32 8-11; reg 2 is reg32 12-15). Each word points at the load that
// last wrote it, whatever name it was written under, so a rule cannot
// load into one name and compare the other's older content.
type regFile [16]*source

// regWord is the word register reg starts at, -1 for a register the
// kernel refuses for data (the verdict register, 5-7, past 23).
func regWord(reg uint32) int {
	switch {
	case reg >= unix.NFT_REG_1 && reg <= unix.NFT_REG_4:
		return int(reg-unix.NFT_REG_1) * 4
	case reg >= unix.NFT_REG32_00 && reg <= unix.NFT_REG32_15:
		return int(reg - unix.NFT_REG32_00)
	}
	return -1
}

// wordsOf is how many words n bytes fill: the kernel rounds every load up
// to whole words.
func wordsOf(n uint32) int { return int((uint64(n) + 3) / 4) }

// setReg records that s wrote n bytes from register reg on. Whatever load
// it overlaps is gone as a whole: the kernel leaves the rest of it in
// place, but a compare reading it reads a mix no iptables option names.
// False when the kernel refuses the write (bad register, past the file).
func (b *builder) setReg(reg, n uint32, s *source) bool {
	w, k := regWord(reg), wordsOf(n)
	if w < 0 || k == 0 || w+k > len(b.regs) {
		return false
	}
	for _, old := range b.regs[w : w+k] {
		if old != nil {
			clear(b.regs[old.word : old.word+old.words])
		}
	}
	s.word, s.words = w, k
	for i := w; i < w+k; i++ {
		b.regs[i] = s
	}
	return true
}

// reg is the load a read of n bytes from register reg sees, or nil when
// those bytes are not one recorded load from its start (a load under
// another name, one partly overwritten, two loads side by side, or none):
// such a read has no iptables meaning, and rendering it as the load the
// register was last named with would let a pod's rule read as one the
// allowlist holds. A read may be shorter than the load: iptables-nft
// compares only the prefix of a 16-byte interface name for "-i eth+".
func (b *builder) reg(reg, n uint32) *source {
	w := regWord(reg)
	if w < 0 || n == 0 {
		return nil
	}
	if s := b.regs[w]; s != nil && s.word == w && wordsOf(n) <= s.words {
		return s
	}
	return nil
}

// clobberRegs forgets every register: an expression not decoded may have
// written any of them, with any length.
func (b *builder) clobberRegs() { clear(b.regs[:]) }

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
