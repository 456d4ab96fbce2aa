package render

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
	"net/netip"
	"strconv"
	"strings"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"golang.org/x/sys/unix"
)

// This file holds the one spelling of each meaning that native and xt
// decoders share (addresses, ports, marks, flags, conntrack states, limits,
// log, reject and nat options), and the readers of xt info fields.

func negPrefix(neg bool) string {
	if neg {
		return "! "
	}
	return ""
}

func be16(b []byte) uint16 { return binary.BigEndian.Uint16(b) }

// optKey orders the -p module's options as iptables-save prints them.
var optKey = map[string]string{"sport": "1", "dport": "2", "flags": "3", "option": "4", "icmp": "5"}

func portRange(lo, hi uint16) string {
	if lo == hi {
		return strconv.Itoa(int(lo))
	}
	return fmt.Sprintf("%d:%d", lo, hi)
}

func portRangeU32(lo, hi uint32) string {
	if lo == hi {
		return strconv.FormatUint(uint64(lo), 10)
	}
	return fmt.Sprintf("%d:%d", lo, hi)
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

func xmark(v, mask uint32) string { return fmt.Sprintf("0x%x/0x%x", v, mask) }

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
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
	case 108:
		return "ipcomp"
	case 135:
		return "mobility-header"
	}
	return strconv.Itoa(p)
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

var tcpFlags = bitFlags("FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR")

func tcpFlagList(f byte) string {
	if f == 0x3f {
		return "ALL"
	}
	return maskNames(uint32(f), tcpFlags)
}

// tcpFlagsText prints --syn for its exact meaning (mask FIN,SYN,RST,ACK,
// compare SYN) and --tcp-flags otherwise. The compare is printed whole, as
// iptables does: the kernel tests "flags & mask == cmp" (xt_tcp, and the
// native bitwise and cmp), so a compare bit outside the mask makes a test
// that never matches, not the test of the bits inside it.
func tcpFlagsText(neg bool, mask, cmp byte) string {
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

// bitName names one bit of a mask.
type bitName struct {
	bit  uint32
	name string
}

// bitFlags names bits by position: names[k] is bit 1<<k.
func bitFlags(names ...string) []bitName {
	f := make([]bitName, len(names))
	for k, n := range names {
		f[k] = bitName{1 << k, n}
	}
	return f
}

// maskNames spells a mask as the names of its bits, in the order of names
// (the order iptables prints them in), and what is left in hex, so two
// masks never read alike; an empty mask is NONE.
func maskNames(mask uint32, names []bitName) string {
	var n []string
	for _, f := range names {
		if mask&f.bit != 0 {
			n = append(n, f.name)
			mask &^= f.bit
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

// Conntrack state bits. INVALID, ESTABLISHED, RELATED and NEW sit at the
// same positions everywhere; the bits after them do not: nft's ct state has
// UNTRACKED at 0x40, xt_conntrack SNAT 0x40, DNAT 0x80 and UNTRACKED 0x100
// (1 << IP_CT_NUMBER+1..3), xt_state UNTRACKED at 0x40 too (XT_STATE_UNTRACKED,
// 1 << IP_CT_NUMBER+1: where xt_conntrack keeps SNAT).
var (
	ctStateBase      = []bitName{{1, "INVALID"}, {8, "NEW"}, {4, "RELATED"}, {2, "ESTABLISHED"}}
	ctStateNative    = append(ctStateBase[:4:4], bitName{0x40, "UNTRACKED"})
	ctStateConntrack = append(ctStateBase[:4:4], bitName{0x100, "UNTRACKED"}, bitName{0x40, "SNAT"}, bitName{0x80, "DNAT"})
	ctStateXTState   = append(ctStateBase[:4:4], bitName{0x40, "UNTRACKED"})
	ctStatus         = bitFlags("EXPECTED", "SEEN_REPLY", "ASSURED", "CONFIRMED")
)

// limitScale is XT_LIMIT_SCALE: xt_limit stores the average interval
// between packets in 1/10000 s.
const limitScale = 10000

// limit prints a rate the way iptables does (largest unit that keeps it
// exact), from the xt average interval; native limits convert to that
// interval first so both generations print alike. Burst 5 is the default.
func (b *builder) limit(avg, burst uint32, over bool) {
	if avg == 0 {
		b.module("limit", fmt.Sprintf("--limit-avg-unknown 0 --limit-burst %d", burst))
		return
	}
	r, _ := rateText(uint64(avg), limitScale)
	s := negPrefix(over) + "--limit " + r
	if burst != 5 {
		s += fmt.Sprintf(" --limit-burst %d", burst)
	}
	b.module("limit", s)
}

// rateText prints a period (1/scale s between packets) as iptables does:
// the largest unit that keeps the rate exact. It also gives that unit in
// ms, hashlimit's default expiry. period must not be 0.
func rateText(period, scale uint64) (string, uint64) {
	units := []struct {
		name string
		mult uint64
	}{{"day", scale * 86400}, {"hour", scale * 3600}, {"min", scale * 60}, {"sec", scale}}
	i := 1
	for ; i < len(units); i++ {
		if period > units[i].mult || units[i].mult/period < units[i].mult%period {
			break
		}
	}
	return fmt.Sprintf("%d/%s", units[i-1].mult/period, units[i-1].name), units[i-1].mult / scale * 1000
}

// Reject: xt REJECT stores an enum per family (native reject codes map to
// it in native.go); the default (port unreachable) is omitted.
var (
	reject4 = map[uint32]string{0: "icmp-net-unreachable", 1: "icmp-host-unreachable", 2: "icmp-proto-unreachable",
		3: "", 4: "echo-reply", 5: "icmp-net-prohibited", 6: "icmp-host-prohibited", 7: "tcp-reset", 8: "icmp-admin-prohibited"}
	reject6 = map[uint32]string{0: "icmp6-no-route", 1: "icmp6-adm-prohibited", 2: "icmp6-not-neighbour",
		3: "icmp6-addr-unreachable", 4: "", 5: "echo-reply", 6: "tcp-reset", 7: "icmp6-policy-fail", 8: "icmp6-reject-route"}
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

// Log flags share their bits between xt_LOG and nft log.
var logFlagNames = []struct {
	bit  uint32
	name string
}{{0x01, "--log-tcp-sequence"}, {0x02, "--log-tcp-options"}, {0x04, "--log-ip-options"}, {0x08, "--log-uid"}, {0x20, "--log-macdecode"}}

func logText(level uint32, flags uint32, prefix string) string {
	s := "LOG"
	if prefix != "" {
		s += " --log-prefix " + safetext.Quote(prefix, MaxField)
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

var ne = binary.NativeEndian

func u16(b []byte, off int) uint16 { return ne.Uint16(b[off:]) }

func u32(b []byte, off int) uint32 { return ne.Uint32(b[off:]) }

func u64(b []byte, off int) uint64 { return ne.Uint64(b[off:]) }

// inetAddr reads a union nf_inet_addr (16 bytes) for the rule's family.
func (b *builder) inetAddr(buf []byte, off int) (netip.Addr, []byte) {
	if b.fam == inspect.IP6 {
		return netip.AddrFrom16([16]byte(buf[off : off+16])), buf[off : off+16]
	}
	return netip.AddrFrom4([4]byte(buf[off : off+4])), buf[off : off+4]
}

// macText prints a MAC address as iptables does: lower-case hex, colons.
func macText(m []byte) string {
	s := make([]string, len(m))
	for k, c := range m {
		s[k] = fmt.Sprintf("%02x", c)
	}
	return strings.Join(s, ":")
}

// flagOptions prints one option per set bit: names[k] is bit 1<<k.
func flagOptions(m uint32, names ...string) string {
	var s []string
	for k, n := range names {
		if m&(1<<k) != 0 {
			s = append(s, n)
		}
	}
	return strings.Join(s, " ")
}

// ones counts the set bits of a mask.
func ones(m []byte) int {
	n := 0
	for _, c := range m {
		n += bits.OnesCount8(c)
	}
	return n
}

// prefixText is an address with its mask always shown, as /len when the
// mask is a prefix (policy's --tunnel-src 10.0.0.0/8, also for /32).
func prefixText(addr, mask []byte) string {
	t := addrText(addr, mask)
	if !strings.Contains(t, "/") {
		t += "/" + strconv.Itoa(ones(mask))
	}
	return t
}

// groupText is a device group: 0xV, or 0xV/0xM when masked.
func groupText(v, m uint32) string {
	if m == 0xffffffff {
		return fmt.Sprintf("0x%x", v)
	}
	return fmt.Sprintf("0x%x/0x%x", v, m)
}

// addrTypes are the route types addrtype and fib name (RTN_*).
var addrTypes = bitFlags("UNSPEC", "UNICAST", "LOCAL", "BROADCAST", "ANYCAST", "MULTICAST",
	"BLACKHOLE", "UNREACHABLE", "PROHIBIT", "THROW", "NAT", "XRESOLVE")

// nflogText is what NFLOG prints, from xt_nflog_info or a native log
// expression with a group.
func nflogText(prefix string, group, threshold uint16, copyLen bool, size uint32) string {
	var s []string
	if prefix != "" {
		s = append(s, "--nflog-prefix "+safetext.Quote(prefix, MaxField))
	}
	if group != 0 {
		s = append(s, "--nflog-group "+strconv.Itoa(int(group)))
	}
	if copyLen {
		s = append(s, "--nflog-size "+strconv.FormatUint(uint64(size), 10))
	}
	if threshold != 0 {
		s = append(s, "--nflog-threshold "+strconv.Itoa(int(threshold)))
	}
	return strings.Join(s, " ")
}

// macMaskText is a MAC address with its mask when it has one.
func macMaskText(mac, mask []byte) string {
	if mask == nil || bytes.Equal(mask, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}) {
		return macText(mac)
	}
	m := make([]byte, len(mac))
	for k := range mac {
		m[k] = mac[k] & mask[k]
	}
	return macText(m) + "/" + macText(mask)
}

// etherTypes names Ethernet protocols as ebtables' /etc/ethertypes does;
// a fixed table, so the text does not depend on the rendering machine.
var etherTypes = map[uint16]string{0x0800: "IPv4", 0x0805: "X25", 0x0806: "ARP", 0x8035: "RARP", 0x809b: "ATALK",
	0x80f3: "AARP", 0x8100: "802_1Q", 0x8137: "IPX", 0x86dd: "IPv6", 0x880b: "PPP", 0x8863: "PPP_DISC", 0x8864: "PPP_SES", 0x9000: "LOOP"}

func etherType(t uint16) string {
	if n, ok := etherTypes[t]; ok {
		return n
	}
	return fmt.Sprintf("0x%04x", t)
}

// ebVerdict names the verdict an ebtables target continues with.
func ebVerdict(v int32) string {
	switch v {
	case -1:
		return "ACCEPT"
	case -2:
		return "DROP"
	case -3:
		return "CONTINUE"
	case -4:
		return "RETURN"
	}
	return strconv.Itoa(int(v))
}
