package render

import (
	"bytes"
	"encoding/binary"
	"os"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// dumpRules reads every rule of the netns with one NFT_MSG_GETRULE dump and
// keeps each expression exactly as the kernel sent it (name + raw
// NFTA_EXPR_DATA), independent of any nftables library: the renderer is
// then tested on the very bytes the hook will see.
func dumpRules(t testing.TB, nsPath string) []inspect.Rule {
	t.Helper()
	f, err := os.Open(nsPath)
	if err != nil {
		t.Fatalf("open netns %q: %v", nsPath, err)
	}
	defer f.Close()
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: int(f.Fd())})
	if err != nil {
		t.Fatalf("dial netfilter in %q: %v", nsPath, err)
	}
	defer c.Close()
	msgs, err := c.Execute(netlink.Message{
		Header: netlink.Header{
			Type:  netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETRULE),
			Flags: netlink.Request | netlink.Dump,
		},
		Data: []byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, 0},
	})
	if err != nil {
		t.Fatalf("dump rules in %q: %v", nsPath, err)
	}
	var rules []inspect.Rule
	for _, m := range msgs {
		if len(m.Data) < 4 {
			continue
		}
		r := inspect.Rule{Family: famName(m.Data[0])}
		eachAttr(t, m.Data[4:], func(typ uint16, b []byte) {
			switch typ {
			case unix.NFTA_RULE_TABLE:
				r.Table = string(bytes.TrimRight(b, "\x00"))
			case unix.NFTA_RULE_CHAIN:
				r.Chain = string(bytes.TrimRight(b, "\x00"))
			case unix.NFTA_RULE_HANDLE:
				r.Handle = binary.BigEndian.Uint64(b)
			case unix.NFTA_RULE_EXPRESSIONS:
				eachAttr(t, b, func(_ uint16, elem []byte) {
					var e inspect.Expr
					eachAttr(t, elem, func(typ uint16, b []byte) {
						switch typ {
						case unix.NFTA_EXPR_NAME:
							e.Name = string(bytes.TrimRight(b, "\x00"))
						case unix.NFTA_EXPR_DATA:
							e.Data = append([]byte(nil), b...)
						}
					})
					r.Exprs = append(r.Exprs, e)
				})
			}
		})
		rules = append(rules, r)
	}
	return rules
}

func eachAttr(t testing.TB, b []byte, fn func(typ uint16, data []byte)) {
	t.Helper()
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		t.Fatalf("decode attributes: %v", err)
	}
	for ad.Next() {
		fn(ad.Type(), ad.Bytes())
	}
	if err := ad.Err(); err != nil {
		t.Fatalf("decode attributes: %v", err)
	}
}

func famName(f byte) inspect.Family {
	switch f {
	case unix.NFPROTO_IPV4:
		return inspect.IP
	case unix.NFPROTO_IPV6:
		return inspect.IP6
	case unix.NFPROTO_INET:
		return inspect.INet
	case unix.NFPROTO_ARP:
		return inspect.ARP
	case unix.NFPROTO_BRIDGE:
		return inspect.Bridge
	case unix.NFPROTO_NETDEV:
		return inspect.Netdev
	}
	return inspect.Family("unknown")
}
