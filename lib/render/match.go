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

// This file maps native load+cmp patterns (what iptables-nft 1.8.x writes
// instead of xt blobs for the common matches) onto iptables options.

func negPrefix(neg bool) string {
	if neg {
		return "! "
	}
	return ""
}

// cmp interprets "register (loaded from s) OP data".
func (b *builder) cmp(s *source, op expr.CmpOp, data []byte) {
	switch op {
	case expr.CmpOpEq, expr.CmpOpNeq:
		if !b.cmpEq(s, op == expr.CmpOpNeq, data) {
			b.opaqueNft(s, fmt.Sprintf("cmp%d:%x", op, data))
		}
	case expr.CmpOpGte, expr.CmpOpLte:
		// Older iptables-nft wrote a port range as "cmp gte lo; cmp lte hi"
		// on one load; render it as the range it means.
		if b.portsCmp(s, op, data) {
			return
		}
		b.opaqueNft(s, fmt.Sprintf("cmp%d:%x", op, data))
	default:
		b.opaqueNft(s, fmt.Sprintf("cmp%d:%x", op, data))
	}
}

func (b *builder) rangeCmp(s *source, op expr.CmpOp, from, to []byte) {
	neg := op == expr.CmpOpNeq
	if op == expr.CmpOpEq || neg {
		if opt := b.portOption(s); opt != "" && len(from) == 2 && len(to) == 2 && s.mask == nil && !s.mangled {
			b.add(rankProtoOpt, optKey[opt], negPrefix(neg)+"--"+opt+" "+portRange(be16(from), be16(to)))
			return
		}
		if s.kind == "meta" && (s.key == unix.NFT_META_SKUID || s.key == unix.NFT_META_SKGID) && len(from) == 4 && len(to) == 4 && s.mask == nil {
			b.ownerNative(s.key, neg, binary.NativeEndian.Uint32(from), binary.NativeEndian.Uint32(to))
			return
		}
	}
	b.opaqueNft(s, fmt.Sprintf("range%d:%x-%x", op, from, to))
}

func be16(b []byte) uint16 { return binary.BigEndian.Uint16(b) }

// portOption names the port a transport-header load reads, or "".
func (b *builder) portOption(s *source) string {
	if s.kind != "payload" || s.base != unix.NFT_PAYLOAD_TRANSPORT_HEADER || s.len != 2 || b.isICMP() {
		return ""
	}
	switch s.off {
	case 0:
		return "sport"
	case 2:
		return "dport"
	}
	return ""
}

func (b *builder) isICMP() bool {
	return b.proto == unix.IPPROTO_ICMP || b.proto == unix.IPPROTO_ICMPV6
}

// optKey orders the -p module's options as iptables-save prints them.
var optKey = map[string]string{"sport": "1", "dport": "2", "flags": "3", "option": "4", "icmp": "5"}

func portRange(lo, hi uint16) string {
	if lo == hi {
		return strconv.Itoa(int(lo))
	}
	return fmt.Sprintf("%d:%d", lo, hi)
}

func (b *builder) portsCmp(s *source, op expr.CmpOp, data []byte) bool {
	opt := b.portOption(s)
	if opt == "" || len(data) != 2 || s.mask != nil || s.mangled {
		return false
	}
	v := be16(data)
	if op == expr.CmpOpGte {
		s.rangeLoTxt = strconv.Itoa(int(v))
		s.rangePart = b.add(rankProtoOpt, optKey[opt], "--"+opt+" "+portRange(v, 0xffff))
		return true
	}
	if s.rangePart >= 0 {
		lo, _ := strconv.Atoi(s.rangeLoTxt)
		b.parts[s.rangePart].text = "--" + opt + " " + portRange(uint16(lo), v)
		s.rangePart = -1
		return true
	}
	b.add(rankProtoOpt, optKey[opt], "--"+opt+" "+portRange(0, v))
	return true
}

// cmpEq handles eq/neq comparisons; false means no iptables meaning known.
func (b *builder) cmpEq(s *source, neg bool, data []byte) bool {
	if s.mangled {
		return false
	}
	switch s.kind {
	case "meta":
		return b.metaCmp(s, neg, data)
	case "payload":
		return b.payloadCmp(s, neg, data)
	case "ct":
		return b.ctCmp(s, neg, data)
	}
	return false
}

func (b *builder) metaCmp(s *source, neg bool, data []byte) bool {
	switch s.key {
	case unix.NFT_META_L4PROTO:
		if len(data) != 1 || s.mask != nil {
			return false
		}
		b.setProto(neg, int(data[0]))
		return true
	case unix.NFT_META_IIFNAME, unix.NFT_META_OIFNAME:
		if s.mask != nil {
			return false
		}
		rank, opt := rankIn, "-i"
		if s.key == unix.NFT_META_OIFNAME {
			rank, opt = rankOut, "-o"
		}
		b.add(rank, "", negPrefix(neg)+opt+" "+ifaceText(data))
		return true
	case unix.NFT_META_MARK:
		if len(data) != 4 {
			return false
		}
		mask := uint32(0xffffffff)
		if s.mask != nil {
			if len(s.mask) != 4 || !allZero(s.xor) {
				return false
			}
			mask = binary.NativeEndian.Uint32(s.mask)
		}
		b.module("mark", negPrefix(neg)+"--mark "+markText(binary.NativeEndian.Uint32(data), mask))
		return true
	case unix.NFT_META_SKUID, unix.NFT_META_SKGID:
		if len(data) != 4 || s.mask != nil {
			return false
		}
		v := binary.NativeEndian.Uint32(data)
		b.ownerNative(s.key, neg, v, v)
		return true
	}
	return false
}

func (b *builder) ownerNative(key uint32, neg bool, lo, hi uint32) {
	opt := "--uid-owner"
	if key == unix.NFT_META_SKGID {
		opt = "--gid-owner"
	}
	b.module("owner", negPrefix(neg)+opt+" "+idRange(lo, hi))
}

func idRange(lo, hi uint32) string {
	if lo == hi {
		return strconv.FormatUint(uint64(lo), 10)
	}
	return fmt.Sprintf("%d-%d", lo, hi)
}

// markText is "0xV" for a full mask and "0xV/0xM" otherwise, as
// iptables-save prints it.
func markText(v, mask uint32) string {
	if mask == 0xffffffff {
		return fmt.Sprintf("0x%x", v)
	}
	return fmt.Sprintf("0x%x/0x%x", v, mask)
}

// ifaceText turns the compared bytes back into iptables' name: a name
// compared with its NUL is exact, one compared without is a prefix, which
// iptables spells with a trailing "+".
func ifaceText(data []byte) string {
	if i := bytes.IndexByte(data, 0); i >= 0 {
		name := string(data[:i])
		if !allZero(data[i:]) {
			// Bytes after the NUL cannot come from iptables; keep them visible.
			return Quote(string(data), MaxField)
		}
		return Escape(name, MaxField)
	}
	return Escape(string(data)+"+", MaxField)
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func (b *builder) setProto(neg bool, p int) {
	if !neg {
		b.proto = p
	}
	b.add(rankProto, "", negPrefix(neg)+"-p "+protoName(b.fam, p))
}

// protoName is fixed, not /etc/protocols, so the text does not depend on the
// machine rendering it.
func protoName(fam inspect.Family, p int) string {
	switch p {
	case unix.IPPROTO_TCP:
		return "tcp"
	case unix.IPPROTO_UDP:
		return "udp"
	case unix.IPPROTO_ICMP:
		return "icmp"
	case unix.IPPROTO_ICMPV6:
		return "ipv6-icmp"
	case unix.IPPROTO_SCTP:
		return "sctp"
	case unix.IPPROTO_UDPLITE:
		return "udplite"
	case unix.IPPROTO_DCCP:
		return "dccp"
	case unix.IPPROTO_ESP:
		return "esp"
	case unix.IPPROTO_AH:
		return "ah"
	case unix.IPPROTO_GRE:
		return "gre"
	case unix.IPPROTO_IGMP:
		return "igmp"
	case 135:
		return "mh"
	}
	return strconv.Itoa(p)
}

// addrSpan is where the source and destination addresses sit in the
// network header of the family.
func addrSpan(fam inspect.Family) (src, dst, n uint32, ok bool) {
	switch fam {
	case inspect.IP:
		return 12, 16, 4, true
	case inspect.IP6:
		return 8, 24, 16, true
	}
	return 0, 0, 0, false
}

func (b *builder) payloadCmp(s *source, neg bool, data []byte) bool {
	if uint32(len(data)) != s.len {
		return false
	}
	switch s.base {
	case unix.NFT_PAYLOAD_NETWORK_HEADER:
		return b.networkCmp(s, neg, data)
	case unix.NFT_PAYLOAD_TRANSPORT_HEADER:
		return b.transportCmp(s, neg, data)
	}
	return false
}

func (b *builder) networkCmp(s *source, neg bool, data []byte) bool {
	// Old iptables-nft matched -p on the header's protocol field.
	if s.mask == nil && s.len == 1 && (b.fam == inspect.IP && s.off == 9 || b.fam == inspect.IP6 && s.off == 6) {
		b.setProto(neg, int(data[0]))
		return true
	}
	// -f: fragment offset (13 bits) non-zero.
	if b.fam == inspect.IP && s.off == 6 && s.len == 2 && bytes.Equal(s.mask, []byte{0x1f, 0xff}) && allZero(s.xor) && allZero(data) {
		b.add(rankFrag, "", negPrefix(!neg)+"-f")
		return true
	}
	srcOff, dstOff, n, ok := addrSpan(b.fam)
	if !ok {
		return false
	}
	for _, a := range []struct {
		off  uint32
		rank int
		opt  string
	}{{srcOff, rankSrc, "-s"}, {dstOff, rankDst, "-d"}} {
		if s.off < a.off || s.off+s.len > a.off+n {
			continue
		}
		// iptables-nft loads only the bytes a prefix covers (1 byte for a
		// /8), optionally masked: rebuild the full address and mask.
		addr, mask := make([]byte, n), make([]byte, n)
		rel := s.off - a.off
		for i := uint32(0); i < s.len; i++ {
			m := byte(0xff)
			if s.mask != nil {
				if len(s.mask) != int(s.len) || !allZero(s.xor) {
					return false
				}
				m = s.mask[i]
			}
			mask[rel+i] = m
			addr[rel+i] = data[i] & m
		}
		b.add(a.rank, "", negPrefix(neg)+a.opt+" "+addrText(addr, mask))
		return true
	}
	return false
}

// addrText prints an address with its mask the canonical way: no mask for a
// full one, /len for a prefix, /mask-address for anything else.
func addrText(addr, mask []byte) string {
	a, ok := netip.AddrFromSlice(addr)
	if !ok {
		return fmt.Sprintf("%x/%x", addr, mask)
	}
	ones, contiguous := 0, true
	for i, m := range mask {
		for bit := 7; bit >= 0; bit-- {
			if m&(1<<bit) != 0 {
				if !contiguous {
					mk, _ := netip.AddrFromSlice(mask)
					return a.String() + "/" + mk.String()
				}
				ones++
			} else {
				contiguous = false
			}
		}
		_ = i
	}
	if ones == len(mask)*8 {
		return a.String()
	}
	return a.String() + "/" + strconv.Itoa(ones)
}

func (b *builder) transportCmp(s *source, neg bool, data []byte) bool {
	if b.isICMP() && s.off == 0 && s.mask == nil && (s.len == 1 || s.len == 2) {
		code := -1
		if s.len == 2 {
			code = int(data[1])
		}
		b.add(rankProtoOpt, optKey["icmp"], negPrefix(neg)+icmpText(b.fam, int(data[0]), code, code))
		return true
	}
	if s.off == 13 && s.len == 1 && b.proto == unix.IPPROTO_TCP {
		mask := byte(0xff)
		if s.mask != nil {
			if !allZero(s.xor) {
				return false
			}
			mask = s.mask[0]
		}
		b.add(rankProtoOpt, optKey["flags"], tcpFlagsText(neg, mask, data[0]))
		return true
	}
	if s.mask != nil {
		return false
	}
	if opt := b.portOption(s); opt != "" {
		b.add(rankProtoOpt, optKey[opt], negPrefix(neg)+"--"+opt+" "+strconv.Itoa(int(be16(data))))
		return true
	}
	// iptables-nft 1.8.9 matches --sport and --dport together with one
	// 4-byte load; a negated pair has no iptables spelling.
	if s.off == 0 && s.len == 4 && !neg && !b.isICMP() {
		b.add(rankProtoOpt, optKey["sport"], "--sport "+strconv.Itoa(int(be16(data[:2]))))
		b.add(rankProtoOpt, optKey["dport"], "--dport "+strconv.Itoa(int(be16(data[2:]))))
		return true
	}
	return false
}

var tcpFlagNames = []string{"FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR"}

func tcpFlagList(f byte) string {
	switch f {
	case 0:
		return "NONE"
	case 0x3f:
		return "ALL"
	}
	var n []string
	for i, name := range tcpFlagNames {
		if f&(1<<i) != 0 {
			n = append(n, name)
		}
	}
	return strings.Join(n, ",")
}

// tcpFlagsText prints --syn for its exact meaning (mask FIN,SYN,RST,ACK,
// compare SYN) and --tcp-flags otherwise.
func tcpFlagsText(neg bool, mask, cmp byte) string {
	cmp &= mask
	if mask == 0x17 && cmp == 0x02 {
		return negPrefix(neg) + "--syn"
	}
	return negPrefix(neg) + "--tcp-flags " + tcpFlagList(mask) + " " + tcpFlagList(cmp)
}

// icmpText prints a type with its code range: numbers only, so the text
// does not depend on a name table.
func icmpText(fam inspect.Family, typ, codeLo, codeHi int) string {
	opt := "--icmp-type "
	if fam == inspect.IP6 {
		opt = "--icmpv6-type "
	}
	switch {
	case typ == 0xff && fam != inspect.IP6:
		return opt + "any"
	case codeLo < 0 || codeLo == 0 && codeHi == 0xff:
		return opt + strconv.Itoa(typ)
	case codeLo == codeHi:
		return opt + fmt.Sprintf("%d/%d", typ, codeLo)
	}
	return opt + fmt.Sprintf("%d/%d-%d", typ, codeLo, codeHi)
}

// Conntrack state bits. INVALID, ESTABLISHED, RELATED and NEW sit at the
// same positions everywhere; the bits after them do not: nft's ct state has
// UNTRACKED at 0x40, xt_conntrack SNAT 0x40, DNAT 0x80 and UNTRACKED 0x100
// (1 << IP_CT_NUMBER+1..3), xt_state UNTRACKED at 0x10 (1 << IP_CT_IS_REPLY+1).
type stateBit struct {
	bit  uint32
	name string
}

var (
	ctStateBase      = []stateBit{{1, "INVALID"}, {8, "NEW"}, {4, "RELATED"}, {2, "ESTABLISHED"}}
	ctStateNative    = append(ctStateBase[:4:4], stateBit{0x40, "UNTRACKED"})
	ctStateConntrack = append(ctStateBase[:4:4], stateBit{0x100, "UNTRACKED"}, stateBit{0x40, "SNAT"}, stateBit{0x80, "DNAT"})
	ctStateXTState   = append(ctStateBase[:4:4], stateBit{0x10, "UNTRACKED"})
)

func ctStateText(mask uint32, names []stateBit) string {
	var n []string
	for _, s := range names {
		if mask&s.bit != 0 {
			n = append(n, s.name)
			mask &^= s.bit
		}
	}
	if mask != 0 {
		n = append(n, fmt.Sprintf("0x%x", mask))
	}
	if len(n) == 0 {
		return "NONE"
	}
	return strings.Join(n, ",")
}

var ctStatusNames = []string{"EXPECTED", "SEEN_REPLY", "ASSURED", "CONFIRMED"}

func ctStatusText(mask uint32) string {
	var n []string
	for i, name := range ctStatusNames {
		if mask&(1<<i) != 0 {
			n = append(n, name)
		}
	}
	if rest := mask &^ 0xf; rest != 0 {
		n = append(n, fmt.Sprintf("0x%x", rest))
	}
	if len(n) == 0 {
		return "NONE"
	}
	return strings.Join(n, ",")
}

// ctCmp handles "ct state & MASK != 0", what newer iptables-nft writes for
// --ctstate, and the same for --ctstatus.
func (b *builder) ctCmp(s *source, neg bool, data []byte) bool {
	if s.key != unix.NFT_CT_STATE && s.key != unix.NFT_CT_STATUS {
		return false
	}
	if len(s.mask) != 4 || !allZero(s.xor) || len(data) != 4 || !allZero(data) {
		return false
	}
	m := binary.NativeEndian.Uint32(s.mask)
	// "& mask != 0" is the positive match.
	neg = !neg
	if s.key == unix.NFT_CT_STATE {
		b.module("conntrack", negPrefix(neg)+"--ctstate "+ctStateText(m, ctStateNative))
	} else {
		b.module("conntrack", negPrefix(neg)+"--ctstatus "+ctStatusText(m))
	}
	return true
}

// finish closes what only the end of the rule tells.
func (b *builder) finish() {}
