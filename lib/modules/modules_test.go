package modules

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
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
