package render

import (
	"net/netip"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/nftables/expr"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/allowlist"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"golang.org/x/sys/unix"
)

// Registers 1-4 (16 bytes) and 8-23 (4 bytes) are two names of one
// storage in the kernel (nft_parse_register): reg 1 is reg 8-11, reg 2 is
// reg 12-15.
var (
	// metaAlias is the metadata block's -d compare with 169.254.169.254
	// put into reg 8 between the load into reg 1 and its compare: the
	// compare reads the immediate, so it is true for every packet.
	metaAlias = cat([]expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Immediate{Register: 8, Data: []byte{169, 254, 169, 254}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{169, 254, 169, 254}},
	}, l4proto(6), []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{0, 53}},
	})
	// mcsSpill is the machine config server block's -p tcp with an
	// 8-byte load into reg 8 between "meta l4proto" into reg 9 and its
	// compare: the load fills reg 9 with the destination address.
	mcsSpill = cat([]expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 9},
		&expr.Payload{DestRegister: 8, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 8},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 9, Data: []byte{6}},
	}, xtTCP(0, 0xffff, 22623, 22623, 0x17, 0x02, 0))
)

// TestRegisterAlias: a compare reads the register storage the kernel
// has, whatever name the load and the compare used. One that does not
// read exactly one load from its start is an unknown: token, never the
// option of the load the register was last named with, so the built-in
// allowlist cannot hide a rule whose compare is always true.
func TestRegisterAlias(t *testing.T) {
	cases := []struct {
		name  string
		exprs []expr.Any
		want  string
		entry string // the built-in allowlist entry it matches, "" none
	}{{
		name:  "immediate into reg 8 overwrites the load into reg 1",
		exprs: cat(metaAlias, xtREJECT(3)),
		want:  "-A OUTPUT -p tcp ! --dport 53 -m unknown:nft[imm/a9fea9fe,cmp0:a9fea9fe] -j REJECT",
	}, {
		name:  "an 8-byte load into reg 8 fills reg 9",
		exprs: cat(mcsSpill, xtREJECT(3)),
		want:  "-A OUTPUT --dport 22623 --syn -m unknown:expr/cmp[080001000000000908000200000000000c0003800500010006000000] -j REJECT",
	}, {
		name: "a load into reg 1 compared as reg 8 is the same load",
		exprs: cat([]expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 8, Data: []byte{169, 254, 169, 254}},
		}, l4proto(6), []expr.Any{
			&expr.Payload{DestRegister: 9, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Immediate{Register: 12, Data: []byte{0, 53}},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 9, Data: []byte{0, 53}},
		}, xtREJECT(3)),
		want:  "-A OUTPUT -d 169.254.169.254 -p tcp ! --dport 53 -j REJECT",
		entry: "ovn-kubernetes-block-metadata",
	}, {
		name: "a compare reading two loads side by side",
		exprs: cat([]expr.Any{
			&expr.Payload{DestRegister: 8, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 2},
			&expr.Payload{DestRegister: 9, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 8, Data: []byte{0, 53, 0, 0, 0, 53, 0, 0}},
		}, verdict(expr.VerdictAccept)),
		want: "-A OUTPUT -m unknown:expr/cmp[08000100000000080800020000000000100003800c0001000035000000350000] -j ACCEPT",
	}, {
		name: "an undecoded expression may have written the register",
		exprs: cat([]expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Rt{Register: 1, Key: expr.RtNexthop4},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{169, 254, 169, 254}},
		}, verdict(expr.VerdictDrop)),
		want: "-A OUTPUT -m unknown:expr/rt[08000200000000010800010000000001] -m unknown:expr/cmp[080001000000000108000200000000000c00038008000100a9fea9fe] -j DROP",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := ruleOf(t, inspect.IP, "filter", "OUTPUT", tc.exprs)
			got := Text(r)
			if hostHex(got) != hostHex(tc.want) {
				t.Errorf("text\n got %s\nwant %s", got, tc.want)
			}
			if m := allowlist.Default().Match("any", r, func() string { return got }); m != tc.entry {
				t.Errorf("built-in allowlist matched %q, want %q: %s", m, tc.entry, got)
			}
		})
	}
}

// exprHex is an undecoded expression's attributes in hex, as a token
// shows them: their length and type fields are in the host's byte order.
var exprHex = regexp.MustCompile(`(unknown:expr/\w+)\[[0-9a-f]*\]`)

// hostHex is text with the attributes of its undecoded expressions left
// out, so that one want holds on little- and big-endian hosts alike.
func hostHex(text string) string { return exprHex.ReplaceAllString(text, "$1[…]") }

// TestRegisterAliasInKernel writes the hostile layouts of
// TestRegisterAlias in a real netns: the kernel takes them, they read back
// in that order and are not allowlisted, and the metadata one rejects a
// TCP connection to 127.0.0.1 (its counter counts it), which a -d
// 169.254.169.254 compare could not. The kernel dumps reg32 8, 12, 16 and
// 20 as reg 1-4 (nft_dump_register), which hides the plain alias in what
// it sends back, but not the spill into reg 9.
func TestRegisterAliasInKernel(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "bash")
	ns := nstest.New(t)
	ns.Run("ip", "link", "set", "lo", "up")
	// iptables-nft makes the filter table and its OUTPUT chain.
	ns.Run("iptables-nft", "-A", "OUTPUT", "-p", "udp", "--dport", "9", "-j", "ACCEPT")
	addRule(t, ns.Path(), inspect.IP, "filter", "OUTPUT", cat(metaAlias, xtREJECT(3)))
	addRule(t, ns.Path(), inspect.IP, "filter", "OUTPUT", cat(mcsSpill, xtREJECT(3)))
	if out, err := ns.Exec("bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/9"); err == nil {
		t.Fatalf("a TCP connection to 127.0.0.1:9 went through: %s", out)
	}
	var got, matched []string
	packets := -1
	for _, r := range dumpRules(t, ns.Path()) {
		if r.Family != inspect.IP || r.Table != "filter" || r.Chain != "OUTPUT" {
			continue
		}
		text := Text(r)
		got = append(got, text)
		matched = append(matched, allowlist.Default().Match("any", r, func() string { return text }))
		if len(got) == 2 {
			packets = counted(t, r)
		}
	}
	if len(got) != 3 || !strings.Contains(got[1], "unknown:") || !strings.Contains(got[2], "unknown:") {
		t.Errorf("rules read back, want the two hostile ones with an unknown: token: %q", got)
	}
	if d := cmp.Diff([]string{"", "", ""}, matched); d != "" {
		t.Errorf("built-in allowlist entries matched (-want +got):\n%s\nrules: %q", d, got)
	}
	if packets < 1 {
		t.Errorf("the metadata layout's counter is %d: the kernel did not reject the connection to 127.0.0.1 with it", packets)
	}
}

// counted is the packet count of the rule's counter, -1 when it has none.
func counted(t *testing.T, r inspect.Rule) int {
	t.Helper()
	for _, e := range r.Exprs {
		if e.Name != "counter" {
			continue
		}
		c := &expr.Counter{}
		if err := expr.Unmarshal(inspect.IP.Number(), e.Data, c); err != nil {
			t.Fatalf("counter: %v", err)
		}
		return int(c.Packets)
	}
	return -1
}

// TestNATAddressInInet: a nat or tproxy expression's address is as long
// as the expression's own family says (the kernel sizes it so), not the
// table's: in an inet table, which has no address length of its own,
// snat and tproxy with an address rendered as unknown: tokens.
func TestNATAddressInInet(t *testing.T) {
	cases := []struct {
		name  string
		exprs []expr.Any
		want  string
	}{{
		name: "snat ip to 10.0.0.2",
		exprs: []expr.Any{
			&expr.Immediate{Register: 1, Data: []byte{10, 0, 0, 2}},
			&expr.NAT{Type: expr.NATTypeSourceNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, Specified: true},
		},
		want: "-A POSTROUTING -j SNAT --to-source 10.0.0.2",
	}, {
		name: "snat ip6 to fd00::2",
		exprs: []expr.Any{
			&expr.Immediate{Register: 1, Data: netip.MustParseAddr("fd00::2").AsSlice()},
			&expr.NAT{Type: expr.NATTypeSourceNAT, Family: unix.NFPROTO_IPV6, RegAddrMin: 1, Specified: true},
		},
		want: "-A POSTROUTING -j SNAT --to-source fd00::2",
	}, {
		name: "an address of the other family's length",
		exprs: []expr.Any{
			&expr.Immediate{Register: 1, Data: []byte{10, 0, 0, 2}},
			&expr.NAT{Type: expr.NATTypeSourceNAT, Family: unix.NFPROTO_IPV6, RegAddrMin: 1, Specified: true},
		},
		want: "-A POSTROUTING -m unknown:expr/nat[",
	}, {
		// google/nftables reads NFTA_TPROXY_FAMILY as one byte, the
		// kernel writes four: every tproxy was an unknown: token.
		name: "tproxy ip to 10.0.0.1:15001",
		exprs: []expr.Any{
			&expr.Immediate{Register: 1, Data: []byte{10, 0, 0, 1}},
			&expr.Immediate{Register: 2, Data: []byte{0x3a, 0x99}},
			&expr.TProxy{Family: unix.NFPROTO_IPV4, RegAddr: 1, RegPort: 2},
		},
		want: "-A POSTROUTING -j TPROXY --on-port 15001 --on-ip 10.0.0.1",
	}, {
		name: "tproxy to :15001",
		exprs: []expr.Any{
			&expr.Immediate{Register: 1, Data: []byte{0x3a, 0x99}},
			&expr.TProxy{Family: unix.NFPROTO_UNSPEC, RegPort: 1},
		},
		want: "-A POSTROUTING -j TPROXY --on-port 15001",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Text(ruleOf(t, inspect.INet, "nat", "POSTROUTING", tc.exprs))
			if !strings.HasPrefix(got, tc.want) {
				t.Errorf("text\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}
