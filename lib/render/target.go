package render

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/google/nftables/expr"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"golang.org/x/sys/unix"
)

// This file renders targets, native and xt, to one spelling each.

func (b *builder) verdict(v *expr.Verdict) bool {
	switch v.Kind {
	case expr.VerdictAccept:
		b.target("ACCEPT")
	case expr.VerdictDrop:
		b.target("DROP")
	case expr.VerdictReturn:
		b.target("RETURN")
	case expr.VerdictJump:
		b.target(Escape(v.Chain, MaxField))
	case expr.VerdictGoto:
		b.add(rankTarget, "", "-g "+Escape(v.Chain, MaxField))
	case expr.VerdictContinue:
		// No target: the rule only counts.
	default:
		return false
	}
	return true
}

// metaSet: "meta mark set ..." is what newer iptables-nft writes for MARK
// and CONNMARK --restore-mark.
func (b *builder) metaSet(m *expr.Meta) bool {
	s := b.regs[m.Register]
	if m.Key != expr.MetaKeyMARK || s == nil || s.mangled {
		return false
	}
	switch {
	case s.kind == "imm" && len(s.data) == 4 && s.mask == nil:
		b.target("MARK --set-xmark " + xmark(binary.NativeEndian.Uint32(s.data), 0xffffffff))
	case s.kind == "meta" && s.key == unix.NFT_META_MARK && len(s.mask) == 4 && len(s.xor) == 4:
		// mark = (mark & m) ^ x is --set-xmark x/~m.
		b.target("MARK --set-xmark " + xmark(binary.NativeEndian.Uint32(s.xor), ^binary.NativeEndian.Uint32(s.mask)))
	case s.kind == "ct" && s.key == unix.NFT_CT_MARK && s.mask == nil:
		b.target("CONNMARK --restore-mark")
	default:
		return false
	}
	return true
}

func (b *builder) ctSet(c *expr.Ct) bool {
	s := b.regs[c.Register]
	if c.Key != expr.CtKeyMARK || s == nil || s.mangled {
		return false
	}
	switch {
	case s.kind == "imm" && len(s.data) == 4 && s.mask == nil:
		b.target("CONNMARK --set-xmark " + xmark(binary.NativeEndian.Uint32(s.data), 0xffffffff))
	case s.kind == "meta" && s.key == unix.NFT_META_MARK && s.mask == nil:
		b.target("CONNMARK --save-mark")
	default:
		return false
	}
	return true
}

func xmark(v, mask uint32) string { return fmt.Sprintf("0x%x/0x%x", v, mask) }

// Reject: xt REJECT stores an enum per family, native reject an ICMP code;
// both map to the iptables name, and the default (port unreachable) is
// omitted.
var (
	reject4 = map[uint32]string{0: "icmp-net-unreachable", 1: "icmp-host-unreachable", 2: "icmp-proto-unreachable",
		3: "", 4: "echo-reply", 5: "icmp-net-prohibited", 6: "icmp-host-prohibited", 7: "tcp-reset", 8: "icmp-admin-prohibited"}
	reject6 = map[uint32]string{0: "icmp6-no-route", 1: "icmp6-adm-prohibited", 2: "icmp6-not-neighbour",
		3: "icmp6-addr-unreachable", 4: "", 5: "echo-reply", 6: "tcp-reset", 7: "icmp6-policy-fail", 8: "icmp6-reject-route"}
	// ICMP code → xt enum.
	icmpCode4 = map[uint8]uint32{0: 0, 1: 1, 2: 2, 3: 3, 9: 5, 10: 6, 13: 8}
	icmpCode6 = map[uint8]uint32{0: 0, 1: 1, 3: 3, 4: 4, 5: 7, 6: 8}
	// NFT_REJECT_ICMPX_* → xt enum (ip, ip6).
	icmpx4 = map[uint8]uint32{0: 0, 1: 3, 2: 1, 3: 8}
	icmpx6 = map[uint8]uint32{0: 0, 1: 4, 2: 3, 3: 1}
)

func (b *builder) rejectWith(with uint32) bool {
	names := reject4
	if b.fam == inspect.IP6 {
		names = reject6
	} else if b.fam != inspect.IP {
		return false
	}
	n, ok := names[with]
	if !ok {
		return false
	}
	if n == "" {
		b.target("REJECT")
	} else {
		b.target("REJECT --reject-with " + n)
	}
	return true
}

func (b *builder) nativeReject(r *expr.Reject) bool {
	six := b.fam == inspect.IP6
	var with uint32
	var ok bool
	switch r.Type {
	case unix.NFT_REJECT_TCP_RST:
		with, ok = 7, true
		if six {
			with = 6
		}
	case unix.NFT_REJECT_ICMP_UNREACH:
		if six {
			with, ok = icmpCode6[r.Code]
		} else {
			with, ok = icmpCode4[r.Code]
		}
	case unix.NFT_REJECT_ICMPX_UNREACH:
		if six {
			with, ok = icmpx6[r.Code]
		} else {
			with, ok = icmpx4[r.Code]
		}
	}
	return ok && b.rejectWith(with)
}

// Log flags share their bits between xt_LOG and nft log.
var logFlagNames = []struct {
	bit  uint32
	name string
}{{0x01, "--log-tcp-sequence"}, {0x02, "--log-tcp-options"}, {0x04, "--log-ip-options"}, {0x08, "--log-uid"}, {0x20, "--log-macdecode"}}

func logText(level uint32, flags uint32, prefix string) string {
	s := "LOG"
	if prefix != "" {
		s += " --log-prefix " + Quote(prefix, MaxField)
	}
	// 4 (warning) is the default of both iptables and nft.
	if level != 4 {
		s += " --log-level " + strconv.Itoa(int(level))
	}
	for _, f := range logFlagNames {
		if flags&f.bit != 0 {
			s += " " + f.name
			flags &^= f.bit
		}
	}
	if flags != 0 {
		s += fmt.Sprintf(" --log-flags-unknown 0x%x", flags)
	}
	return s
}

func (b *builder) nativeLog(l *expr.Log) bool {
	if l.Key&(1<<unix.NFTA_LOG_GROUP) != 0 {
		return false // that is NFLOG, not LOG
	}
	level := uint32(4)
	if l.Key&(1<<unix.NFTA_LOG_LEVEL) != 0 {
		level = uint32(l.Level)
	}
	b.target(logText(level, uint32(l.Flags), cString(l.Data)))
	return true
}

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}

// NAT ranges: one printer for xt (compat and nf_nat_range) and native nat.
type natRange struct {
	flags          uint32
	minIP, maxIP   netip.Addr
	minPort, maxPt uint16
	base           uint16
}

const (
	natMapIPs      = 0x01
	natProto       = 0x02
	natRandom      = 0x04
	natPersistent  = 0x08
	natRandomFully = 0x10
	natOffset      = 0x20
)

func (r natRange) addrPort() string {
	var s string
	if r.flags&natMapIPs != 0 {
		s = r.minIP.String()
		if r.maxIP != r.minIP {
			s += "-" + r.maxIP.String()
		}
		if r.minIP.Is6() && r.flags&natProto != 0 {
			s = "[" + s + "]"
		}
	}
	if r.flags&natProto != 0 {
		s += ":" + portRangeDash(r.minPort, r.maxPt)
		if r.flags&natOffset != 0 {
			s += "/" + strconv.Itoa(int(r.base))
		}
	}
	return s
}

func portRangeDash(lo, hi uint16) string {
	if lo == hi {
		return strconv.Itoa(int(lo))
	}
	return fmt.Sprintf("%d-%d", lo, hi)
}

func (r natRange) flagText() string {
	var s []string
	if r.flags&natRandom != 0 {
		s = append(s, "--random")
	}
	if r.flags&natRandomFully != 0 {
		s = append(s, "--random-fully")
	}
	if r.flags&natPersistent != 0 {
		s = append(s, "--persistent")
	}
	if len(s) == 0 {
		return ""
	}
	return " " + strings.Join(s, " ")
}

// natTarget renders SNAT/DNAT/MASQUERADE/REDIRECT from a range.
func (b *builder) natTarget(name string, r natRange) {
	s := name
	switch name {
	case "SNAT", "DNAT":
		opt := " --to-source "
		if name == "DNAT" {
			opt = " --to-destination "
		}
		if ap := r.addrPort(); ap != "" {
			s += opt + ap
		}
	default:
		if r.flags&natProto != 0 {
			s += " --to-ports " + portRangeDash(r.minPort, r.maxPt)
		}
	}
	b.target(s + r.flagText())
}

func (b *builder) regAddr(reg uint32) (netip.Addr, bool) {
	s := b.regs[reg]
	if s == nil || s.kind != "imm" {
		return netip.Addr{}, false
	}
	return netip.AddrFromSlice(s.data)
}

func (b *builder) regPort(reg uint32) (uint16, bool) {
	s := b.regs[reg]
	if s == nil || s.kind != "imm" || len(s.data) != 2 {
		return 0, false
	}
	return be16(s.data), true
}

// regPorts fills a range's ports from min/max registers (max 0 = same).
func (b *builder) regPorts(r *natRange, min, max uint32) bool {
	if min == 0 {
		return true
	}
	lo, ok := b.regPort(min)
	if !ok {
		return false
	}
	hi := lo
	if max != 0 && max != min {
		if hi, ok = b.regPort(max); !ok {
			return false
		}
	}
	r.flags |= natProto
	r.minPort, r.maxPt = lo, hi
	return true
}

func (b *builder) nativeNAT(n *expr.NAT) bool {
	var r natRange
	if n.RegAddrMin != 0 {
		lo, ok := b.regAddr(n.RegAddrMin)
		if !ok {
			return false
		}
		hi := lo
		if n.RegAddrMax != 0 && n.RegAddrMax != n.RegAddrMin {
			if hi, ok = b.regAddr(n.RegAddrMax); !ok {
				return false
			}
		}
		r.flags |= natMapIPs
		r.minIP, r.maxIP = lo, hi
	}
	if !b.regPorts(&r, n.RegProtoMin, n.RegProtoMax) || n.Prefix {
		return false
	}
	r.flags |= natFlags(n.Random, n.FullyRandom, n.Persistent)
	name := "SNAT"
	if n.Type == expr.NATTypeDestNAT {
		name = "DNAT"
	}
	b.natTarget(name, r)
	return true
}

func natFlags(random, fully, persistent bool) uint32 {
	var f uint32
	if random {
		f |= natRandom
	}
	if fully {
		f |= natRandomFully
	}
	if persistent {
		f |= natPersistent
	}
	return f
}

func (b *builder) nativeMasq(m *expr.Masq) bool {
	var r natRange
	if m.ToPorts && !b.regPorts(&r, m.RegProtoMin, m.RegProtoMax) {
		return false
	}
	r.flags |= natFlags(m.Random, m.FullyRandom, m.Persistent)
	b.natTarget("MASQUERADE", r)
	return true
}

func (b *builder) nativeRedir(m *expr.Redir) bool {
	var r natRange
	if !b.regPorts(&r, m.RegisterProtoMin, m.RegisterProtoMax) {
		return false
	}
	r.flags |= m.Flags &^ natProto
	b.natTarget("REDIRECT", r)
	return true
}

func (b *builder) nativeTProxy(t *expr.TProxy) bool {
	port, ok := b.regPort(t.RegPort)
	if !ok {
		return false
	}
	var ip netip.Addr
	if t.RegAddr != 0 {
		if ip, ok = b.regAddr(t.RegAddr); !ok {
			return false
		}
	}
	b.target(tproxyText(port, ip, 0, 0))
	return true
}

func tproxyText(port uint16, ip netip.Addr, value, mask uint32) string {
	s := "TPROXY --on-port " + strconv.Itoa(int(port))
	if ip.IsValid() && !ip.IsUnspecified() {
		s += " --on-ip " + ip.String()
	}
	if value != 0 || mask != 0 {
		s += " --tproxy-mark " + xmark(value, mask)
	}
	return s
}

func (b *builder) xtTargetKnown(x xtInfo) bool {
	i := x.info
	switch {
	case x.name == "REJECT" && x.rev == 0 && len(i) >= 4:
		return b.rejectWith(u32(i, 0))
	case x.name == "MARK" && x.rev == 2 && len(i) >= 8:
		b.target("MARK --set-xmark " + xmark(u32(i, 0), u32(i, 4)))
	case x.name == "MARK" && x.rev == 0 && len(i) >= 8 && u64(i, 0) <= 0xffffffff:
		b.target("MARK --set-xmark " + xmark(uint32(u64(i, 0)), 0xffffffff))
	case x.name == "MARK" && x.rev == 1 && len(i) >= 9 && u64(i, 0) <= 0xffffffff:
		// Modes set/and/or expressed as the xmark they equal.
		v := uint32(u64(i, 0))
		switch i[8] {
		case 0:
			b.target("MARK --set-xmark " + xmark(v, 0xffffffff))
		case 1:
			b.target("MARK --set-xmark " + xmark(0, ^v))
		case 2:
			b.target("MARK --set-xmark " + xmark(v, v))
		default:
			return false
		}
	case x.name == "CONNMARK" && (x.rev == 1 && len(i) >= 13 || x.rev == 2 && len(i) >= 15):
		return b.connmark(x.rev, i)
	case x.name == "LOG" && x.rev == 0 && len(i) >= 32:
		b.target(logText(uint32(i[0]), uint32(i[1]), cString(i[2:32])))
	case x.name == "NOTRACK" && x.rev == 0:
		b.target("CT --notrack")
	case x.name == "CT" && (x.rev == 0 && len(i) >= 28 || x.rev >= 1 && x.rev <= 2 && len(i) >= 60):
		b.ct(x.rev, i)
	case x.name == "TPROXY" && x.rev == 0 && len(i) >= 14 && b.fam == inspect.IP:
		b.target(tproxyText(binary.BigEndian.Uint16(i[12:]), netip.AddrFrom4([4]byte(i[8:12])), u32(i, 4), u32(i, 0)))
	case x.name == "TPROXY" && x.rev == 1 && len(i) >= 26:
		ip, _ := b.inetAddr(i, 8)
		b.target(tproxyText(binary.BigEndian.Uint16(i[24:]), ip, u32(i, 4), u32(i, 0)))
	case x.name == "SNAT" || x.name == "DNAT" || x.name == "MASQUERADE" || x.name == "REDIRECT":
		r, ok := b.xtNATRange(x)
		if !ok {
			return false
		}
		b.natTarget(x.name, r)
	default:
		return false
	}
	return true
}

// xtNATRange reads the three NAT range layouts: the IPv4 multi-range compat
// struct (revision 0 in ip tables), nf_nat_range (revision 1, and revision 0
// of the ip6 MASQUERADE/REDIRECT) and nf_nat_range2 (revision 2).
func (b *builder) xtNATRange(x xtInfo) (natRange, bool) {
	i := x.info
	var r natRange
	compat := x.rev == 0 && b.fam == inspect.IP
	switch {
	case compat && len(i) >= 20:
		if u32(i, 0) != 1 {
			return r, false // rangesize: iptables always writes exactly one
		}
		r.flags = u32(i, 4)
		r.minIP = netip.AddrFrom4([4]byte(i[8:12]))
		r.maxIP = netip.AddrFrom4([4]byte(i[12:16]))
		r.minPort, r.maxPt = binary.BigEndian.Uint16(i[16:]), binary.BigEndian.Uint16(i[18:])
	case !compat && x.rev <= 2 && len(i) >= 40:
		r.flags = u32(i, 0)
		r.minIP, _ = b.inetAddr(i, 4)
		r.maxIP, _ = b.inetAddr(i, 20)
		r.minPort, r.maxPt = binary.BigEndian.Uint16(i[36:]), binary.BigEndian.Uint16(i[38:])
		if x.rev == 2 {
			if len(i) < 42 {
				return r, false
			}
			r.base = binary.BigEndian.Uint16(i[40:])
		}
	default:
		return r, false
	}
	if r.flags&^0x3f != 0 {
		return r, false
	}
	return r, true
}

func (b *builder) connmark(rev uint32, i []byte) bool {
	ctmark, ctmask, nfmask := u32(i, 0), u32(i, 4), u32(i, 8)
	mode := i[12]
	var shift string
	if rev == 2 {
		mode = i[14]
		if i[13] != 0 {
			dir := "--left-shift-mark "
			if i[12] != 0 {
				dir = "--right-shift-mark "
			}
			shift = " " + dir + strconv.Itoa(int(i[13]))
		}
	}
	masks := ""
	if nfmask != 0xffffffff || ctmask != 0xffffffff {
		masks = fmt.Sprintf(" --nfmask 0x%x --ctmask 0x%x", nfmask, ctmask)
	}
	switch mode {
	case 0:
		b.target("CONNMARK --set-xmark " + xmark(ctmark, ctmask) + shift)
	case 1:
		b.target("CONNMARK --save-mark" + masks + shift)
	case 2:
		b.target("CONNMARK --restore-mark" + masks + shift)
	default:
		return false
	}
	return true
}

var ctEventNames = []string{"new", "related", "destroy", "reply", "assured", "protoinfo", "helper", "mark", "natseqinfo", "secmark", "label", "synproxy"}

func bitNames(m uint32, names []string) string {
	var n []string
	for k, name := range names {
		if m&(1<<k) != 0 {
			n = append(n, name)
		}
	}
	if rest := m >> len(names); rest != 0 {
		n = append(n, fmt.Sprintf("0x%x", m))
	}
	return strings.Join(n, ",")
}

// ct renders xt_ct_target_info (rev 0) and _v1 (rev 1, 2); --notrack wins
// because the kernel ignores the rest then, and it equals -j NOTRACK and
// native notrack.
func (b *builder) ct(rev uint32, i []byte) {
	flags, zone := u16(i, 0), u16(i, 2)
	if flags&1 != 0 {
		b.target("CT --notrack")
		return
	}
	s := "CT"
	if h := cString(i[12:28]); h != "" {
		s += " --helper " + Escape(h, MaxField)
	}
	if rev >= 1 {
		if t := cString(i[28:60]); t != "" {
			s += " --timeout " + Escape(t, MaxField)
		}
	}
	if ev := u32(i, 4); ev != 0 {
		s += " --ctevents " + bitNames(ev, ctEventNames)
	}
	if ev := u32(i, 8); ev != 0 {
		s += " --expevents " + bitNames(ev, []string{"new"})
	}
	const dirOrig, dirRepl, zoneMark = 4, 8, 16
	if zone != 0 || flags&zoneMark != 0 {
		opt := " --zone "
		switch flags & (dirOrig | dirRepl) {
		case dirOrig:
			opt = " --zone-orig "
		case dirRepl:
			opt = " --zone-reply "
		}
		if flags&zoneMark != 0 {
			s += opt + "mark"
		} else {
			s += opt + strconv.Itoa(int(zone))
		}
	}
	b.target(s)
}
