package render

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"

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
