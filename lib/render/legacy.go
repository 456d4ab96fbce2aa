package render

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
)

// This file reads a legacy x_tables rule (inspect.LegacyRule: the entry's
// fixed match, its matches and target, raw) into the same parts, and so
// the same canonical text, as the rule written by iptables-nft: the xt
// matches and targets are the structs xt-compat carries, decoded by
// xtmatch.go and xttarget.go; only the fixed match is legacy's own.

// LegacyText renders one legacy x_tables rule as canonical text, like Text
// an iptables-nft rule. It never panics and always returns text.
func LegacyText(r inspect.LegacyRule) string { return Names{}.LegacyText(r) }

// LegacyText is LegacyText with the names n knows.
func (n Names) LegacyText(r inspect.LegacyRule) (out string) {
	head := "-A " + safetext.Name(r.Chain, MaxField)
	defer func() {
		if recover() != nil {
			out = head + " " + opaque("match", "entry", r.Head)
		}
	}()
	b := newBuilder(r.Family)
	b.names = n
	var ok bool
	switch r.Family {
	case inspect.IP, inspect.IP6:
		ok = b.ipHead(r.Head)
	case inspect.ARP:
		ok = b.arpHead(r.Head)
	}
	if !ok {
		b.add(rankOpaque, "", opaque("match", "entry."+string(r.Family), r.Head))
	}
	for _, m := range r.Matches {
		x := xtInfo{name: m.Name, rev: uint32(m.Rev), info: m.Data}
		if !b.xtMatchKnown(x) {
			b.add(rankOpaque, "", opaque("match", fmt.Sprintf("%s.r%d", m.Name, m.Rev), m.Data))
		}
	}
	b.legacyTarget(r)
	return b.text(head)
}

// legacyTarget adds the standard target's verdict, or decodes the target.
func (b *builder) legacyTarget(r inspect.LegacyRule) {
	if r.Target.Name != "" {
		x := xtInfo{name: r.Target.Name, rev: uint32(r.Target.Rev), info: r.Target.Data}
		if !b.xtTargetKnown(x) {
			b.add(rankTarget, "", opaque("target", fmt.Sprintf("%s.r%d", x.name, x.rev), x.info))
		}
		return
	}
	switch {
	case r.Verdict == "":
		// Falls through: the rule only counts.
	case r.Verdict == "?":
		b.add(rankTarget, "", opaque("target", "standard", r.Target.Data))
	case r.Goto:
		b.add(rankTarget, "", "-g "+safetext.Name(r.Verdict, MaxField))
	default:
		b.target(safetext.Name(r.Verdict, MaxField))
	}
}

// Fixed-match flags: struct ipt_ip / ip6t_ip6 invflags (same bits in both)
// and flags.
const (
	invIn    = 0x01
	invOut   = 0x02
	invTOS   = 0x04
	invSrc   = 0x08
	invDst   = 0x10
	invFrag  = 0x20
	invProto = 0x40

	ipFlagFrag  = 0x01 // IPT_F_FRAG
	ipFlagGoto  = 0x02 // IPT_F_GOTO
	ip6FlagProt = 0x01 // IP6T_F_PROTO
	ip6FlagGoto = 0x04 // IP6T_F_GOTO
)

// ipHead adds the parts of struct ipt_ip or ip6t_ip6; false when it holds
// something iptables never writes (a TOS, unknown flags, a mask that is
// not a prefix of whole bytes on an interface), which the caller shows
// opaque rather than guess at.
func (b *builder) ipHead(h []byte) bool {
	n, ifOff, protoOff, flagsOff, invOff := 4, 16, 80, 82, 83
	if b.fam == inspect.IP6 {
		n, ifOff, protoOff, flagsOff, invOff = 16, 64, 128, 131, 132
	}
	if len(h) < invOff+1 {
		return false
	}
	flags, inv := h[flagsOff], h[invOff]
	proto := int(binary.NativeEndian.Uint16(h[protoOff:]))
	if inv&^0x7f != 0 || inv&invTOS != 0 {
		return false
	}
	if b.fam == inspect.IP && flags&^(ipFlagFrag|ipFlagGoto) != 0 {
		return false
	}
	if b.fam == inspect.IP6 {
		// ip6tables matches the protocol only with IP6T_F_PROTO, and
		// has no -f (IP6T_INV_FRAG is never set).
		if flags&^(ip6FlagProt|ip6FlagGoto) != 0 || h[130] != 0 || inv&invFrag != 0 ||
			flags&ip6FlagProt == 0 && (proto != 0 || inv&invProto != 0) {
			return false
		}
	}
	src, dst := h[0:n], h[n:2*n]
	smsk, dmsk := h[2*n:3*n], h[3*n:4*n]
	in, out := h[ifOff:ifOff+16], h[ifOff+16:ifOff+32]
	inMask, outMask := h[ifOff+32:ifOff+48], h[ifOff+48:ifOff+64]
	for _, a := range []struct {
		addr, mask []byte
		inv        bool
		rank       int
		opt        string
	}{{src, smsk, inv&invSrc != 0, rankSrc, "-s"}, {dst, dmsk, inv&invDst != 0, rankDst, "-d"}} {
		if allZero(a.mask) && !a.inv {
			continue
		}
		b.add(a.rank, "", negPrefix(a.inv)+a.opt+" "+addrText(maskBytes(a.addr, a.mask), a.mask))
	}
	for _, i := range []struct {
		name, mask []byte
		inv        bool
		rank       int
		opt        string
	}{{in, inMask, inv&invIn != 0, rankIn, "-i"}, {out, outMask, inv&invOut != 0, rankOut, "-o"}} {
		t, ok := legacyIface(i.name, i.mask)
		if !ok {
			return false
		}
		if t != "" || i.inv {
			if t == "" {
				t = "+"
			}
			b.add(i.rank, "", negPrefix(i.inv)+i.opt+" "+t)
		}
	}
	if proto != 0 || inv&invProto != 0 {
		b.setProto(inv&invProto != 0, proto)
	}
	if b.fam == inspect.IP && flags&ipFlagFrag != 0 {
		b.add(rankFrag, "", negPrefix(inv&invFrag != 0)+"-f")
	} else if inv&invFrag != 0 {
		return false
	}
	return true
}

// legacyIface spells an interface and its mask as iptables wrote them: the
// mask covers the name and its NUL for an exact name, only the name for a
// prefix ("eth+"), nothing for any interface (""). Any other mask is not
// iptables'.
func legacyIface(name, mask []byte) (string, bool) {
	k := bytes.IndexByte(mask, 0)
	if k < 0 {
		k = len(mask)
	}
	if !allZero(mask[k:]) {
		return "", false
	}
	for _, m := range mask[:k] {
		if m != 0xff {
			return "", false
		}
	}
	if k == 0 {
		return "", true
	}
	return ifaceText(name[:k]), true
}

// arpHead adds the parts of struct arpt_arp as arptables-nft's rules
// render: addresses, MACs, interfaces, opcode, hardware type and length,
// protocol type.
func (b *builder) arpHead(h []byte) bool {
	if len(h) < 162 {
		return false
	}
	inv := binary.NativeEndian.Uint16(h[160:])
	if inv&^0x3ff != 0 || h[158] != 0 {
		return false
	}
	for _, a := range []struct {
		off, moff int
		bit       uint16
		rank      int
		opt       string
	}{{0, 8, 0x04, rankSrc, "-s "}, {4, 12, 0x08, rankDst, "-d "}} {
		addr, mask, neg := h[a.off:a.off+4], h[a.moff:a.moff+4], inv&a.bit != 0
		if allZero(mask) && !neg {
			continue
		}
		b.add(a.rank, "", negPrefix(neg)+a.opt+addrText(maskBytes(addr, mask), mask))
	}
	for _, d := range []struct {
		off  int
		bit  uint16
		rank int
		opt  string
	}{{18, 0x10, rankSrc, "--src-mac "}, {50, 0x20, rankDst, "--dst-mac "}} {
		// struct arpt_devaddr_info: addr[16], mask[16]; Ethernet MACs use 6.
		addr, mask, neg := h[d.off:d.off+6], h[d.off+16:d.off+22], inv&d.bit != 0
		if !allZero(h[d.off+6:d.off+16]) || !allZero(h[d.off+22:d.off+32]) {
			return false
		}
		if allZero(mask) && !neg {
			continue
		}
		b.add(d.rank, "mac", negPrefix(neg)+d.opt+macMaskText(addr, mask))
	}
	for _, i := range []struct {
		off, moff int
		bit       uint16
		rank      int
		opt       string
	}{{94, 126, 0x01, rankIn, "-i"}, {110, 142, 0x02, rankOut, "-o"}} {
		t, ok := legacyIface(h[i.off:i.off+16], h[i.moff:i.moff+16])
		if !ok {
			return false
		}
		neg := inv&i.bit != 0
		if t != "" || neg {
			if t == "" {
				t = "+"
			}
			b.add(i.rank, "", negPrefix(neg)+i.opt+" "+t)
		}
	}
	field := func(v, m uint32, full uint32, neg bool, key, opt string, spell func(uint32) string) {
		if m == 0 && !neg {
			return
		}
		t := spell(v & m)
		if m != full {
			t += fmt.Sprintf("/0x%x", m)
		}
		b.add(rankProtoOpt, key, negPrefix(neg)+opt+t)
	}
	dec := func(v uint32) string { return strconv.FormatUint(uint64(v), 10) }
	hex := func(v uint32) string { return fmt.Sprintf("0x%x", v) }
	field(uint32(h[16]), uint32(h[17]), 0xff, inv&0x200 != 0, "2", "--h-length ", dec)
	field(uint32(be16(h[82:])), uint32(be16(h[84:])), 0xffff, inv&0x40 != 0, "3", "--opcode ", dec)
	field(uint32(be16(h[86:])), uint32(be16(h[88:])), 0xffff, inv&0x80 != 0, "1", "--h-type ", dec)
	field(uint32(be16(h[90:])), uint32(be16(h[92:])), 0xffff, inv&0x100 != 0, "4", "--proto-type ", hex)
	return true
}
