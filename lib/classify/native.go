package classify

import (
	"encoding/binary"

	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"golang.org/x/sys/unix"
)

// This file is the criterion: could an iptables client have written this
// rule? It mirrors what the *-nft-save tools (iptables 1.8.9, nft-shared)
// accept, on the expressions' kinds and keys only, so it is cheap enough
// for every rule of an iptables table.

// compatible are the expressions the save tools accept in a table at all
// (nft_is_expr_compatible); limit and log are accepted only in the shapes
// iptables-nft writes (limitCompatible, logCompatible). Any other
// expression makes the save tools refuse the whole table ("Table `filter'
// is incompatible, use 'nft' tool.").
var compatible = map[string]bool{
	"match": true, "target": true, "payload": true, "meta": true, "cmp": true,
	"bitwise": true, "counter": true, "immediate": true, "lookup": true, "range": true,
}

// writtenMeta are the meta keys iptables-nft loads and the save tools read
// back as options: -i/-o (names, or indexes), -p of ip6 (l4proto), -m mark
// and -m pkttype; ebtables adds --logical-in/--logical-out, and the
// protocol check in front of an --among-src/-dst list with IPs. Any other key
// (skuid, protocol, ...) comes from native nft: the save tools fail on it
// ("unknown ipv4 meta key") or drop it.
var writtenMeta = map[inspect.Family]map[uint32]bool{
	inspect.IP:  inetMeta,
	inspect.IP6: inetMeta,
	inspect.ARP: {unix.NFT_META_IIFNAME: true, unix.NFT_META_OIFNAME: true, unix.NFT_META_IIF: true, unix.NFT_META_OIF: true},
	inspect.Bridge: {unix.NFT_META_IIFNAME: true, unix.NFT_META_OIFNAME: true, unix.NFT_META_BRI_IIFNAME: true, unix.NFT_META_BRI_OIFNAME: true,
		unix.NFT_META_MARK: true, unix.NFT_META_PROTOCOL: true},
}

var inetMeta = map[uint32]bool{
	unix.NFT_META_IIFNAME: true, unix.NFT_META_OIFNAME: true, unix.NFT_META_IIF: true, unix.NFT_META_OIF: true,
	unix.NFT_META_L4PROTO: true, unix.NFT_META_MARK: true, unix.NFT_META_PKTTYPE: true,
}

// Native says whether no iptables client could have written a rule of an
// iptables table, from its expressions: table when the save tools refuse
// the rule's whole table (an expression kind they do not accept: ct, fib,
// native reject/nat/masq/redir/notrack/tproxy, log without a group, limit
// by bytes or "over"); rule when they accept the table but this rule is
// not one iptables-nft writes: a meta key it never loads, a meta set other
// than nftrace (-j TRACE), a payload write, a set lookup outside ebtables'
// among. On those rules iptables-nft-save fails ("Parsing nftables rule
// failed", exit 3) or prints a line that drops the part it cannot read
// (a lookup becomes nothing), so they are decided per rule: native.
func Native(fam inspect.Family, exprs []inspect.Expr) (rule, table bool) {
	for _, e := range exprs {
		switch e.Name {
		case "limit":
			if !limitCompatible(e.Data) {
				return true, true
			}
		case "log":
			if !hasAttr(e.Data, unix.NFTA_LOG_GROUP) {
				return true, true
			}
		case "meta":
			if !metaWritten(fam, e.Data) {
				rule = true
			}
		case "payload":
			if hasAttr(e.Data, unix.NFTA_PAYLOAD_SREG) {
				rule = true
			}
		case "lookup":
			if fam != inspect.Bridge {
				rule = true
			}
		default:
			if !compatible[e.Name] {
				return true, true
			}
		}
	}
	return rule, false
}

// metaWritten: a load of a key iptables-nft uses, or "meta nftrace set 1"
// (-j TRACE). Expressions kept by name only (no data) count as written:
// inspect always passes the data while it reads.
func metaWritten(fam inspect.Family, data []byte) bool {
	if data == nil {
		return true
	}
	key, ok := attrU32(data, unix.NFTA_META_KEY)
	if !ok {
		return false
	}
	if hasAttr(data, unix.NFTA_META_SREG) {
		return key == unix.NFT_META_NFTRACE && fam != inspect.Bridge && fam != inspect.ARP
	}
	return writtenMeta[fam][key]
}

// limitCompatible: packets per time unit, not inverted ("limit rate
// over"): the only limit the save tools read as -m limit.
func limitCompatible(data []byte) bool {
	if data == nil {
		return true
	}
	typ, _ := attrU32(data, unix.NFTA_LIMIT_TYPE)
	flags, _ := attrU32(data, unix.NFTA_LIMIT_FLAGS)
	return typ == unix.NFT_LIMIT_PKTS && flags == 0
}

func hasAttr(data []byte, typ uint16) bool {
	if data == nil {
		// Kept by name only: judged as written.
		return typ == unix.NFTA_LOG_GROUP
	}
	found := false
	inspect.Attrs(data, func(t uint16, _ []byte) {
		found = found || t == typ
	})
	return found
}

// attrU32 reads a big-endian u32 attribute, as nftables sends them.
func attrU32(data []byte, typ uint16) (v uint32, ok bool) {
	inspect.Attrs(data, func(t uint16, b []byte) {
		if t == typ && !ok && len(b) == 4 {
			v, ok = binary.BigEndian.Uint32(b), true
		}
	})
	return v, ok
}
