package render

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"

	"github.com/google/nftables/expr"
	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"golang.org/x/sys/unix"
)

// This file maps native expressions onto iptables options: loads into
// registers, then the compare that gives them meaning (what iptables-nft
// 1.8.x writes instead of xt blobs for the common matches), and the native
// targets (verdicts, mark/ct set, reject, log, nat, tproxy, notrack, limit).

// native handles a decoded native expression; false means "not understood".
func (b *builder) native(x expr.Any) bool {
	switch x := x.(type) {
	case *expr.Counter:
		// Counters carry no meaning; iptables-nft adds one to every rule.
		return true
	case *expr.Payload:
		if x.OperationType != expr.PayloadLoad {
			return false
		}
		return b.setReg(x.DestRegister, x.Len, &source{kind: "payload", base: uint32(x.Base), off: x.Offset, len: x.Len, rangePart: -1})
	case *expr.Meta:
		if x.SourceRegister {
			return b.metaSet(x)
		}
		return b.setReg(x.Register, metaLen(x.Key), &source{kind: "meta", key: uint32(x.Key), rangePart: -1})
	case *expr.Ct:
		if x.SourceRegister {
			return b.ctSet(x)
		}
		return b.setReg(x.Register, ctLen(x.Key), &source{kind: "ct", key: uint32(x.Key), dir: x.Direction, rangePart: -1})
	case *expr.Bitwise:
		s := b.reg(x.SourceRegister, x.Len)
		if s == nil {
			return false
		}
		n := *s
		n.rangePart = -1
		if n.mask != nil || len(x.Mask) == 0 || len(x.Mask) != len(x.Xor) {
			n.mangled = true
		} else {
			n.mask, n.xor = x.Mask, x.Xor
		}
		return b.setReg(x.DestRegister, x.Len, &n)
	case *expr.Immediate:
		return b.setReg(x.Register, uint32(len(x.Data)), &source{kind: "imm", data: x.Data, rangePart: -1})
	case *expr.Cmp:
		s := b.reg(x.Register, uint32(len(x.Data)))
		if s == nil {
			return false
		}
		b.cmp(s, x.Op, x.Data)
		return true
	case *expr.Range:
		s := b.reg(x.Register, uint32(len(x.FromData)))
		if s == nil {
			return false
		}
		b.rangeCmp(s, x.Op, x.FromData, x.ToData)
		return true
	case *expr.Lookup:
		neg := ""
		if x.Invert {
			neg = "! "
		}
		// The key's length is the set's, not in the rule: a read from a
		// load's first word is the best description there is.
		s := b.reg(x.SourceRegister, 1)
		if s == nil {
			s = &source{}
		}
		b.add(rankOpaque, "", "-m unknown:nft["+s.desc()+",lookup] "+neg+"--set "+safetext.Name(x.SetName, MaxField))
		if x.IsDestRegSet {
			// A map writes its value, as long as the set says, into dreg.
			b.clobberRegs()
		}
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
	case *expr.Fib:
		return b.fib(x)
	}
	return false
}

// Fib lookups that iptables-restore-translate writes for -m addrtype
// ("fib daddr type local") and -m rpfilter ("fib saddr . iif oif 0"): the
// register remembers which, the compare after it gives the meaning.
const (
	fibAddrType = iota + 1
	fibRPFilter
)

func (b *builder) fib(f *expr.Fib) bool {
	var flags uint32
	for bit, on := range map[uint32]bool{unix.NFTA_FIB_F_SADDR: f.FlagSADDR, unix.NFTA_FIB_F_DADDR: f.FlagDADDR,
		unix.NFTA_FIB_F_MARK: f.FlagMARK, unix.NFTA_FIB_F_IIF: f.FlagIIF, unix.NFTA_FIB_F_OIF: f.FlagOIF, unix.NFTA_FIB_F_PRESENT: f.FlagPRESENT} {
		if on {
			flags |= bit
		}
	}
	var kind uint32
	switch {
	case f.ResultADDRTYPE && !f.ResultOIF && !f.ResultOIFNAME && flags&(unix.NFTA_FIB_F_MARK|unix.NFTA_FIB_F_PRESENT) == 0 &&
		(flags&unix.NFTA_FIB_F_SADDR != 0) != (flags&unix.NFTA_FIB_F_DADDR != 0):
		kind = fibAddrType
	case f.ResultOIF && !f.ResultADDRTYPE && !f.ResultOIFNAME && flags&^(unix.NFTA_FIB_F_IIF|unix.NFTA_FIB_F_MARK) == unix.NFTA_FIB_F_SADDR:
		kind = fibRPFilter
	default:
		return false
	}
	// Both results decoded are a u32 (an address type, an ifindex).
	return b.setReg(f.Register, 4, &source{kind: "fib", key: kind, dir: flags, rangePart: -1})
}

// metaLen is how many bytes a meta load writes (nft_meta_get_init),
// counted in whole words: exact for the keys a compare decodes, the widest
// any key has (an interface name) for the others, since a write counted
// too wide only makes reads of its neighbours opaque, and one counted too
// narrow would leave them decoded after the kernel overwrote them.
func metaLen(k expr.MetaKey) uint32 {
	switch k {
	case expr.MetaKeyPROTOCOL, expr.MetaKeyL4PROTO, expr.MetaKeyMARK, expr.MetaKeySKUID, expr.MetaKeySKGID, expr.MetaKeyPKTTYPE:
		return 4
	}
	return unix.IFNAMSIZ
}

// ctLen is metaLen for ct loads (nft_ct_get_init): state, status and mark
// are a u32; no key is wider than 16 bytes (an IPv6 address, labels).
func ctLen(k expr.CtKey) uint32 {
	switch k {
	case expr.CtKeySTATE, expr.CtKeySTATUS, expr.CtKeyMARK:
		return 4
	}
	return 16
}

func (b *builder) fibCmp(s *source, neg bool, data []byte) bool {
	if s.mask != nil || len(data) != 4 {
		return false
	}
	v := binary.NativeEndian.Uint32(data)
	switch s.key {
	case fibAddrType:
		if v >= 32 {
			return false
		}
		opt := "--dst-type "
		if s.dir&unix.NFTA_FIB_F_SADDR != 0 {
			opt = "--src-type "
		}
		t := negPrefix(neg) + opt + maskNames(1<<v, addrTypes)
		if s.dir&unix.NFTA_FIB_F_IIF != 0 {
			t += " --limit-iface-in"
		}
		if s.dir&unix.NFTA_FIB_F_OIF != 0 {
			t += " --limit-iface-out"
		}
		b.module("addrtype", t)
	case fibRPFilter:
		// "oif != 0" passes the check; "oif 0" (no route back) is --invert.
		if v != 0 {
			return false
		}
		var o []string
		if s.dir&unix.NFTA_FIB_F_IIF == 0 {
			o = append(o, "--loose")
		}
		if s.dir&unix.NFTA_FIB_F_MARK != 0 {
			o = append(o, "--validmark")
		}
		if !neg {
			o = append(o, "--invert")
		}
		b.module("rpfilter", strings.Join(o, " "))
	default:
		return false
	}
	return true
}

// cmp interprets "register (loaded from s) OP data".
func (b *builder) cmp(s *source, op expr.CmpOp, data []byte) {
	if b.hlCmp(s, op, data) {
		return
	}
	switch op {
	case expr.CmpOpEq, expr.CmpOpNeq:
		if !b.cmpEq(s, op == expr.CmpOpNeq, data) {
			b.opaqueNft(s, fmt.Sprintf("cmp%d:%x", op, data))
		}
	case expr.CmpOpGte, expr.CmpOpLte, expr.CmpOpLt, expr.CmpOpGt:
		// Older iptables-nft wrote a port range as "cmp gte lo; cmp lte hi"
		// on one load; render it as the range it means.
		if b.portsCmp(s, op, data) || b.etherLength(s, op, data) {
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

func (b *builder) portsCmp(s *source, op expr.CmpOp, data []byte) bool {
	opt := b.portOption(s)
	if opt == "" || len(data) != 2 || s.mask != nil || s.mangled {
		return false
	}
	v := be16(data)
	// < and > are the ranges iptables-nft decodes them as
	// (port_match_single_to_range in iptables' nft-ruleparse.c), its
	// floor of 1 for "< 0" and "< 1" included.
	switch op {
	case expr.CmpOpLt:
		v = uint16(max(int(v)-1, 1))
	case expr.CmpOpGt:
		v = uint16(min(int(v)+1, 0xffff))
	}
	if op == expr.CmpOpGte || op == expr.CmpOpGt {
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

// hlCmp is a compare of the IPv4 TTL or the IPv6 hop limit, which
// iptables-nft decodes as -m ttl or -m hl (nft_parse_hl in iptables'
// nft-ruleparse.c): <= and >= become < and > one further, as
// iptables-nft-save prints them (1.8.9 measured).
func (b *builder) hlCmp(s *source, op expr.CmpOp, data []byte) bool {
	if s.kind != "payload" || s.base != unix.NFT_PAYLOAD_NETWORK_HEADER || s.len != 1 || len(data) != 1 || s.mask != nil || s.mangled {
		return false
	}
	name := ""
	switch {
	case b.fam == inspect.IP && s.off == 8:
		name = "ttl"
	case b.fam == inspect.IP6 && s.off == 7:
		name = "hl"
	default:
		return false
	}
	// The xt match's modes: eq, ne, lt, gt.
	v, mode := data[0], byte(0)
	switch op {
	case expr.CmpOpEq:
	case expr.CmpOpNeq:
		mode = 1
	case expr.CmpOpLt:
		mode = 2
	case expr.CmpOpGt:
		mode = 3
	case expr.CmpOpLte:
		if v == 255 {
			return false
		}
		mode, v = 2, v+1
	case expr.CmpOpGte:
		if v == 0 {
			return false
		}
		mode, v = 3, v-1
	default:
		return false
	}
	return b.ttlMatch(name, 0, []byte{mode, v})
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
	case "fib":
		return b.fibCmp(s, neg, data)
	}
	return false
}

func (b *builder) metaCmp(s *source, neg bool, data []byte) bool {
	switch s.key {
	case unix.NFT_META_PROTOCOL:
		// ebtables-nft may match -p on the packet's protocol.
		if b.fam != inspect.Bridge || len(data) != 2 || s.mask != nil {
			return false
		}
		b.add(rankProto, "", negPrefix(neg)+"-p "+etherType(be16(data)))
		return true
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
		// iptables-nft writes "! -i +" (no interface at all) as a compare
		// with "INVAL/D", a name no interface can have ('/' is refused).
		if name, ok := bytes.CutSuffix(data, []byte{0}); ok && string(bytes.TrimRight(name, "\x00")) == "INVAL/D" {
			b.add(rank, "", negPrefix(!neg)+opt+" +")
			return true
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
	case unix.NFT_META_PKTTYPE:
		// iptables-nft decodes it as -m pkttype (parse_meta_pkttype);
		// ebtables-nft's own decoder is another one.
		if len(data) != 1 || s.mask != nil || (b.fam != inspect.IP && b.fam != inspect.IP6) {
			return false
		}
		b.module("pkttype", negPrefix(neg)+"--pkt-type "+pktTypeName(uint32(data[0])))
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

// ifaceText turns the compared bytes back into iptables' name: a name
// compared with its NUL is exact, one compared without is a prefix, which
// iptables spells with a trailing "+".
func ifaceText(data []byte) string {
	if i := bytes.IndexByte(data, 0); i >= 0 {
		name := string(data[:i])
		if !allZero(data[i:]) {
			// Bytes after the NUL cannot come from iptables; keep them visible.
			return safetext.Quote(string(data), MaxField)
		}
		return safetext.Name(name, MaxField)
	}
	return safetext.Name(string(data)+"+", MaxField)
}

func (b *builder) setProto(neg bool, p int) {
	if !neg {
		b.proto = p
	}
	b.add(rankProto, "", negPrefix(neg)+"-p "+protoName(b.fam, p))
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
	switch {
	case b.fam == inspect.ARP && s.base == unix.NFT_PAYLOAD_NETWORK_HEADER:
		return b.arpCmp(s, neg, data)
	case b.fam == inspect.Bridge && s.base == unix.NFT_PAYLOAD_LL_HEADER:
		return b.etherCmp(s, neg, data)
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
		b.module("conntrack", negPrefix(neg)+"--ctstate "+maskNames(m, ctStateNative))
	} else {
		b.module("conntrack", negPrefix(neg)+"--ctstatus "+maskNames(m, ctStatus))
	}
	return true
}

func (b *builder) verdict(v *expr.Verdict) bool {
	switch v.Kind {
	case expr.VerdictAccept:
		b.target("ACCEPT")
	case expr.VerdictDrop:
		b.target("DROP")
	case expr.VerdictReturn:
		b.target("RETURN")
	case expr.VerdictJump:
		b.target(safetext.Name(v.Chain, MaxField))
	case expr.VerdictGoto:
		b.add(rankTarget, "", "-g "+safetext.Name(v.Chain, MaxField))
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
	// nftrace is read as a u8, mark as a u32 (nft_meta_set_init).
	n := uint32(4)
	if m.Key == expr.MetaKeyNFTRACE {
		n = 1
	}
	s := b.reg(m.Register, n)
	if s == nil || s.mangled {
		return false
	}
	// "meta nftrace set 1" is what iptables-nft writes for -j TRACE.
	if m.Key == expr.MetaKeyNFTRACE && s.kind == "imm" && s.mask == nil && len(s.data) >= 1 && s.data[0] == 1 && allZero(s.data[1:]) {
		b.target("TRACE")
		return true
	}
	if m.Key != expr.MetaKeyMARK {
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
	s := b.reg(c.Register, 4)
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

// Native reject stores an ICMP code (or an icmpx one, for ip and ip6
// alike); both map to the xt enum rejectWith spells.
var (
	// ICMP code → xt enum.
	icmpCode4 = map[uint8]uint32{0: 0, 1: 1, 2: 2, 3: 3, 9: 5, 10: 6, 13: 8}
	icmpCode6 = map[uint8]uint32{0: 0, 1: 1, 3: 3, 4: 4, 5: 7, 6: 8}
	// NFT_REJECT_ICMPX_* → xt enum (ip, ip6).
	icmpx4 = map[uint8]uint32{0: 0, 1: 3, 2: 1, 3: 8}
	icmpx6 = map[uint8]uint32{0: 0, 1: 4, 2: 3, 3: 1}
)

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

func (b *builder) nativeLog(l *expr.Log) bool {
	// A group makes it NFLOG; iptables-nft writes NFLOG natively.
	if l.Key&(1<<unix.NFTA_LOG_GROUP) != 0 {
		if l.Key&(1<<unix.NFTA_LOG_LEVEL|1<<unix.NFTA_LOG_FLAGS) != 0 {
			return false
		}
		var threshold uint16
		if l.Key&(1<<unix.NFTA_LOG_QTHRESHOLD) != 0 {
			threshold = l.QThreshold
		}
		b.target(strings.TrimSpace("NFLOG " + nflogText(cString(l.Data), l.Group, threshold,
			l.Key&(1<<unix.NFTA_LOG_SNAPLEN) != 0, l.Snaplen)))
		return true
	}
	level := uint32(4)
	if l.Key&(1<<unix.NFTA_LOG_LEVEL) != 0 {
		level = uint32(l.Level)
	}
	b.target(logText(level, uint32(l.Flags), cString(l.Data)))
	return true
}

// regAddr is the address an immediate put in reg for nat or tproxy, of
// the expression's family (fam, NFPROTO_IPV4 or _IPV6): the kernel sizes
// the address by it, not by the table's, which in an inet table is
// neither.
func (b *builder) regAddr(reg, fam uint32) (netip.Addr, bool) {
	var n uint32
	switch fam {
	case unix.NFPROTO_IPV4:
		n = 4
	case unix.NFPROTO_IPV6:
		n = 16
	default:
		return netip.Addr{}, false
	}
	s := b.reg(reg, n)
	if s == nil || s.kind != "imm" || uint32(len(s.data)) != n {
		return netip.Addr{}, false
	}
	return netip.AddrFromSlice(s.data)
}

func (b *builder) regPort(reg uint32) (uint16, bool) {
	s := b.reg(reg, 2)
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
		lo, ok := b.regAddr(n.RegAddrMin, n.Family)
		if !ok {
			return false
		}
		hi := lo
		if n.RegAddrMax != 0 && n.RegAddrMax != n.RegAddrMin {
			if hi, ok = b.regAddr(n.RegAddrMax, n.Family); !ok {
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
		if ip, ok = b.regAddr(t.RegAddr, uint32(t.Family)); !ok {
			return false
		}
	}
	b.target(tproxyText(port, ip, 0, 0))
	return true
}

func (b *builder) nativeLimit(l *expr.Limit) bool {
	if l.Type != expr.LimitTypePkts || l.Rate == 0 {
		return false
	}
	avg := uint64(limitScale) * uint64(l.Unit) / l.Rate
	if avg == 0 || avg > math.MaxUint32 {
		return false
	}
	b.limit(uint32(avg), l.Burst, l.Over)
	return true
}

// ARP header fields (Ethernet/IPv4 ARP, as arptables-nft writes them):
// hardware type, protocol type, lengths, opcode, then sender and target
// hardware and protocol addresses.
func (b *builder) arpCmp(s *source, neg bool, data []byte) bool {
	mask := s.mask
	if mask != nil && (len(mask) != len(data) || !allZero(s.xor)) {
		return false
	}
	val := func() uint32 {
		var v uint32
		for _, c := range data {
			v = v<<8 | uint32(c)
		}
		return v
	}
	withMask := func(t string) string {
		if mask == nil {
			return t
		}
		var m uint32
		for _, c := range mask {
			m = m<<8 | uint32(c)
		}
		return t + fmt.Sprintf("/0x%x", m)
	}
	switch {
	case s.off == 0 && s.len == 2:
		// arptables-nft adds "htype 1" (Ethernet) to every rule.
		if val() == 1 && !neg && mask == nil {
			return true
		}
		b.add(rankProtoOpt, "1", negPrefix(neg)+"--h-type "+withMask(strconv.Itoa(int(val()))))
	case s.off == 2 && s.len == 2:
		b.add(rankProtoOpt, "4", negPrefix(neg)+"--proto-type "+withMask(fmt.Sprintf("0x%x", val())))
	case s.off == 4 && s.len == 1:
		if val() == 6 && !neg && mask == nil {
			return true
		}
		b.add(rankProtoOpt, "2", negPrefix(neg)+"--h-length "+withMask(strconv.Itoa(int(val()))))
	case s.off == 5 && s.len == 1:
		// The protocol length (4, IPv4) comes with every address match.
		return val() == 4 && !neg && mask == nil
	case s.off == 6 && s.len == 2:
		b.add(rankProtoOpt, "3", negPrefix(neg)+"--opcode "+withMask(strconv.Itoa(int(val()))))
	case (s.off == 8 || s.off == 18) && s.len == 6:
		opt, rank := "--src-mac ", rankSrc
		if s.off == 18 {
			opt, rank = "--dst-mac ", rankDst
		}
		b.add(rank, "mac", negPrefix(neg)+opt+macMaskText(data, mask))
	case (s.off >= 14 && s.off+s.len <= 18) || (s.off >= 24 && s.off+s.len <= 28):
		opt, rank, at := "-s ", rankSrc, uint32(14)
		if s.off >= 24 {
			opt, rank, at = "-d ", rankDst, 24
		}
		addr, m := make([]byte, 4), make([]byte, 4)
		for k := uint32(0); k < s.len; k++ {
			mk := byte(0xff)
			if mask != nil {
				mk = mask[k]
			}
			m[s.off-at+k], addr[s.off-at+k] = mk, data[k]&mk
		}
		b.add(rank, "", negPrefix(neg)+opt+addrText(addr, m))
	default:
		return false
	}
	return true
}

// etherCmp is an ebtables-nft link-layer match: destination and source
// MAC, and the Ethernet protocol.
func (b *builder) etherCmp(s *source, neg bool, data []byte) bool {
	if s.mask != nil && (len(s.mask) != len(data) || !allZero(s.xor)) {
		return false
	}
	switch {
	case s.off+s.len <= 6 || s.off >= 6 && s.off+s.len <= 12:
		// ebtables-nft loads only the bytes a MAC mask covers; rebuild it.
		opt, rank, at := "-d ", rankDst, uint32(0)
		if s.off >= 6 {
			opt, rank, at = "-s ", rankSrc, 6
		}
		mac, mask := make([]byte, 6), make([]byte, 6)
		for k := uint32(0); k < s.len; k++ {
			m := byte(0xff)
			if s.mask != nil {
				m = s.mask[k]
			}
			mask[s.off-at+k], mac[s.off-at+k] = m, data[k]&m
		}
		b.add(rank, "", negPrefix(neg)+opt+macMaskText(mac, mask))
	case s.off == 12 && s.len == 2 && s.mask == nil:
		b.add(rankProto, "", negPrefix(neg)+"-p "+etherType(be16(data)))
	default:
		return false
	}
	return true
}

// etherLength: "-p Length" (an 802.3 length field, not a protocol) is
// "ether type < 0x0600"; its negation ">= 0x0600".
func (b *builder) etherLength(s *source, op expr.CmpOp, data []byte) bool {
	if b.fam != inspect.Bridge || s.kind != "payload" || s.base != unix.NFT_PAYLOAD_LL_HEADER || s.off != 12 || s.len != 2 ||
		s.mask != nil || len(data) != 2 || be16(data) != 0x0600 {
		return false
	}
	switch op {
	case expr.CmpOpLt:
		b.add(rankProto, "", "-p Length")
	case expr.CmpOpGte:
		b.add(rankProto, "", "! -p Length")
	default:
		return false
	}
	return true
}
