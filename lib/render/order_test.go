package render

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/nftables/expr"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/allowlist"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"github.com/mdlayher/netlink"
)

// ruleOf is the rule lib/inspect reads when the kernel holds exprs in
// this order: each expression's name and attributes, as netlink sends
// them.
func ruleOf(t *testing.T, fam inspect.Family, table, chain string, exprs []expr.Any) inspect.Rule {
	t.Helper()
	r := inspect.Rule{Family: fam, Table: table, Chain: chain}
	for _, x := range exprs {
		b, err := expr.Marshal(fam.Number(), x)
		if err != nil {
			t.Fatalf("marshal %T: %v", x, err)
		}
		ad, err := netlink.NewAttributeDecoder(b)
		if err != nil {
			t.Fatal(err)
		}
		ad.ByteOrder = binary.BigEndian
		var e inspect.Expr
		for ad.Next() {
			switch ad.Type() {
			case 1: // NFTA_EXPR_NAME
				e.Name = cString(ad.Bytes())
			case 2: // NFTA_EXPR_DATA
				e.Data = ad.Bytes()
			}
		}
		if err := ad.Err(); err != nil {
			t.Fatal(err)
		}
		r.Exprs = append(r.Exprs, e)
	}
	return r
}

// Rules whose target comes first in the hostile layouts below: the
// machine config server block and the metadata block of the built-in
// allowlist, with an xt target and with a native verdict.
var (
	mcsMatches = cat(l4proto(6), xtTCP(0, 0xffff, 22623, 22623, 0x17, 0x02, 0))
	metaMatch  = cat([]expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{169, 254, 169, 254}},
	}, l4proto(6), []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{0, 53}},
	})
	dropMatches = cat(l4proto(6), []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0, 22}},
	})
)

// TestTargetFirst: the kernel stops a rule at its first verdict, so a pod
// that writes its target before its matches ([counter][target
// REJECT][meta l4proto tcp][match tcp --dport 22623 --syn]) rejects all
// traffic. Such a rule must not render like the rule iptables-nft writes
// (matches, counter, target), or a built-in allowlist entry would hide it.
// A counter after the target carries no meaning and changes nothing.
func TestTargetFirst(t *testing.T) {
	cases := []struct {
		name            string
		normal, hostile []expr.Any
		normalText      string
		// hostileText is the text of the hostile layout: the matches after
		// the target, behind the marker.
		hostileText string
		entry       string
	}{{
		name:        "xt REJECT before the mcs block's matches",
		normal:      cat(mcsMatches, xtREJECT(3)),
		hostile:     cat(xtREJECT(3), mcsMatches),
		normalText:  "-A OUTPUT -p tcp --dport 22623 --syn -j REJECT",
		hostileText: "-A OUTPUT -j REJECT -m unknown:after-target -p tcp --dport 22623 --syn",
		entry:       "ovn-kubernetes-block-mcs-ipv4",
	}, {
		name:        "xt REJECT between -p and the tcp match",
		normal:      cat(mcsMatches, xtREJECT(3)),
		hostile:     cat(l4proto(6), xtREJECT(3), xtTCP(0, 0xffff, 22623, 22623, 0x17, 0x02, 0)),
		normalText:  "-A OUTPUT -p tcp --dport 22623 --syn -j REJECT",
		hostileText: "-A OUTPUT -p tcp -j REJECT -m unknown:after-target --dport 22623 --syn",
		entry:       "ovn-kubernetes-block-mcs-ipv4",
	}, {
		name:        "xt REJECT before the metadata block's matches",
		normal:      cat(metaMatch, xtREJECT(3)),
		hostile:     cat(xtREJECT(3), metaMatch),
		normalText:  "-A OUTPUT -d 169.254.169.254 -p tcp ! --dport 53 -j REJECT",
		hostileText: "-A OUTPUT -j REJECT -m unknown:after-target -d 169.254.169.254 -p tcp ! --dport 53",
		entry:       "ovn-kubernetes-block-metadata",
	}, {
		name:        "native drop before its matches",
		normal:      cat(dropMatches, counter, verdict(expr.VerdictDrop)),
		hostile:     cat(counter, verdict(expr.VerdictDrop), dropMatches),
		normalText:  "-A OUTPUT -p tcp --dport 22 -j DROP",
		hostileText: "-A OUTPUT -j DROP -m unknown:after-target -p tcp --dport 22",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			normal := ruleOf(t, inspect.IP, "filter", "OUTPUT", tc.normal)
			hostile := ruleOf(t, inspect.IP, "filter", "OUTPUT", tc.hostile)
			// A counter after the target, where nothing reads it, is the
			// normal rule still.
			late := ruleOf(t, inspect.IP, "filter", "OUTPUT", append(tc.normal[:len(tc.normal):len(tc.normal)], &expr.Counter{}))
			got := []string{Text(normal), Text(hostile), Text(late)}
			if d := cmp.Diff([]string{tc.normalText, tc.hostileText, tc.normalText}, got); d != "" {
				t.Errorf("normal, hostile and late-counter layouts (-want +got):\n%s", d)
			}
			if m := allowlist.Default().Match("any", normal, func() string { return got[0] }); m != tc.entry {
				t.Errorf("built-in allowlist matched %q for the normal layout, want %q", m, tc.entry)
			}
			if m := allowlist.Default().Match("any", hostile, func() string { return got[1] }); m != "" {
				t.Errorf("built-in allowlist entry %q matched the hostile layout %q", m, got[1])
			}
		})
	}
}

// TestTargetFirstInKernel writes the hostile layout of TestTargetFirst in
// a real netns, where nft refuses it ("Statement after terminal statement
// has no effect") but the kernel does not: it is read back in that order
// and not allowlisted, beside the rule iptables-nft writes, which is.
func TestTargetFirstInKernel(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "bash")
	ns := nstest.New(t)
	ns.Run("bash", "-c", "iptables-nft -A OUTPUT -p tcp --dport 22623 --syn -j REJECT")
	addRule(t, ns.Path(), inspect.IP, "filter", "OUTPUT", cat(xtREJECT(3), mcsMatches))
	var got, matched []string
	for _, r := range dumpRules(t, ns.Path()) {
		if r.Family == inspect.IP && r.Table == "filter" && r.Chain == "OUTPUT" {
			text := Text(r)
			got = append(got, text)
			matched = append(matched, allowlist.Default().Match("any", r, func() string { return text }))
		}
	}
	want := []string{"-A OUTPUT -p tcp --dport 22623 --syn -j REJECT", "-A OUTPUT -j REJECT -m unknown:after-target -p tcp --dport 22623 --syn"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("rules read back (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"ovn-kubernetes-block-mcs-ipv4", ""}, matched); d != "" {
		t.Errorf("built-in allowlist entries matched (-want +got):\n%s", d)
	}
	if strings.Count(strings.Join(got, "\n"), "unknown:") != 1 {
		t.Errorf("only the hostile rule holds an unknown: token: %q", got)
	}
}
