package watch

import (
	"encoding/binary"
	"strings"
)

// Netlink and nf_tables constants (linux/netlink.h, linux/netfilter/
// nfnetlink.h, linux/netfilter/nf_tables.h), spelt as there.
const (
	nlmsgHdrLen  = 16
	nfgenHdrLen  = 4
	nlaHdrLen    = 4
	nlaTypeMask  = 0x3fff // without NLA_F_NESTED and NLA_F_NET_BYTEORDER
	nlmsgError   = 0x2
	subsysNFT    = 10 // NFNL_SUBSYS_NFTABLES
	msgNewGen    = 15 // NFT_MSG_NEWGEN
	attrGenID    = 1  // NFTA_GEN_ID
	attrGenPID   = 2  // NFTA_GEN_PROC_PID
	attrGenName  = 3  // NFTA_GEN_PROC_NAME
	attrObjTable = 1  // NFTA_{TABLE_NAME,CHAIN_TABLE,RULE_TABLE,SET_TABLE,...}: 1 for every object type
	// maxComm bounds the command name kept: the kernel's TASK_COMM_LEN is
	// 16, a longer one is not the kernel's.
	maxComm = 64
)

// Families as nfgenmsg.nfgen_family gives them (NFPROTO_*).
var familyNames = map[uint8]string{1: "inet", 2: "ip", 3: "arp", 5: "netdev", 7: "bridge", 10: "ip6"}

// xtTables are the tables iptables-nft, ip6tables-nft, arptables-nft and
// ebtables-nft create, by family: a commit touching one of them may be
// iptables usage, any other is native nftables (inet has no iptables
// tool).
var xtTables = map[string]map[string]bool{
	"ip":     {"filter": true, "nat": true, "mangle": true, "raw": true, "security": true},
	"ip6":    {"filter": true, "nat": true, "mangle": true, "raw": true, "security": true},
	"arp":    {"filter": true},
	"bridge": {"filter": true, "nat": true, "broute": true},
}

// message is what one netlink message tells: a commit's end (gen set), an
// object of the commit (table set when iptables-shaped), or nothing of use.
type message struct {
	gen     bool
	id      uint32
	pid     uint32
	comm    string
	object  bool
	xtTable string // "family name" when the object's table is iptables-shaped
}

// parse walks the netlink messages of one datagram and calls fn for each
// nf_tables one. A malformed message ends the walk: the rest of the
// datagram cannot be framed; ok is then false.
func parse(b []byte, fn func(message)) (ok bool) {
	for len(b) >= nlmsgHdrLen {
		n := int(binary.NativeEndian.Uint32(b[0:4]))
		typ := binary.NativeEndian.Uint16(b[4:6])
		if n < nlmsgHdrLen || n > len(b) {
			return false
		}
		body := b[nlmsgHdrLen:n]
		b = b[min(align(n), len(b)):]
		if typ == nlmsgError || typ>>8 != subsysNFT || len(body) < nfgenHdrLen {
			continue
		}
		family := body[0]
		attrs := body[nfgenHdrLen:]
		if typ&0xff == msgNewGen {
			fn(genMessage(attrs))
			continue
		}
		m := message{object: true}
		if name, ok := familyNames[family]; ok {
			if t := string(attr(attrs, attrObjTable)); xtTables[name][cstring(t)] {
				m.xtTable = name + " " + cstring(t)
			}
		}
		fn(m)
	}
	return len(b) == 0
}

func genMessage(attrs []byte) message {
	m := message{gen: true}
	if v := attr(attrs, attrGenID); len(v) == 4 {
		m.id = binary.BigEndian.Uint32(v)
	}
	if v := attr(attrs, attrGenPID); len(v) == 4 {
		m.pid = binary.BigEndian.Uint32(v)
	}
	if v := attr(attrs, attrGenName); v != nil {
		m.comm = cstring(string(v[:min(len(v), maxComm)]))
	}
	return m
}

// attr is the value of the first attribute of type typ, nil when absent or
// the attributes are malformed.
func attr(b []byte, typ uint16) []byte {
	for len(b) >= nlaHdrLen {
		n := int(binary.NativeEndian.Uint16(b[0:2]))
		t := binary.NativeEndian.Uint16(b[2:4]) & nlaTypeMask
		if n < nlaHdrLen || n > len(b) {
			return nil
		}
		if t == typ {
			return b[nlaHdrLen:n]
		}
		b = b[min(align(n), len(b)):]
	}
	return nil
}

// cstring cuts a kernel string at its NUL.
func cstring(s string) string {
	if i := strings.IndexByte(s, 0); i >= 0 {
		return s[:i]
	}
	return s
}

func align(n int) int { return (n + 3) &^ 3 }
