package render

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
)

// This file decodes xt-compat match info blobs by hand from the kernel's
// struct layouts (x86_64/arm64: 64-bit longs and pointers, host byte
// order), revision by revision. google/nftables' xt package knows only a
// few and fails the whole rule on a bad one; a blob we do not know, or
// whose size is off, becomes one opaque token here.

func (b *builder) xtMatchKnown(x xtInfo) bool {
	i := x.info
	switch {
	case x.name == "tcp" && x.rev == 0 && len(i) >= 12:
		inv := i[11]
		b.xtPorts(u16(i, 0), u16(i, 2), inv&1 != 0, u16(i, 4), u16(i, 6), inv&2 != 0)
		if i[9] != 0 || inv&4 != 0 {
			b.add(rankProtoOpt, optKey["flags"], tcpFlagsText(inv&4 != 0, i[9], i[10]))
		}
		if i[8] != 0 {
			b.add(rankProtoOpt, optKey["option"], negPrefix(inv&8 != 0)+"--tcp-option "+strconv.Itoa(int(i[8])))
		}
	case x.name == "udp" && x.rev == 0 && len(i) >= 9:
		inv := i[8]
		b.xtPorts(u16(i, 0), u16(i, 2), inv&1 != 0, u16(i, 4), u16(i, 6), inv&2 != 0)
	case (x.name == "icmp" && b.fam == inspect.IP || x.name == "icmp6" && b.fam == inspect.IP6) && x.rev == 0 && len(i) >= 4:
		b.add(rankProtoOpt, optKey["icmp"], negPrefix(i[3]&1 != 0)+icmpText(b.fam, int(i[0]), int(i[1]), int(i[2])))
	case x.name == "comment" && x.rev == 0 && len(i) >= 1:
		b.module("comment", "--comment "+safetext.Quote(cString(i), MaxField))
	case x.name == "mark" && x.rev == 1 && len(i) >= 9:
		b.module("mark", negPrefix(i[8] != 0)+"--mark "+markText(u32(i, 0), u32(i, 4)))
	case x.name == "mark" && x.rev == 0 && len(i) >= 17:
		m, k := u64(i, 0), u64(i, 8)
		if m > math.MaxUint32 || k > math.MaxUint32 {
			return false
		}
		b.module("mark", negPrefix(i[16] != 0)+"--mark "+markText(uint32(m), uint32(k)))
	case x.name == "limit" && x.rev == 0 && len(i) >= 8:
		b.limit(u32(i, 0), u32(i, 4), false)
	case x.name == "state" && x.rev == 0 && len(i) >= 4:
		b.module("conntrack", "--ctstate "+maskNames(u32(i, 0), ctStateXTState))
	case x.name == "conntrack" && x.rev >= 1 && x.rev <= 3:
		return b.conntrack(x.rev, i)
	case x.name == "multiport" && (x.rev == 0 && len(i) >= 32 || x.rev == 1 && len(i) >= 48):
		return b.multiport(x.rev, i)
	case x.name == "addrtype" && x.rev == 1 && len(i) >= 8:
		b.addrtype(u16(i, 0), u16(i, 2), u32(i, 4)&1 != 0, u32(i, 4)&2 != 0, u32(i, 4)&^3)
	case x.name == "addrtype" && x.rev == 0 && len(i) >= 12:
		b.addrtype(u16(i, 0), u16(i, 2), u32(i, 4) != 0, u32(i, 8) != 0, 0)
	case x.name == "owner" && x.rev == 1 && len(i) >= 18:
		return b.owner(i)
	case x.name == "statistic" && x.rev == 0 && len(i) >= 16:
		return b.statistic(i)
	case x.name == "set" && x.rev >= 1 && x.rev <= 4 && len(i) >= 4:
		return b.set(x.rev, i)
	default:
		return false
	}
	return true
}

// xtPorts renders xt tcp/udp port ranges; 0:65535 is "any" and omitted.
func (b *builder) xtPorts(slo, shi uint16, sinv bool, dlo, dhi uint16, dinv bool) {
	if slo != 0 || shi != 0xffff || sinv {
		b.add(rankProtoOpt, optKey["sport"], negPrefix(sinv)+"--sport "+portRange(slo, shi))
	}
	if dlo != 0 || dhi != 0xffff || dinv {
		b.add(rankProtoOpt, optKey["dport"], negPrefix(dinv)+"--dport "+portRange(dlo, dhi))
	}
}

func (b *builder) conntrack(rev uint32, i []byte) bool {
	need := map[uint32]int{1: 150, 2: 154, 3: 162}[rev]
	if len(i) < need {
		return false
	}
	var flags, inv, state, status uint32
	if rev == 1 {
		flags, inv, state, status = uint32(i[146]), uint32(i[147]), uint32(i[148]), uint32(i[149])
	} else {
		flags, inv, state, status = uint32(u16(i, 146)), uint32(u16(i, 148)), uint32(u16(i, 150)), uint32(u16(i, 152))
	}
	const (
		fState, fProto, fOrigSrc, fOrigDst, fReplSrc, fReplDst, fStatus, fExpires = 1, 2, 4, 8, 16, 32, 64, 128
		fOrigSrcPort, fOrigDstPort, fReplSrcPort, fReplDstPort, fDir              = 256, 512, 1024, 2048, 4096
	)
	var s []string
	opt := func(f uint32, text string) {
		if flags&f != 0 {
			s = append(s, negPrefix(inv&f != 0)+text)
		}
	}
	opt(fState, "--ctstate "+maskNames(state, ctStateConntrack))
	opt(fProto, "--ctproto "+protoName(b.fam, int(u16(i, 136))))
	for k, o := range []struct {
		f   uint32
		opt string
	}{{fOrigSrc, "--ctorigsrc"}, {fOrigDst, "--ctorigdst"}, {fReplSrc, "--ctreplsrc"}, {fReplDst, "--ctrepldst"}} {
		a, ab := b.inetAddr(i, 32*k)
		_, mb := b.inetAddr(i, 32*k+16)
		_ = a
		opt(o.f, o.opt+" "+addrText(maskBytes(ab, mb), mb))
	}
	for k, o := range []struct {
		f   uint32
		opt string
	}{{fOrigSrcPort, "--ctorigsrcport"}, {fOrigDstPort, "--ctorigdstport"}, {fReplSrcPort, "--ctreplsrcport"}, {fReplDstPort, "--ctrepldstport"}} {
		// Revisions 1 and 2 compare the port as sent (network order);
		// revision 3 keeps host-order ranges.
		lo := binary.BigEndian.Uint16(i[138+2*k:])
		hi := lo
		if rev == 3 {
			lo, hi = u16(i, 138+2*k), u16(i, 154+2*k)
		}
		opt(o.f, o.opt+" "+portRange(lo, hi))
	}
	opt(fStatus, "--ctstatus "+maskNames(status, ctStatus))
	if flags&fExpires != 0 {
		lo, hi := u32(i, 128), u32(i, 132)
		s = append(s, negPrefix(inv&fExpires != 0)+"--ctexpire "+portRangeU32(lo, hi))
	}
	if flags&fDir != 0 {
		d := "ORIGINAL"
		if inv&fDir != 0 {
			d = "REPLY"
		}
		s = append(s, "--ctdir "+d)
	}
	if rest := flags &^ 0x3fff; rest != 0 {
		s = append(s, fmt.Sprintf("--ctflags-unknown 0x%x", rest))
	}
	b.module("conntrack", strings.Join(s, " "))
	return true
}

func maskBytes(a, m []byte) []byte {
	out := make([]byte, len(a))
	for k := range a {
		out[k] = a[k] & m[k]
	}
	return out
}

// multiport sorts its entries: the order of a port list carries no meaning.
func (b *builder) multiport(rev uint32, i []byte) bool {
	flags, count := i[0], int(i[1])
	if count > 15 || flags > 2 {
		return false
	}
	type entry struct{ lo, hi uint16 }
	var es []entry
	for k := 0; k < count; k++ {
		lo := u16(i, 2+2*k)
		hi := lo
		if rev == 1 && i[32+k] != 0 && k+1 < count {
			hi = u16(i, 2+2*(k+1))
			k++
		}
		es = append(es, entry{lo, hi})
	}
	sort.Slice(es, func(a, c int) bool {
		if es[a].lo != es[c].lo {
			return es[a].lo < es[c].lo
		}
		return es[a].hi < es[c].hi
	})
	var ps []string
	for _, e := range es {
		ps = append(ps, portRange(e.lo, e.hi))
	}
	opt := []string{"--sports ", "--dports ", "--ports "}[flags]
	inv := rev == 1 && i[47] != 0
	b.module("multiport", negPrefix(inv)+opt+strings.Join(ps, ","))
	return true
}

var addrTypes = bitFlags("UNSPEC", "UNICAST", "LOCAL", "BROADCAST", "ANYCAST", "MULTICAST",
	"BLACKHOLE", "UNREACHABLE", "PROHIBIT", "THROW", "NAT", "XRESOLVE")

func (b *builder) addrtype(src, dst uint16, invSrc, invDst bool, flags uint32) {
	var s []string
	if src != 0 {
		s = append(s, negPrefix(invSrc)+"--src-type "+maskNames(uint32(src), addrTypes))
	}
	if dst != 0 {
		s = append(s, negPrefix(invDst)+"--dst-type "+maskNames(uint32(dst), addrTypes))
	}
	if flags&4 != 0 {
		s = append(s, "--limit-iface-in")
	}
	if flags&8 != 0 {
		s = append(s, "--limit-iface-out")
	}
	if rest := flags &^ 0xc; rest != 0 {
		s = append(s, fmt.Sprintf("--addrtype-flags-unknown 0x%x", rest))
	}
	b.module("addrtype", strings.Join(s, " "))
}

func (b *builder) owner(i []byte) bool {
	match, inv := i[16], i[17]
	const socket, uid, gid, suppl = 4, 1, 2, 8
	if match&^0xf != 0 {
		return false
	}
	var s []string
	if match&socket != 0 {
		s = append(s, negPrefix(inv&socket != 0)+"--socket-exists")
	}
	if match&uid != 0 {
		s = append(s, negPrefix(inv&uid != 0)+"--uid-owner "+idRange(u32(i, 0), u32(i, 4)))
	}
	if match&gid != 0 {
		s = append(s, negPrefix(inv&gid != 0)+"--gid-owner "+idRange(u32(i, 8), u32(i, 12)))
	}
	if match&suppl != 0 {
		s = append(s, "--suppl-groups")
	}
	b.module("owner", strings.Join(s, " "))
	return true
}

func (b *builder) statistic(i []byte) bool {
	mode, flags := u16(i, 0), u16(i, 2)
	neg := negPrefix(flags&1 != 0)
	switch mode {
	case 0:
		p := float64(u32(i, 4)) / 0x80000000
		b.module("statistic", fmt.Sprintf("--mode random %s--probability %.11f", neg, p))
	case 1:
		b.module("statistic", fmt.Sprintf("--mode nth %s--every %d --packet %d", neg, uint64(u32(i, 4))+1, u32(i, 8)))
	default:
		return false
	}
	return true
}

// set: the rule holds the set's kernel index, not its name (the name lives
// in ipset, per netns), so the text says "id:N".
func (b *builder) set(rev uint32, i []byte) bool {
	index, dim, flags := u16(i, 0), int(i[2]), i[3]
	if dim < 1 || dim > 6 {
		return false
	}
	var dirs []string
	for d := 1; d <= dim; d++ {
		if flags&(1<<d) != 0 {
			dirs = append(dirs, "src")
		} else {
			dirs = append(dirs, "dst")
		}
	}
	s := negPrefix(flags&1 != 0) + fmt.Sprintf("--match-set id:%d %s", index, strings.Join(dirs, ","))
	if flags&0x80 != 0 {
		s += " --return-nomatch"
	}
	// Revisions 3 and 4 add counter matches and flags; zero means unused.
	if rest := i[4:]; !allZero(rest) {
		s += " --set-opts" + blob(bytes.TrimRight(rest, "\x00"))
	}
	b.module("set", s)
	return true
}
