package render

import (
	"encoding/binary"
	"fmt"

	"github.com/google/nftables/expr"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// This file is the first step of reading a rule: each netlink expression
// becomes a typed value (a google/nftables expression, or an xtInfo for an
// xt-compat match/target blob) and goes to its decoder: native.go,
// xtmatch.go or xttarget.go. What cannot be parsed becomes an opaque token.

// expr decodes one expression and feeds it to the pattern matcher.
func (b *builder) expr(e inspect.Expr) {
	switch e.Name {
	case "match":
		b.xt(e, "match", rankOpaque, b.xtMatchKnown)
		return
	case "target":
		b.xt(e, "target", rankTarget, b.xtTargetKnown)
		return
	}
	if e.Name == "tproxy" {
		if t, ok := tproxyOf(e.Data); !ok || !b.native(t) {
			b.opaqueWrite(e)
		}
		return
	}
	x := newExpr(e.Name)
	// notrack and a plain masq carry no attribute at all.
	if x == nil || e.Data == nil && e.Name != "notrack" && e.Name != "masq" {
		b.opaqueWrite(e)
		return
	}
	if err := expr.Unmarshal(b.famB, e.Data, x); err != nil {
		b.opaqueWrite(e)
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
		b.opaqueWrite(e)
	}
}

// opaqueWrite is the token of a native expression not decoded. Its
// registers are forgotten too: it may have written any of them (exthdr,
// rt, socket, a load into a register the kernel would refuse), and a
// compare after it must not read as the load before it.
func (b *builder) opaqueWrite(e inspect.Expr) {
	b.opaqueExpr(e)
	b.clobberRegs()
}

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
	case "notrack":
		return &expr.Notrack{}
	case "fib":
		return &expr.Fib{}
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

// tproxyOf reads a tproxy expression from its raw attributes:
// google/nftables v0.3.0 reads NFTA_TPROXY_FAMILY as one byte, but the
// kernel writes it as a be32 (nft_tproxy_dump), so every tproxy failed
// to decode. An attribute it does not know makes it opaque.
func tproxyOf(data []byte) (*expr.TProxy, bool) {
	ad, err := netlink.NewAttributeDecoder(data)
	if err != nil {
		return nil, false
	}
	ad.ByteOrder = binary.BigEndian
	t := &expr.TProxy{}
	for ad.Next() {
		switch ad.Type() {
		case expr.NFTA_TPROXY_FAMILY:
			t.Family = byte(ad.Uint32())
		case expr.NFTA_TPROXY_REG_ADDR:
			t.RegAddr = ad.Uint32()
		case expr.NFTA_TPROXY_REG_PORT:
			t.RegPort = ad.Uint32()
		default:
			return nil, false
		}
	}
	return t, ad.Err() == nil
}

func parseXT(data []byte) (xtInfo, bool) {
	var x xtInfo
	ad, err := netlink.NewAttributeDecoder(data)
	if err != nil {
		return x, false
	}
	ad.ByteOrder = binary.BigEndian
	// NFTA_MATCH_* and NFTA_TARGET_* share numbers: 1 name, 2 rev, 3 info.
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_MATCH_NAME:
			x.name = cString(ad.Bytes())
		case unix.NFTA_MATCH_REV:
			x.rev = ad.Uint32()
		case unix.NFTA_MATCH_INFO:
			x.info = ad.Bytes()
		}
	}
	return x, ad.Err() == nil && x.name != ""
}

// xt decodes an xt-compat match or target (kind "match" or "target") with
// known; what it does not know shows as an opaque token at rank.
func (b *builder) xt(e inspect.Expr, kind string, rank int, known func(xtInfo) bool) {
	x, ok := parseXT(e.Data)
	if !ok {
		b.opaqueExpr(e)
		return
	}
	if !known(x) {
		b.add(rank, "", opaque(kind, fmt.Sprintf("%s.r%d", x.name, x.rev), x.info))
	}
}
