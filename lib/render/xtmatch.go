package render

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"time"

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
		// A mask of 0 with a compare that is not is a test that never
		// matches (flags & 0 == cmp): it is no default to leave out.
		if i[9] != 0 || i[10] != 0 || inv&4 != 0 {
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
		neg, ok := xorInvert(uint32(i[8]))
		if !ok {
			return false
		}
		b.module("mark", negPrefix(neg)+"--mark "+markText(u32(i, 0), u32(i, 4)))
	case x.name == "mark" && x.rev == 0 && len(i) >= 17:
		m, k := u64(i, 0), u64(i, 8)
		neg, ok := xorInvert(uint32(i[16]))
		if m > math.MaxUint32 || k > math.MaxUint32 || !ok {
			return false
		}
		b.module("mark", negPrefix(neg)+"--mark "+markText(uint32(m), uint32(k)))
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
		if d, ok := xtMatches[x.name]; ok {
			return d(b, x.rev, i)
		}
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
// in ipset, per netns): the text says the name when the caller read it, and
// "id:N" otherwise.
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
	set := fmt.Sprintf("id:%d", index)
	if name, ok := b.names.Sets[index]; ok {
		set = safetext.Name(name, MaxField)
	}
	s := negPrefix(flags&1 != 0) + "--match-set " + set + " " + strings.Join(dirs, ",")
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

// xorInvert reads the invert field of a match whose kernel code returns
// "(test) ^ info->invert" and never checks the field when the rule is
// loaded (xt_mark, xt_connmark, xt_length, xt_tcpmss, xt_realm,
// xt_pkttype, xt_mac, xt_u32): 1 negates the test, but 2 or more makes
// the match true for every packet, which no "!" spells, so ok is false
// and the match stays opaque. dscp, tos and ebtables' pkttype are not
// among them: their kernel code uses !!invert or refuses other values.
func xorInvert(v uint32) (neg, ok bool) { return v == 1, v <= 1 }

// xtMatchDecoder renders one xt match from its revision and info blob;
// false means "not understood" (the match then shows as an opaque token).
// Each checks the size it reads.
type xtMatchDecoder func(b *builder, rev uint32, i []byte) bool

// xtMatches holds the matches xtMatchKnown does not; each prints what
// iptables-nft-save prints for it, options in its order.
var xtMatches = map[string]xtMatchDecoder{
	"connmark": func(b *builder, rev uint32, i []byte) bool {
		if rev != 1 || len(i) < 9 {
			return false
		}
		neg, ok := xorInvert(uint32(i[8]))
		if !ok {
			return false
		}
		b.module("connmark", negPrefix(neg)+"--mark "+markText(u32(i, 0), u32(i, 4)))
		return true
	},
	"recent":    xtRecent,
	"hashlimit": xtHashlimit,
	"nfacct": func(b *builder, rev uint32, i []byte) bool {
		if rev > 1 || len(i) < 32 {
			return false
		}
		b.module("nfacct", "--nfacct-name "+safetext.Name(cString(i[:32]), MaxField))
		return true
	},
	"ttl": func(b *builder, rev uint32, i []byte) bool { return b.ttlMatch("ttl", rev, i) },
	"hl":  func(b *builder, rev uint32, i []byte) bool { return b.ttlMatch("hl", rev, i) },
	"pkttype": func(b *builder, rev uint32, i []byte) bool {
		// ebtables' pkttype is struct ebt_pkttype_info: two bytes.
		if b.fam == inspect.Bridge && rev == 0 && len(i) >= 2 {
			names := []string{"host", "broadcast", "multicast", "otherhost", "outgoing", "loopback"}
			t := strconv.Itoa(int(i[0]))
			if int(i[0]) < len(names) {
				t = names[i[0]]
			}
			b.module("pkttype", negPrefix(i[1] != 0)+"--pkttype-type "+t)
			return true
		}
		if rev != 0 || len(i) < 8 {
			return false
		}
		neg, ok := xorInvert(u32(i, 4))
		if !ok {
			return false
		}
		b.module("pkttype", negPrefix(neg)+"--pkt-type "+pktTypeName(u32(i, 0)))
		return true
	},
	"mac": func(b *builder, rev uint32, i []byte) bool {
		if rev != 0 || len(i) < 12 {
			return false
		}
		neg, ok := xorInvert(u32(i, 8))
		if !ok {
			return false
		}
		b.module("mac", negPrefix(neg)+"--mac-source "+macText(i[:6]))
		return true
	},
	"rpfilter": func(b *builder, rev uint32, i []byte) bool {
		if rev != 0 || len(i) < 1 || i[0]&^0xf != 0 {
			return false
		}
		b.module("rpfilter", flagOptions(uint32(i[0]), "--loose", "--validmark", "--accept-local", "--invert"))
		return true
	},
	"socket": func(b *builder, rev uint32, i []byte) bool {
		if rev == 0 {
			b.module("socket", "")
			return true
		}
		if rev > 3 || len(i) < 1 || i[0]&^7 != 0 {
			return false
		}
		b.module("socket", flagOptions(uint32(i[0]), "--transparent", "--nowildcard", "--restore-skmark"))
		return true
	},
	"physdev": xtPhysdev,
	"tcpmss": func(b *builder, rev uint32, i []byte) bool {
		if rev != 0 || len(i) < 5 {
			return false
		}
		neg, ok := xorInvert(uint32(i[4]))
		if !ok {
			return false
		}
		b.module("tcpmss", negPrefix(neg)+"--mss "+portRange(u16(i, 0), u16(i, 2)))
		return true
	},
	"length": func(b *builder, rev uint32, i []byte) bool {
		if rev != 0 || len(i) < 5 {
			return false
		}
		neg, ok := xorInvert(uint32(i[4]))
		if !ok {
			return false
		}
		b.module("length", negPrefix(neg)+"--length "+portRange(u16(i, 0), u16(i, 2)))
		return true
	},
	"dscp": func(b *builder, rev uint32, i []byte) bool {
		if rev != 0 || len(i) < 2 {
			return false
		}
		b.module("dscp", negPrefix(i[1] != 0)+fmt.Sprintf("--dscp 0x%02x", i[0]))
		return true
	},
	"tos": func(b *builder, rev uint32, i []byte) bool {
		if rev != 1 || len(i) < 3 {
			return false
		}
		b.module("tos", negPrefix(i[2] != 0)+fmt.Sprintf("--tos 0x%02x/0x%02x", i[1], i[0]))
		return true
	},
	"ecn": func(b *builder, rev uint32, i []byte) bool {
		if rev != 0 || len(i) < 3 {
			return false
		}
		op, inv := i[0], i[1]
		var s []string
		if op&0x10 != 0 {
			s = append(s, negPrefix(inv&0x10 != 0)+"--ecn-tcp-ece")
		}
		if op&0x20 != 0 {
			s = append(s, negPrefix(inv&0x20 != 0)+"--ecn-tcp-cwr")
		}
		if op&1 != 0 {
			s = append(s, negPrefix(inv&1 != 0)+"--ecn-ip-ect "+strconv.Itoa(int(i[2])))
		}
		b.module("ecn", strings.Join(s, " "))
		return true
	},
	"cpu": func(b *builder, rev uint32, i []byte) bool {
		if rev != 0 || len(i) < 8 {
			return false
		}
		b.module("cpu", negPrefix(u32(i, 4) != 0)+"--cpu "+strconv.FormatUint(uint64(u32(i, 0)), 10))
		return true
	},
	"quota": func(b *builder, rev uint32, i []byte) bool {
		if rev != 0 || len(i) < 16 {
			return false
		}
		b.module("quota", negPrefix(u32(i, 0)&1 != 0)+"--quota "+strconv.FormatUint(u64(i, 8), 10))
		return true
	},
	"connbytes": func(b *builder, rev uint32, i []byte) bool {
		if rev != 0 || len(i) < 18 || i[16] > 2 || i[17] > 2 {
			return false
		}
		from, to := u64(i, 0), u64(i, 8)
		s := "--connbytes " + strconv.FormatUint(from, 10)
		switch {
		case to == math.MaxUint64:
		case from > to:
			s = "! --connbytes " + strconv.FormatUint(to, 10) + ":" + strconv.FormatUint(from, 10)
		default:
			s += ":" + strconv.FormatUint(to, 10)
		}
		s += " --connbytes-mode " + []string{"packets", "bytes", "avgpkt"}[i[16]]
		s += " --connbytes-dir " + []string{"original", "reply", "both"}[i[17]]
		b.module("connbytes", s)
		return true
	},
	"connlimit": func(b *builder, rev uint32, i []byte) bool {
		if rev > 1 || len(i) < 24 {
			return false
		}
		_, mask := b.inetAddr(i, 0)
		limit, flags := u32(i, 16), u32(i, 20)
		s := "--connlimit-above "
		if flags&1 != 0 {
			s = "--connlimit-upto "
		}
		s += strconv.FormatUint(uint64(limit), 10) + " --connlimit-mask " + strconv.Itoa(ones(mask))
		if rev == 1 {
			if flags&2 != 0 {
				s += " --connlimit-daddr"
			} else {
				s += " --connlimit-saddr"
			}
		}
		b.module("connlimit", s)
		return true
	},
	"esp":    func(b *builder, rev uint32, i []byte) bool { return b.spiMatch("esp", "--espspi", rev, i, 8) },
	"ipcomp": func(b *builder, rev uint32, i []byte) bool { return b.spiMatch("ipcomp", "--ipcompspi", rev, i, 8) },
	"ah":     xtAH,
	"frag":   xtFrag,
	"mh": func(b *builder, rev uint32, i []byte) bool {
		if rev != 0 || len(i) < 3 {
			return false
		}
		s := ""
		if i[0] != 0 || i[1] != 0xff {
			s = negPrefix(i[2]&1 != 0) + "--mh-type " + portRange(uint16(i[0]), uint16(i[1]))
		}
		b.module("mh", s)
		return true
	},
	"rt":         xtRT,
	"hbh":        func(b *builder, rev uint32, i []byte) bool { return b.optsMatch("hbh", rev, i) },
	"dst":        func(b *builder, rev uint32, i []byte) bool { return b.optsMatch("dst", rev, i) },
	"ipv6header": xtIPv6Header,
	"srh":        xtSRH,
	"iprange": func(b *builder, rev uint32, i []byte) bool {
		if rev != 1 || len(i) < 65 {
			return false
		}
		flags := i[64]
		var s []string
		for k, opt := range []string{"--src-range ", "--dst-range "} {
			if flags&(1<<k) != 0 {
				lo, _ := b.inetAddr(i, 32*k)
				hi, _ := b.inetAddr(i, 32*k+16)
				s = append(s, negPrefix(flags&(0x10<<k) != 0)+opt+lo.String()+"-"+hi.String())
			}
		}
		b.module("iprange", strings.Join(s, " "))
		return true
	},
	"cgroup": xtCgroup,
	"connlabel": func(b *builder, rev uint32, i []byte) bool {
		if rev != 0 || len(i) < 4 || u16(i, 2)&^3 != 0 {
			return false
		}
		s := negPrefix(u16(i, 2)&1 != 0) + `--label "` + strconv.Itoa(int(u16(i, 0))) + `"`
		if u16(i, 2)&2 != 0 {
			s += " --set"
		}
		b.module("connlabel", s)
		return true
	},
	"realm": func(b *builder, rev uint32, i []byte) bool {
		if rev != 0 || len(i) < 9 {
			return false
		}
		neg, ok := xorInvert(uint32(i[8]))
		if !ok {
			return false
		}
		s := fmt.Sprintf("0x%x", u32(i, 0))
		if m := u32(i, 4); m != 0xffffffff {
			s += fmt.Sprintf("/0x%x", m)
		}
		b.module("realm", negPrefix(neg)+"--realm "+s)
		return true
	},
	"helper": func(b *builder, rev uint32, i []byte) bool {
		if rev != 0 || len(i) < 34 {
			return false
		}
		b.module("helper", negPrefix(u32(i, 0) != 0)+"--helper "+safetext.Name(cString(i[4:34]), MaxField))
		return true
	},
	"eui64": func(b *builder, rev uint32, i []byte) bool {
		b.module("eui64", "")
		return rev == 0
	},
	"cluster": func(b *builder, rev uint32, i []byte) bool {
		if rev != 0 || len(i) < 16 {
			return false
		}
		b.module("cluster", negPrefix(u32(i, 12)&1 != 0)+fmt.Sprintf("--cluster-local-nodemask 0x%08x --cluster-total-nodes %d --cluster-hash-seed 0x%08x",
			u32(i, 4), u32(i, 0), u32(i, 8)))
		return true
	},
	"devgroup": func(b *builder, rev uint32, i []byte) bool {
		if rev != 0 || len(i) < 20 {
			return false
		}
		f := u32(i, 0)
		var s []string
		for k, opt := range []string{"--src-group ", "--dst-group "} {
			if f&(1<<(2*k)) != 0 {
				s = append(s, negPrefix(f&(2<<(2*k)) != 0)+opt+groupText(u32(i, 4+8*k), u32(i, 8+8*k)))
			}
		}
		b.module("devgroup", strings.Join(s, " "))
		return true
	},
	"string": xtString,
	"sctp":   xtSCTP,
	"dccp":   xtDCCP,
	"time":   xtTime,
	"u32":    xtU32,
	"policy": xtPolicy,
	"bpf":    xtBPF,
	"ip":     func(b *builder, rev uint32, i []byte) bool { return ebIP(b, rev, i, false) },
	"arp":    ebARP,
	"stp":    ebSTP,
	"ip6":    func(b *builder, rev uint32, i []byte) bool { return ebIP(b, rev, i, true) },
	"vlan": func(b *builder, rev uint32, i []byte) bool {
		if b.fam != inspect.Bridge || rev != 0 || len(i) < 8 || i[6]&^7 != 0 {
			return false
		}
		mask, inv := i[6], i[7]
		var s []string
		opt := func(bit byte, text string) {
			if mask&bit != 0 {
				s = append(s, negPrefix(inv&bit != 0)+text)
			}
		}
		opt(1, "--vlan-id "+strconv.Itoa(int(u16(i, 0))))
		opt(2, "--vlan-prio "+strconv.Itoa(int(i[2])))
		opt(4, "--vlan-encap "+etherType(binary.BigEndian.Uint16(i[4:])))
		b.module("vlan", strings.Join(s, " "))
		return true
	},
	"mark_m": func(b *builder, rev uint32, i []byte) bool {
		if b.fam != inspect.Bridge || rev != 0 || len(i) < 18 {
			return false
		}
		mark, mask, inv, op := u64(i, 0), u64(i, 8), i[16] != 0, i[17]
		t := fmt.Sprintf("0x%x/0x%x", mark, mask)
		switch {
		case op == 2: // EBT_MARK_OR: any bit of the mask
			t = fmt.Sprintf("/0x%x", mask)
		case op != 1:
			return false
		case mask == 0xffffffff || mask == math.MaxUint64:
			t = fmt.Sprintf("0x%x", mark)
		}
		b.module("mark_m", negPrefix(inv)+"--mark "+t)
		return true
	},
	"802_3": func(b *builder, rev uint32, i []byte) bool {
		if b.fam != inspect.Bridge || rev != 0 || len(i) < 6 || i[4]&^3 != 0 {
			return false
		}
		var s []string
		if i[4]&1 != 0 {
			s = append(s, negPrefix(i[5]&1 != 0)+fmt.Sprintf("--802_3-sap 0x%02x", i[0]))
		}
		if i[4]&2 != 0 {
			s = append(s, negPrefix(i[5]&2 != 0)+fmt.Sprintf("--802_3-type 0x%04x", binary.BigEndian.Uint16(i[2:])))
		}
		b.module("802_3", strings.Join(s, " "))
		return true
	},
	"osf": func(b *builder, rev uint32, i []byte) bool {
		if rev != 0 || len(i) < 48 || u32(i, 36)&^0xf != 0 {
			return false
		}
		f := u32(i, 36)
		s := negPrefix(f&8 != 0) + "--genre " + safetext.Name(cString(i[:32]), MaxField)
		if f&2 != 0 {
			s += " --ttl " + strconv.FormatUint(uint64(u32(i, 44)), 10)
		}
		if f&4 != 0 {
			s += " --log " + strconv.FormatUint(uint64(u32(i, 40)), 10)
		}
		b.module("osf", s)
		return true
	},
}

// pktTypeName is libxt_pkttype's name of a packet type, the number when
// it has none.
func pktTypeName(k uint32) string {
	names := []string{"unicast", "broadcast", "multicast", "otherhost", "outgoing", "loopback"}
	if k < uint32(len(names)) {
		return names[k]
	}
	return strconv.Itoa(int(int32(k)))
}

// ttlMatch is ipt_ttl and ip6t_hl: a mode (eq, ne, lt, gt) and a value.
func (b *builder) ttlMatch(name string, rev uint32, i []byte) bool {
	if rev != 0 || len(i) < 2 || i[0] > 3 {
		return false
	}
	opt := []string{"-eq ", "-eq ", "-lt ", "-gt "}[i[0]]
	b.module(name, negPrefix(i[0] == 1)+"--"+name+opt+strconv.Itoa(int(i[1])))
	return true
}

// spiMatch is xt_esp and xt_ipcomp (spis[2], invflags); the full range is
// no option at all.
func (b *builder) spiMatch(name, opt string, rev uint32, i []byte, invAt int) bool {
	if rev != 0 || len(i) < invAt+1 {
		return false
	}
	s := spiText(opt, u32(i, 0), u32(i, 4), i[invAt]&1 != 0)
	if name == "ipcomp" && len(i) > invAt+1 && i[invAt+1] != 0 {
		s = strings.TrimSpace(s + " --compres")
	}
	b.module(name, s)
	return true
}

// spiText prints a u32 range option; the full range is no option at all,
// negated or not, as iptables prints it.
func spiText(opt string, lo, hi uint32, inv bool) string {
	if lo == 0 && hi == 0xffffffff {
		return ""
	}
	return negPrefix(inv) + opt + " " + portRangeU32(lo, hi)
}

func xtAH(b *builder, rev uint32, i []byte) bool {
	if rev != 0 {
		return false
	}
	if b.fam != inspect.IP6 {
		return b.spiMatch("ah", "--ahspi", rev, i, 8)
	}
	if len(i) < 14 {
		return false
	}
	inv := i[13]
	s := []string{spiText("--ahspi", u32(i, 0), u32(i, 4), inv&1 != 0)}
	if u32(i, 8) != 0 || inv&2 != 0 {
		s = append(s, negPrefix(inv&2 != 0)+"--ahlen "+strconv.FormatUint(uint64(u32(i, 8)), 10))
	}
	if i[12] != 0 {
		s = append(s, "--ahres")
	}
	b.module("ah", joinNonEmpty(s))
	return true
}

func joinNonEmpty(s []string) string {
	var out []string
	for _, x := range s {
		if x != "" {
			out = append(out, x)
		}
	}
	return strings.Join(out, " ")
}

func xtFrag(b *builder, rev uint32, i []byte) bool {
	if rev != 0 || len(i) < 14 {
		return false
	}
	flags, inv := i[12], i[13]
	s := []string{spiText("--fragid", u32(i, 0), u32(i, 4), inv&1 != 0)}
	if flags&2 != 0 {
		s = append(s, negPrefix(inv&2 != 0)+"--fraglen "+strconv.FormatUint(uint64(u32(i, 8)), 10))
	}
	for k, opt := range []string{"--fragres", "--fragfirst", "--fragmore", "--fraglast"} {
		if flags&(4<<k) != 0 {
			s = append(s, opt)
		}
	}
	b.module("frag", joinNonEmpty(s))
	return true
}

func xtRT(b *builder, rev uint32, i []byte) bool {
	if rev != 0 || len(i) < 277 {
		return false
	}
	flags, inv := i[16], i[17]
	var s []string
	if flags&1 != 0 {
		s = append(s, negPrefix(inv&1 != 0)+"--rt-type "+strconv.FormatUint(uint64(u32(i, 0)), 10))
	}
	s = append(s, spiText("--rt-segsleft", u32(i, 4), u32(i, 8), inv&2 != 0))
	if flags&4 != 0 {
		s = append(s, negPrefix(inv&4 != 0)+"--rt-len "+strconv.FormatUint(uint64(u32(i, 12)), 10))
	}
	if flags&8 != 0 {
		s = append(s, "--rt-0-res")
	}
	if flags&0x10 != 0 {
		n := int(i[276])
		if n > 16 {
			return false
		}
		var a []string
		for k := 0; k < n; k++ {
			a = append(a, netip.AddrFrom16([16]byte(i[20+16*k:36+16*k])).String())
		}
		s = append(s, "--rt-0-addrs "+strings.Join(a, ","))
	}
	if flags&0x20 != 0 {
		s = append(s, "--rt-0-not-strict")
	}
	b.module("rt", joinNonEmpty(s))
	return true
}

// optsMatch is ip6t_opts, shared by hbh and dst.
func (b *builder) optsMatch(name string, rev uint32, i []byte) bool {
	if rev != 0 || len(i) < 39 || i[38] > 16 {
		return false
	}
	flags, inv := i[4], i[5]
	var s []string
	if flags&1 != 0 {
		s = append(s, negPrefix(inv&1 != 0)+"--"+name+"-len "+strconv.FormatUint(uint64(u32(i, 0)), 10))
	}
	if n := int(i[38]); n > 0 {
		var o []string
		for k := 0; k < n; k++ {
			v := u16(i, 6+2*k)
			t := strconv.Itoa(int(v >> 8))
			if v&0xff != 0xff {
				t += ":" + strconv.Itoa(int(v&0xff))
			}
			o = append(o, t)
		}
		s = append(s, "--"+name+"-opts "+strings.Join(o, ","))
	}
	if flags&4 != 0 {
		s = append(s, "--"+name+"-not-strict")
	}
	b.module(name, strings.Join(s, " "))
	return true
}

func xtIPv6Header(b *builder, rev uint32, i []byte) bool {
	if rev != 0 || len(i) < 3 {
		return false
	}
	names := []bitName{{128, "hop-by-hop"}, {64, "ipv6-opts"}, {32, "ipv6-route"}, {16, "ipv6-frag"},
		{8, "ah"}, {4, "esp"}, {2, "ipv6-nonxt"}, {1, "protocol"}}
	s := negPrefix(i[1] != 0) + "--header " + maskNames(uint32(i[0]), names)
	if i[2] != 0 {
		s += " --soft"
	}
	b.module("ipv6header", s)
	return true
}

func xtSRH(b *builder, rev uint32, i []byte) bool {
	var flags, inv uint16
	switch {
	case rev == 0 && len(i) >= 10:
		flags, inv = u16(i, 6), u16(i, 8)
	case rev == 1 && len(i) >= 108:
		flags, inv = u16(i, 104), u16(i, 106)
	default:
		return false
	}
	var s []string
	num := func(bit uint16, opt string, v int) {
		if flags&bit != 0 {
			s = append(s, negPrefix(inv&bit != 0)+opt+" "+strconv.Itoa(v))
		}
	}
	num(0x1, "--srh-next-hdr", int(i[0]))
	num(0x2, "--srh-hdr-len-eq", int(i[1]))
	num(0x4, "--srh-hdr-len-gt", int(i[1]))
	num(0x8, "--srh-hdr-len-lt", int(i[1]))
	num(0x10, "--srh-segs-left-eq", int(i[2]))
	num(0x20, "--srh-segs-left-gt", int(i[2]))
	num(0x40, "--srh-segs-left-lt", int(i[2]))
	num(0x80, "--srh-last-entry-eq", int(i[3]))
	num(0x100, "--srh-last-entry-gt", int(i[3]))
	num(0x200, "--srh-last-entry-lt", int(i[3]))
	num(0x400, "--srh-tag", int(u16(i, 4)))
	if rev == 1 {
		for k, opt := range []string{"--srh-psid", "--srh-nsid", "--srh-lsid"} {
			bit := uint16(0x800 << k)
			if flags&bit != 0 {
				a := netip.AddrFrom16([16]byte(i[8+16*k : 24+16*k]))
				s = append(s, negPrefix(inv&bit != 0)+opt+" "+a.String()+"/"+strconv.Itoa(ones(i[56+16*k:72+16*k])))
			}
		}
	}
	b.module("srh", strings.Join(s, " "))
	return true
}

func xtCgroup(b *builder, rev uint32, i []byte) bool {
	var hasPath, hasClass, invPath, invClass bool
	var path string
	var class uint32
	switch {
	case rev == 0 && len(i) >= 8:
		hasClass, class, invClass = true, u32(i, 0), u32(i, 4) != 0
	case rev == 1 && len(i) >= 4104:
		hasPath, hasClass, invPath, invClass = i[0] != 0, i[1] != 0, i[2] != 0, i[3] != 0
		path, class = cString(i[4:4100]), u32(i, 4100)
	case rev == 2 && len(i) >= 516:
		hasPath, hasClass, invPath, invClass = i[0] != 0, i[1] != 0, i[2] != 0, i[3] != 0
		path, class = cString(i[4:516]), u32(i, 4)
		if hasClass {
			path = ""
		}
	default:
		return false
	}
	var s []string
	if hasPath {
		s = append(s, negPrefix(invPath)+"--path "+safetext.Quote(path, MaxField))
	}
	if hasClass {
		s = append(s, negPrefix(invClass)+"--cgroup "+strconv.FormatUint(uint64(class), 10))
	}
	b.module("cgroup", strings.Join(s, " "))
	return true
}

func xtPhysdev(b *builder, rev uint32, i []byte) bool {
	if rev != 0 || len(i) < 66 {
		return false
	}
	inv, mask := i[64], i[65]
	if mask&^0x1f != 0 {
		return false
	}
	var s []string
	opt := func(bit byte, text string) {
		if mask&bit != 0 {
			s = append(s, negPrefix(inv&bit != 0)+text)
		}
	}
	opt(0x08, "--physdev-is-in")
	opt(0x01, "--physdev-in "+safetext.Name(cString(i[0:16]), MaxField))
	opt(0x10, "--physdev-is-out")
	opt(0x02, "--physdev-out "+safetext.Name(cString(i[32:48]), MaxField))
	opt(0x04, "--physdev-is-bridged")
	b.module("physdev", strings.Join(s, " "))
	return true
}

func xtRecent(b *builder, rev uint32, i []byte) bool {
	if rev > 1 || len(i) < 211 || rev == 1 && len(i) < 228 {
		return false
	}
	secs, hits, cs, inv, side := u32(i, 0), u32(i, 4), i[8], i[9], i[210]
	if cs&^0x3f != 0 || side > 1 {
		return false
	}
	var s []string
	for k, opt := range []string{"--rcheck", "--set", "--update", "--remove"} {
		if cs&(1<<k) != 0 {
			s = append(s, negPrefix(inv != 0)+opt)
		}
	}
	if secs != 0 {
		s = append(s, "--seconds "+strconv.FormatUint(uint64(secs), 10))
	}
	if cs&0x20 != 0 {
		s = append(s, "--reap")
	}
	if hits != 0 {
		s = append(s, "--hitcount "+strconv.FormatUint(uint64(hits), 10))
	}
	if cs&0x10 != 0 {
		s = append(s, "--rttl")
	}
	s = append(s, "--name "+safetext.Name(cString(i[10:210]), MaxField))
	if rev == 1 {
		m, _ := b.inetAddr(i, 212)
		s = append(s, "--mask "+m.String())
	}
	s = append(s, []string{"--rsource", "--rdest"}[side])
	b.module("recent", strings.Join(s, " "))
	return true
}

// Hashlimit (revisions 1 to 3): xt_hashlimit_mtinfo{1,2,3}.
const (
	hashlimitGC     = 1000 // XT_HASHLIMIT_GCINTERVAL, the default
	hashlimitScale1 = 10000
	hashlimitScale2 = 1000000
)

func xtHashlimit(b *builder, rev uint32, i []byte) bool {
	var name string
	var avg, burst uint64
	var mode, size, max, gc, expire, interval uint32
	var srcmask, dstmask byte
	switch {
	case rev == 1 && len(i) >= 46:
		name = cString(i[:16])
		mode, avg, burst = u32(i, 16), uint64(u32(i, 20)), uint64(u32(i, 24))
		size, max, gc, expire = u32(i, 28), u32(i, 32), u32(i, 36), u32(i, 40)
		srcmask, dstmask = i[44], i[45]
	case (rev == 2 && len(i) >= 294) || (rev == 3 && len(i) >= 298):
		name = cString(i[:255])
		avg, burst, mode = u64(i, 256), u64(i, 264), u32(i, 272)
		size, max, gc, expire = u32(i, 276), u32(i, 280), u32(i, 284), u32(i, 288)
		at := 292
		if rev == 3 {
			interval, at = u32(i, 292), 296
		}
		srcmask, dstmask = i[at], i[at+1]
	default:
		return false
	}
	if mode&^0x7f != 0 || avg == 0 {
		return false
	}
	s := "--hashlimit-upto "
	if mode&0x10 != 0 {
		s = "--hashlimit-above "
	}
	var quantum uint64
	if mode&0x20 != 0 {
		var t string
		t, quantum = hashlimitBytes(avg, burst)
		s += t
	} else {
		scale := uint64(hashlimitScale2)
		if rev == 1 {
			scale = hashlimitScale1
		}
		var t string
		t, quantum = rateText(avg, scale)
		s += t + " --hashlimit-burst " + strconv.FormatUint(burst, 10)
	}
	if mode&0xf != 0 {
		var m []string
		for _, f := range []bitName{{4, "srcip"}, {8, "srcport"}, {1, "dstip"}, {2, "dstport"}} {
			if mode&f.bit != 0 {
				m = append(m, f.name)
			}
		}
		s += " --hashlimit-mode " + strings.Join(m, ",")
	}
	s += " --hashlimit-name " + safetext.Name(name, MaxField)
	if size != 0 {
		s += " --hashlimit-htable-size " + strconv.FormatUint(uint64(size), 10)
	}
	if max != 0 {
		s += " --hashlimit-htable-max " + strconv.FormatUint(uint64(max), 10)
	}
	if gc != hashlimitGC {
		s += " --hashlimit-htable-gcinterval " + strconv.FormatUint(uint64(gc), 10)
	}
	if uint64(expire) != quantum {
		s += " --hashlimit-htable-expire " + strconv.FormatUint(uint64(expire), 10)
	}
	dmask := byte(32)
	if b.fam == inspect.IP6 {
		dmask = 128
	}
	if srcmask != dmask {
		s += " --hashlimit-srcmask " + strconv.Itoa(int(srcmask))
	}
	if dstmask != dmask {
		s += " --hashlimit-dstmask " + strconv.Itoa(int(dstmask))
	}
	if rev == 3 && mode&0x40 != 0 {
		s += " --hashlimit-rate-match"
		if interval != 1 {
			s += " --hashlimit-rate-interval " + strconv.FormatUint(uint64(interval), 10)
		}
	}
	b.module("hashlimit", s)
	return true
}

// hashlimitBytes prints a byte rate and burst the way libxt_hashlimit
// does (cost is UINT32_MAX / (bytes>>4 + 1)), with the default expiry in ms.
func hashlimitBytes(avg, burst uint64) (string, uint64) {
	units := []struct {
		name   string
		thresh uint64
	}{{"mb", 1 << 20}, {"kb", 1 << 10}, {"b", 1}}
	costToBytes := func(c uint64) uint64 {
		r := uint64(math.MaxUint32)
		if c != 0 {
			r = math.MaxUint32 / c
		}
		return (r - 1) << 4
	}
	bytesToCost := func(n uint64) uint64 { return math.MaxUint32 / ((n >> 4) + 1) }
	r := costToBytes(avg)
	k := 0
	for ; k < len(units)-1; k++ {
		if r >= units[k].thresh && bytesToCost(r&^(units[k].thresh-1)) == avg {
			break
		}
	}
	s := fmt.Sprintf("%d%s/s", r/units[k].thresh, units[k].name)
	if burst == 0 {
		return s, 15 * 1000
	}
	r *= burst
	for k = 0; k < len(units)-1; k++ {
		if r >= units[k].thresh {
			break
		}
	}
	return s + fmt.Sprintf(" --hashlimit-burst %d%s", r/units[k].thresh, units[k].name), 60 * 1000
}

func xtString(b *builder, rev uint32, i []byte) bool {
	if rev > 1 || len(i) < 150 {
		return false
	}
	from, to := u16(i, 0), u16(i, 2)
	algo := cString(i[4:20])
	n := int(i[148])
	if n > 128 {
		return false
	}
	pat := i[20 : 20+n]
	inv := i[149] != 0
	if rev == 1 {
		inv = i[149]&1 != 0
	}
	hexPat := false
	for _, c := range pat {
		if c < 0x20 || c > 0x7e {
			hexPat = true
		}
	}
	s := negPrefix(inv)
	if hexPat {
		s += `--hex-string "|` + fmt.Sprintf("%x", pat) + `|"`
	} else {
		s += "--string " + safetext.Quote(string(pat), MaxField)
	}
	s += " --algo " + safetext.Name(algo, MaxField)
	if from != 0 {
		s += " --from " + strconv.Itoa(int(from))
	}
	if to != 0 && to != 0xffff {
		s += " --to " + strconv.Itoa(int(to))
	}
	if rev == 1 && i[149]&2 != 0 {
		s += " --icase"
	}
	b.module("string", s)
	return true
}

// sctpChunks names SCTP chunk types as libxt_sctp does.
var sctpChunks = map[int]string{0: "DATA", 1: "INIT", 2: "INIT_ACK", 3: "SACK", 4: "HEARTBEAT", 5: "HEARTBEAT_ACK",
	6: "ABORT", 7: "SHUTDOWN", 8: "SHUTDOWN_ACK", 9: "ERROR", 10: "COOKIE_ECHO", 11: "COOKIE_ACK", 12: "ECN_ECNE",
	13: "ECN_CWR", 14: "SHUTDOWN_COMPLETE", 64: "I_DATA", 128: "ASCONF_ACK", 130: "RE_CONFIG", 132: "PAD",
	192: "FORWARD_TSN", 193: "ASCONF", 194: "I_FORWARD_TSN"}

// xtSCTP is struct xt_sctp_info; its options belong to -p sctp like tcp's.
func xtSCTP(b *builder, rev uint32, i []byte) bool {
	if rev != 0 || len(i) < 292 {
		return false
	}
	flags, inv := u32(i, 284), u32(i, 288)
	if flags&^7 != 0 {
		return false
	}
	b.protoPorts(flags, inv, 1, 2, u16(i, 4), u16(i, 6), u16(i, 0), u16(i, 2))
	if flags&4 != 0 {
		mt := map[uint32]string{1: "any", 2: "all", 4: "only"}[u32(i, 264)]
		if mt == "" {
			return false
		}
		nflags := int(int32(u32(i, 280)))
		if nflags < 0 || nflags > 4 {
			return false
		}
		var cs []string
		for c := 0; c < 256; c++ {
			if u32(i, 8+4*(c/32))&(1<<(c%32)) == 0 {
				continue
			}
			name, ok := sctpChunks[c]
			if !ok {
				name = fmt.Sprintf("0x%x", c)
			}
			for k := 0; k < nflags; k++ {
				if int(i[268+3*k]) == c {
					name += ":" + sctpFlags(c, i[269+3*k], i[270+3*k])
				}
			}
			cs = append(cs, name)
		}
		list := "NONE"
		if len(cs) > 0 {
			list = strings.Join(cs, ",")
		}
		b.add(rankProtoOpt, optKey["option"], negPrefix(inv&4 != 0)+"--chunk-types "+mt+" "+list)
	}
	return true
}

// sctpFlags prints chunk flags as libxt_sctp: each masked bit by its
// letter, upper case when set.
func sctpFlags(chunk int, flag, mask byte) string {
	letters := map[int]string{0: "----IUBE", 6: "-------T", 14: "-------T", 64: "----IUBE"}[chunk]
	if letters == "" {
		letters = "--------"
	}
	var s []byte
	for k := 7; k >= 0; k-- {
		if mask&(1<<k) != 0 {
			c := letters[7-k]
			if flag&(1<<k) == 0 {
				c = byte(strings.ToLower(string(c))[0])
			}
			s = append(s, c)
		}
	}
	return string(s)
}

// protoPorts prints the --sport/--dport of a protocol module whose flags
// say which are set.
func (b *builder) protoPorts(flags, inv, srcBit, dstBit uint32, slo, shi, dlo, dhi uint16) {
	if flags&srcBit != 0 {
		b.add(rankProtoOpt, optKey["sport"], negPrefix(inv&srcBit != 0)+"--sport "+portRange(slo, shi))
	}
	if flags&dstBit != 0 {
		b.add(rankProtoOpt, optKey["dport"], negPrefix(inv&dstBit != 0)+"--dport "+portRange(dlo, dhi))
	}
}

var dccpTypes = bitFlags("REQUEST", "RESPONSE", "DATA", "ACK", "DATAACK", "CLOSEREQ", "CLOSE", "RESET", "SYNC", "SYNCACK")

// dccpTypesText: libxt_dccp stores INVALID as every type from 10 up.
func dccpTypesText(m uint16) string {
	s := ""
	if m&0xfc00 == 0xfc00 {
		s, m = "INVALID", m&^0xfc00
		if m == 0 {
			return s
		}
		return maskNames(uint32(m), dccpTypes) + "," + s
	}
	return maskNames(uint32(m), dccpTypes)
}

// xtDCCP is struct xt_dccp_info; like sctp, its options belong to -p dccp.
func xtDCCP(b *builder, rev uint32, i []byte) bool {
	if rev != 0 || len(i) < 15 {
		return false
	}
	flags, inv := uint32(u16(i, 8)), uint32(u16(i, 10))
	if flags&^0xf != 0 {
		return false
	}
	b.protoPorts(flags, inv, 1, 2, u16(i, 4), u16(i, 6), u16(i, 0), u16(i, 2))
	if flags&4 != 0 {
		b.add(rankProtoOpt, optKey["flags"], negPrefix(inv&4 != 0)+"--dccp-types "+dccpTypesText(u16(i, 12)))
	}
	if flags&8 != 0 {
		b.add(rankProtoOpt, optKey["option"], negPrefix(inv&8 != 0)+"--dccp-option "+strconv.Itoa(int(i[14])))
	}
	return true
}

func xtTime(b *builder, rev uint32, i []byte) bool {
	if rev != 0 || len(i) < 22 || i[21]&^3 != 0 {
		return false
	}
	dstart, dstop, tstart, tstop, mdays, wdays, flags := u32(i, 0), u32(i, 4), u32(i, 8), u32(i, 12), u32(i, 16), i[20], i[21]
	var s []string
	clock := func(t uint32) string { return fmt.Sprintf("%02d:%02d:%02d", t/3600, t/60%60, t%60) }
	if tstart != 0 || tstop != 24*60*60-1 {
		s = append(s, "--timestart "+clock(tstart), "--timestop "+clock(tstop))
	}
	if mdays != 0xfffffffe {
		var d []string
		for k := 1; k <= 31; k++ {
			if mdays&(1<<k) != 0 {
				d = append(d, strconv.Itoa(k))
			}
		}
		s = append(s, "--monthdays "+strings.Join(d, ","))
	}
	if wdays != 0xfe {
		var d []string
		for k, n := range []string{"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"} {
			if wdays&(2<<k) != 0 {
				d = append(d, n)
			}
		}
		s = append(s, "--weekdays "+strings.Join(d, ","))
	}
	for k, d := range []uint32{dstart, dstop} {
		if d != 0 {
			s = append(s, []string{"--datestart ", "--datestop "}[k]+time.Unix(int64(d), 0).UTC().Format("2006-01-02T15:04:05"))
		}
	}
	if flags&1 != 0 {
		s = append(s, "--kerneltz")
	}
	if flags&2 != 0 {
		s = append(s, "--contiguous")
	}
	b.module("time", strings.Join(s, " "))
	return true
}

// xtU32 prints struct xt_u32 as its one --u32 expression.
func xtU32(b *builder, rev uint32, i []byte) bool {
	const test = 180 // struct xt_u32_test
	if rev != 0 || len(i) < 11*test+2 || i[11*test] > 11 {
		return false
	}
	var tests []string
	for t := 0; t < int(i[11*test]); t++ {
		at := i[t*test:]
		nnums, nvals := int(at[176]), int(at[177])
		if nnums < 1 || nnums > 11 || nvals > 11 {
			return false
		}
		s := fmt.Sprintf("0x%x", u32(at, 0))
		for k := 1; k < nnums; k++ {
			op := at[8*k+4]
			if op > 3 {
				return false
			}
			s += []string{"&", "<<", ">>", "@"}[op] + fmt.Sprintf("0x%x", u32(at, 8*k))
		}
		s += "="
		for k := 0; k < nvals; k++ {
			lo, hi := u32(at, 88+8*k), u32(at, 92+8*k)
			if k > 0 {
				s += ","
			}
			if lo == hi {
				s += fmt.Sprintf("0x%x", lo)
			} else {
				s += fmt.Sprintf("0x%x:0x%x", lo, hi)
			}
		}
		tests = append(tests, s)
	}
	neg, ok := xorInvert(uint32(i[11*test+1]))
	if !ok {
		return false
	}
	b.module("u32", negPrefix(neg)+`--u32 "`+strings.Join(tests, "&&")+`"`)
	return true
}

// xtPolicy prints struct xt_policy_info: direction and policy flags, then
// each element, separated by --next.
func xtPolicy(b *builder, rev uint32, i []byte) bool {
	const elem = 76
	if rev != 0 || len(i) < 4*elem+4 {
		return false
	}
	flags, n := u16(i, 4*elem), int(u16(i, 4*elem+2))
	if n > 4 || flags&^0xf != 0 {
		return false
	}
	s := []string{"--dir out", "--pol ipsec"}
	if flags&1 != 0 {
		s[0] = "--dir in"
	}
	if flags&4 != 0 {
		s[1] = "--pol none"
	}
	if flags&8 != 0 {
		s = append(s, "--strict")
	}
	for k := 0; k < n; k++ {
		e := i[k*elem:]
		m, inv := e[74], e[75]
		opt := func(bit byte, text string) {
			if m&bit != 0 {
				s = append(s, negPrefix(inv&bit != 0)+text)
			}
		}
		opt(0x20, "--reqid "+strconv.FormatUint(uint64(u32(e, 68)), 10))
		opt(0x10, fmt.Sprintf("--spi 0x%x", u32(e, 64)))
		opt(0x04, "--proto "+protoName(b.fam, int(e[72])))
		if e[73] > 1 {
			return false
		}
		opt(0x08, "--mode "+[]string{"transport", "tunnel"}[e[73]])
		for _, a := range []struct {
			bit  byte
			at   int
			name string
		}{{0x02, 32, "--tunnel-dst "}, {0x01, 0, "--tunnel-src "}} {
			addr, ab := b.inetAddr(e, a.at)
			_, mb := b.inetAddr(e, a.at+16)
			_ = addr
			opt(a.bit, a.name+prefixText(maskBytes(ab, mb), mb))
		}
		if k+1 < n {
			s = append(s, "--next")
		}
	}
	b.module("policy", strings.Join(s, " "))
	return true
}

// xtBPF prints xt_bpf_info (rev 0) and _v1 bytecode or pinned-object modes
// as libxt_bpf does: the instruction count, then each "code jt jf k".
func xtBPF(b *builder, rev uint32, i []byte) bool {
	mode, n, prog := uint16(0), 0, []byte(nil)
	switch {
	case rev == 0 && len(i) >= 4+64*8:
		n, prog = int(u16(i, 0)), i[4:]
	case rev == 1 && len(i) >= 8+512:
		mode, n, prog = u16(i, 0), int(u16(i, 2)), i[8:]
	default:
		return false
	}
	switch mode {
	case 0:
		if n > 64 {
			return false
		}
		s := strconv.Itoa(n)
		for k := 0; k < n; k++ {
			f := prog[8*k:]
			s += fmt.Sprintf(",%d %d %d %d", u16(f, 0), f[2], f[3], u32(f, 4))
		}
		b.module("bpf", `--bytecode "`+s+`"`)
	case 1:
		b.module("bpf", "--object-pinned "+safetext.Quote(cString(prog[:512]), MaxField))
	default:
		return false
	}
	return true
}

// ebIP is ebtables' ip and ip6 matches (struct ebt_ip_info, ebt_ip6_info):
// addresses with masks, tos/tclass, protocol, ports or ICMP type/code.
func ebIP(b *builder, rev uint32, i []byte, six bool) bool {
	if b.fam != inspect.Bridge || rev != 0 {
		return false
	}
	n, at, pre := 4, 16, "--ip-"
	if six {
		n, at, pre = 16, 64, "--ip6-"
	}
	if len(i) < at+12 {
		return false
	}
	tos, proto, mask, inv := i[at], i[at+1], i[at+2], i[at+3]
	var s []string
	opt := func(bit byte, text string) {
		if mask&bit != 0 {
			s = append(s, negPrefix(inv&bit != 0)+text)
		}
	}
	for k, name := range []string{"src ", "dst "} {
		a, m := i[k*n:k*n+n], i[(2+k)*n:(3+k)*n]
		opt(1<<k, pre+name+addrText(maskBytes(a, m), m))
	}
	if six {
		opt(4, fmt.Sprintf("%stclass 0x%02x", pre, tos))
	} else {
		opt(4, fmt.Sprintf("%stos 0x%02x", pre, tos))
	}
	opt(8, pre+"proto "+protoName(inspect.IP, int(proto)))
	opt(0x10, pre+"sport "+portRange(u16(i, at+4), u16(i, at+6)))
	opt(0x20, pre+"dport "+portRange(u16(i, at+8), u16(i, at+10)))
	opt(0x40, pre+"icmp-type "+portRange(uint16(i[at+4]), uint16(i[at+5]))+"/"+portRange(uint16(i[at+8]), uint16(i[at+9])))
	if !six {
		opt(0x80, pre+"igmp-type "+portRange(uint16(i[at+4]), uint16(i[at+5])))
	}
	b.module(map[bool]string{false: "ip", true: "ip6"}[six], strings.Join(s, " "))
	return true
}

// ebARP is ebtables' arp match (struct ebt_arp_info).
func ebARP(b *builder, rev uint32, i []byte) bool {
	if b.fam != inspect.Bridge || rev != 0 || len(i) < 50 {
		return false
	}
	mask, inv := i[48], i[49]
	be := binary.BigEndian
	var s []string
	opt := func(bit byte, text string) {
		if mask&bit != 0 {
			s = append(s, negPrefix(inv&bit != 0)+text)
		}
	}
	opt(0x01, "--arp-op "+strconv.Itoa(int(be.Uint16(i[4:]))))
	opt(0x02, "--arp-htype "+strconv.Itoa(int(be.Uint16(i[0:]))))
	opt(0x04, "--arp-ptype "+etherType(be.Uint16(i[2:])))
	opt(0x08, "--arp-ip-src "+addrText(maskBytes(i[8:12], i[12:16]), i[12:16]))
	opt(0x10, "--arp-ip-dst "+addrText(maskBytes(i[16:20], i[20:24]), i[20:24]))
	opt(0x20, "--arp-mac-src "+macMaskText(i[24:30], i[30:36]))
	opt(0x40, "--arp-mac-dst "+macMaskText(i[36:42], i[42:48]))
	opt(0x80, "--arp-gratuitous")
	b.module("arp", strings.Join(s, " "))
	return true
}

// ebSTP is ebtables' stp match (struct ebt_stp_info; the config part is
// 4-aligned for its u32 root cost).
func ebSTP(b *builder, rev uint32, i []byte) bool {
	if b.fam != inspect.Bridge || rev != 0 || len(i) < 72 {
		return false
	}
	mask, inv := u16(i, 68), u16(i, 70)
	var s []string
	opt := func(bit uint16, text string) {
		if mask&bit != 0 {
			s = append(s, negPrefix(inv&bit != 0)+text)
		}
	}
	rng := func(at int) string { return portRange(u16(i, at), u16(i, at+2)) }
	opt(0x001, "--stp-type "+strconv.Itoa(int(i[0])))
	opt(0x002, fmt.Sprintf("--stp-flags 0x%x", i[4]))
	opt(0x004, "--stp-root-prio "+rng(6))
	opt(0x008, "--stp-root-addr "+macMaskText(i[10:16], i[16:22]))
	opt(0x010, "--stp-root-cost "+portRangeU32(u32(i, 24), u32(i, 28)))
	opt(0x020, "--stp-sender-prio "+rng(32))
	opt(0x040, "--stp-sender-addr "+macMaskText(i[36:42], i[42:48]))
	opt(0x080, "--stp-port "+rng(48))
	opt(0x100, "--stp-msg-age "+rng(52))
	opt(0x200, "--stp-max-age "+rng(56))
	opt(0x400, "--stp-hello-time "+rng(60))
	opt(0x800, "--stp-forward-delay "+rng(64))
	b.module("stp", strings.Join(s, " "))
	return true
}
