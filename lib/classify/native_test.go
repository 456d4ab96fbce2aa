package classify

import (
	"encoding/binary"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
)

// attrs encodes u32 attributes as an expression's data.
func attrs(t *testing.T, kv ...uint32) []byte {
	t.Helper()
	ae := netlink.NewAttributeEncoder()
	ae.ByteOrder = binary.BigEndian
	for i := 0; i+1 < len(kv); i += 2 {
		ae.Uint32(uint16(kv[i]), kv[i+1])
	}
	b, err := ae.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestNative(t *testing.T) {
	metaLoad := func(key uint32) inspect.Expr {
		return inspect.Expr{Name: "meta", Data: attrs(t, unix.NFTA_META_KEY, key, unix.NFTA_META_DREG, 1)}
	}
	metaSet := func(key uint32) inspect.Expr {
		return inspect.Expr{Name: "meta", Data: attrs(t, unix.NFTA_META_KEY, key, unix.NFTA_META_SREG, 1)}
	}
	cmpE, counter, verdict := inspect.Expr{Name: "cmp"}, inspect.Expr{Name: "counter"}, inspect.Expr{Name: "immediate"}
	tests := []struct {
		name        string
		fam         inspect.Family
		exprs       []inspect.Expr
		rule, table bool
	}{
		{"iifname accept", inspect.IP, []inspect.Expr{metaLoad(unix.NFT_META_IIFNAME), cmpE, counter, verdict}, false, false},
		{"xt match and target", inspect.IP6, []inspect.Expr{{Name: "match"}, {Name: "target"}}, false, false},
		{"meta mark match (-m mark)", inspect.IP, []inspect.Expr{metaLoad(unix.NFT_META_MARK), {Name: "bitwise"}, cmpE}, false, false},
		{"meta nftrace set (-j TRACE)", inspect.IP, []inspect.Expr{metaSet(unix.NFT_META_NFTRACE)}, false, false},
		{"meta mark set: translated MARK", inspect.IP, []inspect.Expr{{Name: "immediate"}, metaSet(unix.NFT_META_MARK), counter}, true, false},
		{"meta skuid: translated owner", inspect.IP, []inspect.Expr{metaLoad(unix.NFT_META_SKUID), cmpE}, true, false},
		{"meta pkttype on bridge", inspect.Bridge, []inspect.Expr{metaLoad(unix.NFT_META_PKTTYPE), cmpE}, true, false},
		{"lookup: translated multiport", inspect.IP, []inspect.Expr{{Name: "payload"}, {Name: "lookup"}, verdict}, true, false},
		{"lookup: ebtables among", inspect.Bridge, []inspect.Expr{{Name: "payload"}, {Name: "lookup"}, verdict}, false, false},
		{"payload write", inspect.IP, []inspect.Expr{{Name: "immediate"}, {Name: "payload", Data: attrs(t, unix.NFTA_PAYLOAD_SREG, 1)}}, true, false},
		{"ct state: translated conntrack", inspect.IP, []inspect.Expr{{Name: "ct"}, {Name: "bitwise"}, cmpE, counter, verdict}, true, true},
		{"log without group: translated LOG", inspect.IP, []inspect.Expr{{Name: "log", Data: attrs(t, 3, 4)}, counter}, true, true},
		{"log with group: NFLOG", inspect.IP, []inspect.Expr{{Name: "log", Data: attrs(t, unix.NFTA_LOG_GROUP, 2)}}, false, false},
		{"limit packets", inspect.IP, []inspect.Expr{{Name: "limit", Data: attrs(t, unix.NFTA_LIMIT_TYPE, unix.NFT_LIMIT_PKTS)}}, false, false},
		{"limit over", inspect.IP, []inspect.Expr{{Name: "limit", Data: attrs(t, unix.NFTA_LIMIT_TYPE, unix.NFT_LIMIT_PKTS, unix.NFTA_LIMIT_FLAGS, 1)}}, true, true},
		{"native masquerade", inspect.IP, []inspect.Expr{{Name: "masq"}}, true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rule, table := Native(tc.fam, tc.exprs)
			if rule != tc.rule || table != tc.table {
				t.Errorf("Native = rule %v table %v, want %v %v", rule, table, tc.rule, tc.table)
			}
		})
	}
}

func TestClassifyLeavesNativeRulesOut(t *testing.T) {
	snap := inspect.Snapshot{
		Chains: []inspect.Chain{{Family: inspect.IP, Table: "filter", Name: "INPUT", Base: true, Type: "filter", Hook: localIn, Policy: 1, Rules: 2, NativeRules: 1}},
		Rules: []inspect.Rule{
			{Family: inspect.IP, Table: "filter", Chain: "INPUT", Handle: 1, Exprs: []inspect.Expr{{Name: "counter"}}},
			{Family: inspect.IP, Table: "filter", Chain: "INPUT", Handle: 2, Native: true, Exprs: []inspect.Expr{{Name: "lookup"}}},
		},
	}
	u := Classify(snap)
	if len(u.Rules) != 1 || u.Rules[0].Handle != 1 {
		t.Fatalf("kept rules: %+v", u.Rules)
	}
}

func TestSummarizePerTable(t *testing.T) {
	u := Usage{
		Chains: []Chain{
			{Family: inspect.IP, Table: "nat", Name: "OUTPUT", Rules: 2},
			{Family: inspect.IP, Table: "nat", Name: "X", User: true, Rules: 3},
			{Family: inspect.INet, Table: "app", Name: "c", Rules: 1, XT: 1},
		},
		Tables: map[string]int{"ip nat": 4, "ip filter": 3},
	}
	want := []findings.TableCount{{Table: "inet app", Chains: 1, Rules: 1}, {Table: "ip nat", Chains: 4, Rules: 5}}
	if d := cmp.Diff(want, Summarize(u).NftPerTable); d != "" {
		t.Errorf("per table (-want +got):\n%s", d)
	}
}
