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
