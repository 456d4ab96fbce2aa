package render

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
)

// This file decodes xt-compat target info blobs, like xtmatch.go does
// matches.

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
	case b.fam == inspect.Bridge && (x.name == "log" || x.name == "nflog"):
		// ebtables watchers: options of the rule, not its target.
		t, ok := xtTargets[x.name](b, x.rev, i)
		if !ok {
			return false
		}
		b.add(rankModule, "~"+x.name, t)
	default:
		d, ok := xtTargets[x.name]
		if !ok {
			return false
		}
		t, ok := d(b, x.rev, i)
		if !ok {
			return false
		}
		b.target(strings.TrimSpace(x.name + " " + t))
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

var ctEvents = bitFlags("new", "related", "destroy", "reply", "assured", "protoinfo", "helper", "mark", "natseqinfo", "secmark", "label", "synproxy")

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
		s += " --helper " + safetext.Name(h, MaxField)
	}
	if rev >= 1 {
		if t := cString(i[28:60]); t != "" {
			s += " --timeout " + safetext.Name(t, MaxField)
		}
	}
	if ev := u32(i, 4); ev != 0 {
		s += " --ctevents " + maskNames(ev, ctEvents)
	}
	if ev := u32(i, 8); ev != 0 {
		s += " --expevents " + maskNames(ev, bitFlags("new"))
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

// xtTargetDecoder gives the options of one xt target from its revision
// and info blob; false means "not understood". Each checks the size it reads.
type xtTargetDecoder func(b *builder, rev uint32, i []byte) (string, bool)

// xtTargets holds the targets xtTargetKnown does not; each prints what
// iptables-nft-save prints after "-j NAME".
var xtTargets = map[string]xtTargetDecoder{
	"NFLOG": func(b *builder, rev uint32, i []byte) (string, bool) {
		if rev != 0 || len(i) < 76 {
			return "", false
		}
		return nflogText(cString(i[12:76]), u16(i, 4), u16(i, 6), u16(i, 8)&1 != 0, u32(i, 0)), true
	},
	"NFQUEUE": func(b *builder, rev uint32, i []byte) (string, bool) {
		need := []int{2, 4, 6, 6}
		if rev > 3 || len(i) < need[rev] {
			return "", false
		}
		num, total, flags := u16(i, 0), uint16(1), uint16(0)
		if rev >= 1 {
			total = u16(i, 2)
		}
		if rev >= 2 {
			flags = u16(i, 4)
		}
		s := "--queue-num " + strconv.Itoa(int(num))
		if total > 1 {
			s = fmt.Sprintf("--queue-balance %d:%d", num, uint32(num)+uint32(total)-1)
		}
		if flags&1 != 0 {
			s += " --queue-bypass"
		}
		if rev == 3 && flags&2 != 0 {
			s += " --queue-cpu-fanout"
		}
		return s, true
	},
	"TCPMSS": func(b *builder, rev uint32, i []byte) (string, bool) {
		if rev != 0 || len(i) < 2 {
			return "", false
		}
		if u16(i, 0) == 0xffff {
			return "--clamp-mss-to-pmtu", true
		}
		return "--set-mss " + strconv.Itoa(int(u16(i, 0))), true
	},
	"CHECKSUM": func(b *builder, rev uint32, i []byte) (string, bool) {
		if rev != 0 || len(i) < 1 {
			return "", false
		}
		return flagOptions(uint32(i[0]&1), "--checksum-fill"), i[0]&^1 == 0
	},
	"TRACE": func(b *builder, rev uint32, i []byte) (string, bool) { return "", rev == 0 },
	"TOS": func(b *builder, rev uint32, i []byte) (string, bool) {
		if rev != 1 || len(i) < 2 {
			return "", false
		}
		return fmt.Sprintf("--set-tos 0x%02x/0x%02x", i[0], i[1]), true
	},
	"DSCP": func(b *builder, rev uint32, i []byte) (string, bool) {
		if rev != 0 || len(i) < 1 {
			return "", false
		}
		return fmt.Sprintf("--set-dscp 0x%02x", i[0]), true
	},
	"TTL": func(b *builder, rev uint32, i []byte) (string, bool) { return ttlTarget("ttl", rev, i) },
	"HL":  func(b *builder, rev uint32, i []byte) (string, bool) { return ttlTarget("hl", rev, i) },
	"AUDIT": func(b *builder, rev uint32, i []byte) (string, bool) {
		if rev != 0 || len(i) < 1 || i[0] > 2 {
			return "", false
		}
		return "--type " + []string{"accept", "drop", "reject"}[i[0]], true
	},
	"CLASSIFY": func(b *builder, rev uint32, i []byte) (string, bool) {
		if rev != 0 || len(i) < 4 {
			return "", false
		}
		return fmt.Sprintf("--set-class %04x:%04x", u32(i, 0)>>16, u32(i, 0)&0xffff), true
	},
	"CONNSECMARK": func(b *builder, rev uint32, i []byte) (string, bool) {
		if rev != 0 || len(i) < 1 || i[0] < 1 || i[0] > 2 {
			return "", false
		}
		return []string{"--save", "--restore"}[i[0]-1], true
	},
	"IDLETIMER": func(b *builder, rev uint32, i []byte) (string, bool) {
		if rev > 1 || len(i) < 32 || rev == 1 && len(i) < 34 {
			return "", false
		}
		s := "--timeout " + strconv.FormatUint(uint64(u32(i, 0)), 10) + " --label " + safetext.Name(cString(i[4:32]), MaxField)
		if rev == 1 && i[33]&1 != 0 {
			s += " --alarm"
		}
		if rev == 1 && i[32] != 0 {
			s += " --send-nl-msg"
		}
		return s, true
	},
	"TCPOPTSTRIP": func(b *builder, rev uint32, i []byte) (string, bool) {
		if rev != 0 || len(i) < 32 {
			return "", false
		}
		var o []string
		for k := 0; k < 256; k++ {
			if u32(i, 4*(k/32))&(1<<(k%32)) != 0 {
				o = append(o, strconv.Itoa(k))
			}
		}
		if len(o) == 0 {
			return "", true
		}
		return "--strip-options " + strings.Join(o, ","), true
	},
	"NETMAP": func(b *builder, rev uint32, i []byte) (string, bool) {
		r, ok := b.xtNATRange(xtInfo{name: "NETMAP", rev: rev, info: i})
		if !ok || r.flags&natMapIPs == 0 || !r.minIP.IsValid() || r.minIP.BitLen() != r.maxIP.BitLen() {
			return "", false
		}
		lo, hi := r.minIP.AsSlice(), r.maxIP.AsSlice()
		diff := make([]byte, len(lo))
		for k := range lo {
			diff[k] = lo[k] ^ hi[k]
		}
		return "--to " + r.minIP.String() + "/" + strconv.Itoa(len(lo)*8-ones(diff)), true
	},
	"TEE": func(b *builder, rev uint32, i []byte) (string, bool) {
		if rev != 1 || len(i) < 32 {
			return "", false
		}
		gw, _ := b.inetAddr(i, 0)
		s := "--gateway " + gw.String()
		if oif := cString(i[16:32]); oif != "" {
			s += " --oif " + safetext.Name(oif, MaxField)
		}
		return s, true
	},
	"ECN": func(b *builder, rev uint32, i []byte) (string, bool) {
		if rev != 0 || len(i) < 3 {
			return "", false
		}
		op, ect, ece, cwr := i[0], i[1], i[2]&1, i[2]>>1&1
		if op == 0x30 && ece == 0 && cwr == 0 {
			return "--ecn-tcp-remove", true
		}
		var s []string
		if op&0x10 != 0 {
			s = append(s, "--ecn-tcp-ece "+strconv.Itoa(int(ece)))
		}
		if op&0x20 != 0 {
			s = append(s, "--ecn-tcp-cwr "+strconv.Itoa(int(cwr)))
		}
		if op&1 != 0 {
			s = append(s, "--ecn-ip-ect "+strconv.Itoa(int(ect)))
		}
		return strings.Join(s, " "), true
	},
	"DNPT": nptTarget,
	"SNPT": nptTarget,
	"SYNPROXY": func(b *builder, rev uint32, i []byte) (string, bool) {
		if rev != 0 || len(i) < 4 {
			return "", false
		}
		o := i[0]
		var s []string
		if o&1 != 0 {
			s = append(s, "--mss "+strconv.Itoa(int(u16(i, 2))))
		}
		if o&2 != 0 {
			s = append(s, "--wscale "+strconv.Itoa(int(i[1])))
		}
		for k, n := range []string{"--sack-perm", "--timestamp", "--ecn"} {
			if o&(4<<k) != 0 {
				s = append(s, n)
			}
		}
		return strings.Join(s, " "), true
	},
	"RATEEST": func(b *builder, rev uint32, i []byte) (string, bool) {
		if rev != 0 || len(i) < 18 {
			return "", false
		}
		shift := int(int8(i[16])) + 2
		if shift < 0 || shift > 20 || i[17] > 20 {
			return "", false
		}
		interval := uint64(1000000) << shift / 4
		return "--rateest-name " + safetext.Name(cString(i[:16]), MaxField) +
			" --rateest-interval " + usText(interval) + " --rateest-ewmalog " + usText(interval<<i[17]), true
	},
	"HMARK": hmarkTarget,
	// ebtables targets: lower-case names, and the verdict they continue
	// with in the low bits of "target".
	"mark": func(b *builder, rev uint32, i []byte) (string, bool) {
		if b.fam != inspect.Bridge || rev != 0 || len(i) < 12 {
			return "", false
		}
		t := int32(u32(i, 8))
		// The action sits in the high bits, the verdict in the low four.
		op := map[uint32]string{0xfffffff0: "--mark-set", 0xffffffe0: "--mark-or", 0xffffffd0: "--mark-and", 0xffffffc0: "--mark-xor"}[uint32(t)&^0xf]
		if op == "" {
			return "", false
		}
		return fmt.Sprintf("%s 0x%x", op, u64(i, 0)) + ebTarget("--mark-target", t|^0xf, -1), true
	},
	"snat": func(b *builder, rev uint32, i []byte) (string, bool) {
		if b.fam != inspect.Bridge || rev != 0 || len(i) < 12 {
			return "", false
		}
		t := int32(u32(i, 8))
		s := "--to-src " + macText(i[:6]) + ebTarget("--snat-target", t|0x10, -1)
		if t&0x10 == 0 {
			s += " --snat-arp"
		}
		return s, true
	},
	"dnat": func(b *builder, rev uint32, i []byte) (string, bool) {
		if b.fam != inspect.Bridge || rev != 0 || len(i) < 12 {
			return "", false
		}
		return "--to-dst " + macText(i[:6]) + ebTarget("--dnat-target", int32(u32(i, 8)), -1), true
	},
	"redirect": func(b *builder, rev uint32, i []byte) (string, bool) {
		if b.fam != inspect.Bridge || rev != 0 || len(i) < 4 {
			return "", false
		}
		return strings.TrimSpace(ebTarget("--redirect-target", int32(u32(i, 0)), -1)), true
	},
	"arpreply": func(b *builder, rev uint32, i []byte) (string, bool) {
		if b.fam != inspect.Bridge || rev != 0 || len(i) < 12 {
			return "", false
		}
		return "--arpreply-mac " + macText(i[:6]) + ebTarget("--arpreply-target", int32(u32(i, 8)), -2), true
	},
	"log": func(b *builder, rev uint32, i []byte) (string, bool) {
		if b.fam != inspect.Bridge || rev != 0 || len(i) < 36 {
			return "", false
		}
		s := "--log --log-level " + strconv.Itoa(int(i[0])) + " --log-prefix " + safetext.Quote(cString(i[1:31]), MaxField)
		f := u32(i, 32)
		s += " " + flagOptions(f, "--log-ip", "--log-arp", "", "--log-ip6")
		return strings.TrimSpace(s), f&^0xb == 0
	},
	// arptables' mangle (struct arpt_mangle): addresses to write, then the
	// verdict (NF_DROP 0, NF_ACCEPT 1, XT_CONTINUE -1).
	"mangle": func(b *builder, rev uint32, i []byte) (string, bool) {
		if b.fam != inspect.ARP || rev != 0 || len(i) < 48 || i[40]&^0xf != 0 {
			return "", false
		}
		f := i[40]
		var s []string
		if f&1 != 0 {
			s = append(s, "--mangle-mac-s "+macText(i[0:6]))
		}
		if f&2 != 0 {
			s = append(s, "--mangle-mac-d "+macText(i[16:22]))
		}
		if f&4 != 0 {
			s = append(s, "--mangle-ip-s "+netip.AddrFrom4([4]byte(i[32:36])).String())
		}
		if f&8 != 0 {
			s = append(s, "--mangle-ip-d "+netip.AddrFrom4([4]byte(i[36:40])).String())
		}
		switch int32(u32(i, 44)) {
		case 1:
		case 0:
			s = append(s, "--mangle-target DROP")
		case -1:
			s = append(s, "--mangle-target CONTINUE")
		default:
			return "", false
		}
		return strings.Join(s, " "), true
	},
	"nflog": func(b *builder, rev uint32, i []byte) (string, bool) {
		if b.fam != inspect.Bridge || rev != 0 || len(i) < 76 {
			return "", false
		}
		threshold := u16(i, 6)
		if threshold == 1 {
			threshold = 0 // ebtables' default
		}
		return nflogText(cString(i[12:76]), u16(i, 4), threshold, u16(i, 8)&1 != 0, u32(i, 0)), true
	},
}

// ebTarget prints an ebtables target's verdict option unless it is the
// target's default.
func ebTarget(opt string, v, def int32) string {
	if v == def {
		return ""
	}
	return " " + opt + " " + ebVerdict(v)
}

func ttlTarget(name string, rev uint32, i []byte) (string, bool) {
	if rev != 0 || len(i) < 2 || i[0] > 2 {
		return "", false
	}
	return "--" + name + []string{"-set ", "-inc ", "-dec "}[i[0]] + strconv.Itoa(int(i[1])), true
}

func nptTarget(b *builder, rev uint32, i []byte) (string, bool) {
	if rev != 0 || len(i) < 34 {
		return "", false
	}
	src := netip.AddrFrom16([16]byte(i[0:16]))
	dst := netip.AddrFrom16([16]byte(i[16:32]))
	return fmt.Sprintf("--src-pfx %s/%d --dst-pfx %s/%d", src, i[32], dst, i[33]), true
}

// usText prints microseconds as libxt_RATEEST: 1.0s, 250.0ms or 10us.
func usText(us uint64) string {
	switch {
	case us >= 1000000:
		return fmt.Sprintf("%.1fs", float64(us)/1000000)
	case us >= 1000:
		return fmt.Sprintf("%.1fms", float64(us)/1000)
	}
	return fmt.Sprintf("%dus", us)
}

// hmarkTarget prints struct xt_hmark_info; the flag bits say which fields
// were given.
func hmarkTarget(b *builder, rev uint32, i []byte) (string, bool) {
	if rev != 0 || len(i) < 60 {
		return "", false
	}
	f := u32(i, 40)
	var s []string
	has := func(bit int) bool { return f&(1<<bit) != 0 }
	_, sm := b.inetAddr(i, 0)
	_, dm := b.inetAddr(i, 16)
	be := binary.BigEndian
	for _, o := range []struct {
		bit  int
		text string
	}{
		{0, fmt.Sprintf("--hmark-src-prefix %d", ones(sm))},
		{1, fmt.Sprintf("--hmark-dst-prefix %d", ones(dm))},
		{6, fmt.Sprintf("--hmark-sport-mask 0x%04x", be.Uint16(i[32:]))},
		{7, fmt.Sprintf("--hmark-dport-mask 0x%04x", be.Uint16(i[34:]))},
		{3, fmt.Sprintf("--hmark-spi-mask 0x%08x", be.Uint32(i[32:]))},
		{4, fmt.Sprintf("--hmark-sport 0x%04x", be.Uint16(i[36:]))},
		{5, fmt.Sprintf("--hmark-dport 0x%04x", be.Uint16(i[38:]))},
		{2, fmt.Sprintf("--hmark-spi 0x%08x", be.Uint32(i[36:]))},
		{8, fmt.Sprintf("--hmark-proto-mask 0x%02x", u16(i, 44))},
		{9, fmt.Sprintf("--hmark-rnd 0x%08x", u32(i, 48))},
		{10, fmt.Sprintf("--hmark-mod %d", u32(i, 52))},
		{11, fmt.Sprintf("--hmark-offset %d", u32(i, 56))},
		{12, "--hmark-tuple ct"},
	} {
		if has(o.bit) {
			s = append(s, o.text)
		}
	}
	return strings.Join(s, " "), true
}
