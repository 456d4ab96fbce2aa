package modules

import (
	"encoding/binary"
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
	"github.com/iptables-alerter/iptables-alerter/lib/classify"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"github.com/mdlayher/netlink"
)

// TestBridgeXtModules: nft_compat looks a bridge rule's extension up in
// the bridge family's list, then in the xt extensions of no family
// (xt_find_match, xt_find_target). ebtables' own ones are ebt_ modules;
// -m comment in a bridge table is xt_comment, which no ebt_comment holds.
func TestBridgeXtModules(t *testing.T) {
	comment := xt.Unknown(make([]byte, 256))
	mark := xt.Unknown(make([]byte, 8))
	r := inspect.Rule{Family: inspect.Bridge, Table: "filter", Chain: "FORWARD"}
	for _, x := range []expr.Any{
		&expr.Match{Name: "comment", Info: &comment},
		&expr.Target{Name: "mark", Info: &mark},
	} {
		b, err := expr.Marshal(byte(inspect.Bridge.Number()), x)
		if err != nil {
			t.Fatal(err)
		}
		r.Exprs = append(r.Exprs, exprOf(t, b))
	}
	want := []string{"ebt_mark", "nf_tables", "nft_compat", "xt_comment"}
	if d := cmp.Diff(want, Rule(r)); d != "" {
		t.Errorf("modules (-want +got):\n%s", d)
	}
}

// TestOfKeepsVerifiedModules: a pod whose xt rules need more modules than
// a level lists keeps the ones the release table verifies (nft_compat and
// xt_CT move to kernel-modules-extra in 10.2), which by name came after
// every ebt_* and ip6t_* one and were cut, and the record says how many
// names it left out.
func TestOfKeepsVerifiedModules(t *testing.T) {
	var u classify.Usage
	rule := func(fam inspect.Family, xs ...expr.Any) {
		r := inspect.Rule{Family: fam, Table: "filter", Chain: "FORWARD"}
		for _, x := range xs {
			b, err := expr.Marshal(byte(fam.Number()), x)
			if err != nil {
				t.Fatal(err)
			}
			r.Exprs = append(r.Exprs, exprOf(t, b))
		}
		u.Rules = append(u.Rules, r)
	}
	blob := xt.Unknown(make([]byte, 8))
	for _, n := range []string{"802_3", "among", "arp", "ip", "ip6", "limit", "mark_m", "pkttype", "stp", "vlan"} {
		rule(inspect.Bridge, &expr.Match{Name: n, Info: &blob})
	}
	for _, n := range []string{"arpreply", "dnat", "log", "mark", "nflog", "redirect", "snat"} {
		rule(inspect.Bridge, &expr.Target{Name: n, Info: &blob})
	}
	for _, n := range []string{"ah", "frag", "hbh", "rt", "mh", "srh", "eui64", "ipv6header"} {
		rule(inspect.IP6, &expr.Match{Name: n, Info: &blob})
	}
	rule(inspect.IP, &expr.Target{Name: "CT", Info: &blob})
	m := Of(u)
	if len(m.Xt) != findings.MaxModules || !slices.IsSorted(m.Xt) {
		t.Fatalf("xt modules %v: want %d, sorted", m.Xt, findings.MaxModules)
	}
	// 17 ebt_, 8 ip6t_, nf_tables, nft_compat, xt_CT.
	if !slices.Contains(m.Xt, "nft_compat") || !slices.Contains(m.Xt, "xt_CT") || m.LeftOut != 28-findings.MaxModules {
		t.Errorf("xt modules %v, %d left out: want nft_compat and xt_CT kept, %d left out", m.Xt, m.LeftOut, 28-findings.MaxModules)
	}
	if j := m.Judged(); !slices.Contains(j, "nft_compat") || !slices.Contains(j, "xt_CT") {
		t.Errorf("judged modules lost nft_compat or xt_CT: %v", j)
	}

	// xt rules of a nat table with 22 extensions: nf_tables, nft_chain_nat
	// and nft_ct (never shown: RHEL 10 keeps them) take no place of an
	// xt_* module, which came after them by name and was cut.
	u = classify.Usage{}
	var names []string
	for i := range 22 {
		names = append(names, fmt.Sprintf("m%02d", i))
	}
	for _, n := range names {
		r := inspect.Rule{Family: inspect.IP, Table: "nat", Chain: "PREROUTING"}
		for _, x := range []expr.Any{&expr.Ct{Register: 1, Key: expr.CtKeySTATE}, &expr.Match{Name: n, Info: &blob}} {
			b, err := expr.Marshal(byte(inspect.IP.Number()), x)
			if err != nil {
				t.Fatal(err)
			}
			r.Exprs = append(r.Exprs, exprOf(t, b))
		}
		u.Rules = append(u.Rules, r)
	}
	m = Of(u)
	j := m.Judged()
	for _, n := range names {
		if !slices.Contains(j, "xt_"+n) {
			t.Errorf("judged modules lost xt_%s: %v (xt list %v)", n, j, m.Xt)
		}
	}
	if !slices.Contains(j, "nft_compat") || m.LeftOut != 2 {
		t.Errorf("judged %v, %d left out; want nft_compat and every xt_* kept, 2 left out", j, m.LeftOut)
	}
}

// exprOf is the expression lib/inspect reads from one NFTA_LIST_ELEM.
func exprOf(t *testing.T, b []byte) inspect.Expr {
	t.Helper()
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		t.Fatal(err)
	}
	ad.ByteOrder = binary.BigEndian
	var e inspect.Expr
	for ad.Next() {
		switch ad.Type() {
		case 1: // NFTA_EXPR_NAME
			e.Name = string(slices.DeleteFunc(ad.Bytes(), func(c byte) bool { return c == 0 }))
		case 2: // NFTA_EXPR_DATA
			e.Data = ad.Bytes()
		}
	}
	if err := ad.Err(); err != nil {
		t.Fatal(err)
	}
	return e
}
