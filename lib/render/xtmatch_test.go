package render

import (
	"strings"
	"testing"

	"github.com/google/nftables/expr"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
)

// TestXorInvert: the kernel code of these matches returns "(test) ^
// info->invert" and loads any invert value, so 2 makes the match true for
// every packet. 0 and 1 are the match and its "!"; anything else must not
// render as either, or a rule that matches everything would read as one
// that matches a mark, a length or a MAC.
func TestXorInvert(t *testing.T) {
	mac := []byte{2, 0, 0, 0, 0, 1, 0, 0}
	cases := []struct {
		name, want string
		blob       func(inv uint8) []any
	}{
		{"mark", "--mark 0x1", func(inv uint8) []any { return []any{uint32(1), uint32(0xffffffff), inv} }},
		{"connmark", "--mark 0x1", func(inv uint8) []any { return []any{uint32(1), uint32(0xffffffff), inv} }},
		{"length", "--length 40:1500", func(inv uint8) []any { return []any{uint16(40), uint16(1500), inv} }},
		{"tcpmss", "--mss 1400:1500", func(inv uint8) []any { return []any{uint16(1400), uint16(1500), inv} }},
		{"realm", "--realm 0x1", func(inv uint8) []any { return []any{uint32(1), uint32(0xffffffff), inv} }},
		{"pkttype", "--pkt-type broadcast", func(inv uint8) []any { return []any{uint32(1), uint32(inv)} }},
		{"mac", "--mac-source 02:00:00:00:00:01", func(inv uint8) []any { return []any{mac, uint32(inv)} }},
		{"u32", `--u32 ""`, func(inv uint8) []any { return []any{make([]byte, 11*180), uint8(0), inv} }},
	}
	rev := map[string]uint32{"mark": 1, "connmark": 1}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			text := func(inv uint8) string {
				m := &expr.Match{Name: tc.name, Rev: rev[tc.name], Info: info(tc.blob(inv)...)}
				return Text(ruleOf(t, inspect.IP, "filter", "INPUT", cat([]expr.Any{m}, verdict(expr.VerdictAccept))))
			}
			opt := "-m " + tc.name + " "
			if got, want := text(0), "-A INPUT "+opt+tc.want+" -j ACCEPT"; got != want {
				t.Errorf("invert 0: got %s, want %s", got, want)
			}
			if got, want := text(1), "-A INPUT "+opt+"! "+tc.want+" -j ACCEPT"; got != want {
				t.Errorf("invert 1: got %s, want %s", got, want)
			}
			for _, inv := range []uint8{2, 0xff} {
				if got := text(inv); !strings.Contains(got, "-m unknown:match/"+tc.name+".r") || strings.Contains(got, tc.want) {
					t.Errorf("invert %d (always true) renders as a match: %s", inv, got)
				}
			}
		})
	}
}

// TestTCPFlagsNeverMatch: the kernel tests "flags & mask == cmp", so a
// compare bit outside the mask (a mask of 0 above all) makes a test that
// never matches. It must stay in the text, whole, not read as no test or
// as --syn, the test the machine config server block is allowlisted with.
func TestTCPFlagsNeverMatch(t *testing.T) {
	native := func(mask, cmp byte) []expr.Any {
		return []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 1, Mask: []byte{mask}, Xor: []byte{0}},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{cmp}},
		}
	}
	cases := []struct {
		name  string
		exprs []expr.Any
		want  string
	}{{
		name:  "xt mask 0",
		exprs: cat(l4proto(6), xtTCP(0, 0xffff, 22623, 22623, 0, 0x02, 0)),
		want:  "-A OUTPUT -p tcp --dport 22623 --tcp-flags NONE SYN -j REJECT",
	}, {
		name:  "xt SYN,URG under FIN,SYN,RST,ACK",
		exprs: cat(l4proto(6), xtTCP(0, 0xffff, 22623, 22623, 0x17, 0x22, 0)),
		want:  "-A OUTPUT -p tcp --dport 22623 --tcp-flags FIN,SYN,RST,ACK SYN,URG -j REJECT",
	}, {
		name:  "native SYN,URG under FIN,SYN,RST,ACK",
		exprs: cat(l4proto(6), native(0x17, 0x22)),
		want:  "-A OUTPUT -p tcp --tcp-flags FIN,SYN,RST,ACK SYN,URG -j REJECT",
	}, {
		name:  "xt without a flags test",
		exprs: cat(l4proto(6), xtTCP(0, 0xffff, 22623, 22623, 0, 0, 0)),
		want:  "-A OUTPUT -p tcp --dport 22623 -j REJECT",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Text(ruleOf(t, inspect.IP, "filter", "OUTPUT", cat(tc.exprs, xtREJECT(3)))); got != tc.want {
				t.Errorf("\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}
