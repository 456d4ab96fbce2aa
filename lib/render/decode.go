package render

import (
	"encoding/binary"
	"fmt"

	"github.com/google/nftables/expr"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// newExpr is the name→type table over google/nftables expression types.
// We decode each expression ourselves (instead of letting the library parse
// the whole rule) because the library drops unknown kinds silently and fails
// a whole rule on one bad xt blob; here each miss becomes one opaque token.
// match/target are not listed: xt.go parses them with their info structs.
func newExpr(name string) expr.Any {
	switch name {
	case "payload":
		return &expr.Payload{}
	case "meta":
		return &expr.Meta{}
	case "cmp":
		return &expr.Cmp{}
	case "bitwise":
		return &expr.Bitwise{}
	case "range":
		return &expr.Range{}
	case "lookup":
		return &expr.Lookup{}
	case "immediate":
		return &expr.Immediate{}
	case "counter":
		return &expr.Counter{}
	case "ct":
		return &expr.Ct{}
	case "limit":
		return &expr.Limit{}
	case "log":
		return &expr.Log{}
	case "reject":
		return &expr.Reject{}
	case "nat":
		return &expr.NAT{}
	case "masq":
		return &expr.Masq{}
	case "redir":
		return &expr.Redir{}
	case "tproxy":
		return &expr.TProxy{}
	case "notrack":
		return &expr.Notrack{}
	}
	return nil
}

// attrU32 finds a top-level u32 attribute in raw expression data.
func attrU32(data []byte, typ uint16) (uint32, bool) {
	ad, err := netlink.NewAttributeDecoder(data)
	if err != nil {
		return 0, false
	}
	ad.ByteOrder = binary.BigEndian
	for ad.Next() {
		if ad.Type() == typ {
			v := ad.Uint32()
			return v, ad.Err() == nil
		}
	}
	return 0, false
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

// builder accumulates the parts of one rule.
type builder struct {
	fam   inspect.Family
	famB  byte
	parts []part
	regs  map[uint32]*source
	proto int // the -p protocol seen so far, -1 when none
}

func newBuilder(fam inspect.Family) *builder {
	return &builder{fam: fam, famB: fam.Number(), regs: map[uint32]*source{}, proto: -1}
}

func (b *builder) add(rank int, key, text string) int {
	b.parts = append(b.parts, part{rank: rank, key: key, text: text})
	return len(b.parts) - 1
}

func (b *builder) module(name, text string)  { b.add(rankModule, name, "-m "+name+" "+text) }
func (b *builder) target(text string)        { b.add(rankTarget, "", "-j "+text) }
func (b *builder) opaqueExpr(e inspect.Expr) { b.add(rankOpaque, "", opaque("expr", e.Name, e.Data)) }
func (b *builder) opaqueNft(s *source, what string) {
	b.add(rankOpaque, "", "-m unknown:nft["+s.desc()+","+what+"]")
}

// expr decodes one expression and feeds it to the pattern matcher.
func (b *builder) expr(e inspect.Expr) {
	switch e.Name {
	case "match":
		b.xtMatch(e)
		return
	case "target":
		b.xtTarget(e)
		return
	}
	x := newExpr(e.Name)
	if x == nil || e.Data == nil && e.Name != "notrack" {
		b.opaqueExpr(e)
		return
	}
	if err := expr.Unmarshal(b.famB, e.Data, x); err != nil {
		b.opaqueExpr(e)
		return
	}
	// A verdict is an immediate into register 0 whose data is a verdict,
	// not a value: parse it again as such (google/nftables does the same).
	if im, ok := x.(*expr.Immediate); ok && im.Register == unix.NFT_REG_VERDICT {
		v := &expr.Verdict{}
		if err := expr.Unmarshal(b.famB, e.Data, v); err != nil || !b.verdict(v) {
			b.opaqueExpr(e)
		}
		return
	}
	// google/nftables v0.3.0 drops NFTA_CT_SREG: a "ct ... set" would
	// look like a load. Read it from the raw attributes.
	if c, ok := x.(*expr.Ct); ok {
		if reg, ok := attrU32(e.Data, unix.NFTA_CT_SREG); ok {
			c.SourceRegister, c.Register = true, reg
		}
	}
	if !b.native(x) {
		b.opaqueExpr(e)
	}
}

// native handles a decoded native expression; false means "not understood".
func (b *builder) native(x expr.Any) bool {
	switch x := x.(type) {
	case *expr.Counter:
		// Counters carry no meaning; iptables-nft adds one to every rule.
		return true
	case *expr.Payload:
		if x.OperationType != expr.PayloadLoad || x.DestRegister == 0 {
			return false
		}
		b.regs[x.DestRegister] = &source{kind: "payload", base: uint32(x.Base), off: x.Offset, len: x.Len, rangePart: -1}
		return true
	case *expr.Meta:
		if x.SourceRegister {
			return b.metaSet(x)
		}
		b.regs[x.Register] = &source{kind: "meta", key: uint32(x.Key), rangePart: -1}
		return true
	case *expr.Ct:
		if x.SourceRegister {
			return b.ctSet(x)
		}
		b.regs[x.Register] = &source{kind: "ct", key: uint32(x.Key), dir: x.Direction, rangePart: -1}
		return true
	case *expr.Bitwise:
		s, ok := b.regs[x.SourceRegister]
		if !ok {
			return false
		}
		n := *s
		n.rangePart = -1
		if n.mask != nil || len(x.Mask) == 0 || len(x.Mask) != len(x.Xor) {
			n.mangled = true
		} else {
			n.mask, n.xor = x.Mask, x.Xor
		}
		b.regs[x.DestRegister] = &n
		return true
	case *expr.Immediate:
		b.regs[x.Register] = &source{kind: "imm", data: x.Data, rangePart: -1}
		return true
	case *expr.Cmp:
		s, ok := b.regs[x.Register]
		if !ok {
			return false
		}
		b.cmp(s, x.Op, x.Data)
		return true
	case *expr.Range:
		s, ok := b.regs[x.Register]
		if !ok {
			return false
		}
		b.rangeCmp(s, x.Op, x.FromData, x.ToData)
		return true
	case *expr.Lookup:
		neg := ""
		if x.Invert {
			neg = "! "
		}
		s := b.regs[x.SourceRegister]
		if s == nil {
			s = &source{}
		}
		b.add(rankOpaque, "", "-m unknown:nft["+s.desc()+",lookup] "+neg+"--set "+Escape(x.SetName, MaxField))
		return true
	case *expr.Limit:
		return b.nativeLimit(x)
	case *expr.Log:
		return b.nativeLog(x)
	case *expr.Reject:
		return b.nativeReject(x)
	case *expr.NAT:
		return b.nativeNAT(x)
	case *expr.Masq:
		return b.nativeMasq(x)
	case *expr.Redir:
		return b.nativeRedir(x)
	case *expr.TProxy:
		return b.nativeTProxy(x)
	case *expr.Notrack:
		b.target("CT --notrack")
		return true
	}
	return false
}
