package findings

import (
	"strings"
	"testing"
)

func TestImpactWorst(t *testing.T) {
	tests := []struct {
		in   Impact
		want string
	}{
		{Impact{}, ""},
		{Impact{Native: 3}, ImpactNative},
		{Impact{Xt: 1, Native: 3}, ImpactXt},
		{Impact{Legacy: 1, Xt: 1}, ImpactLegacy},
	}
	for _, tt := range tests {
		if got := tt.in.Worst(); got != tt.want {
			t.Errorf("%+v.Worst() = %q, want %q", tt.in, got, tt.want)
		}
	}
	if !(ImpactRank(ImpactLegacy) < ImpactRank(ImpactXt) && ImpactRank(ImpactXt) < ImpactRank(ImpactNative) && ImpactRank(ImpactNative) < ImpactRank("")) {
		t.Error("ImpactRank does not order legacy, xt, native, none")
	}
	if !Breaks(ImpactLegacy) || !Breaks(ImpactXt) || Breaks(ImpactNative) || Breaks("") {
		t.Error("Breaks is wrong")
	}
}

// Vendors at their bounds fit beside ordinary fields: a record drops its
// examples before it drops a vendor's hint, and every vendor field is cut.
func TestEncodeKeepsVendors(t *testing.T) {
	long := strings.Repeat("h", 5000)
	rec := Record{Pod: Pod{Namespace: "shop", Name: "cart-7d9f"}, Fingerprint: "f", Worst: ImpactXt, Impact: Impact{Xt: 2, Native: 7}}
	for i := 0; i < MaxVendors+3; i++ {
		rec.Vendors = append(rec.Vendors, Vendor{Name: long, Hint: long, Doc: long})
	}
	for i := 0; i < MaxExamples; i++ {
		rec.Examples = append(rec.Examples, Example{Family: "ip", Table: "nat", Chain: "C", Rule: long})
	}
	back, line := roundTrip(t, rec)
	if len(back.Vendors) != MaxVendors {
		t.Fatalf("%d vendors kept, want %d: %s", len(back.Vendors), MaxVendors, line)
	}
	for _, v := range back.Vendors {
		if len(v.Name) > maxVendorName || len(v.Hint) > maxHint || len(v.Doc) > maxField {
			t.Errorf("vendor fields not cut: %d %d %d", len(v.Name), len(v.Hint), len(v.Doc))
		}
	}
	if back.Worst != ImpactXt || back.Impact != rec.Impact || len(back.Examples) == 0 {
		t.Errorf("impact or examples lost: %q %+v, %d examples", back.Worst, back.Impact, len(back.Examples))
	}
}

func TestVendorLabels(t *testing.T) {
	got := VendorLabels([]Vendor{{Name: "linkerd"}, {Name: "istio"}, {Name: "my-mesh\n"}, {Name: "istio"}, {Name: "acme"}})
	if strings.Join(got, ",") != "istio,linkerd,other" {
		t.Errorf("VendorLabels = %q", got)
	}
	if got := VendorLabels(nil); len(got) != 1 || got[0] != VendorUnknown {
		t.Errorf("VendorLabels(nil) = %q", got)
	}
}

// An unclassified record still has its legacy level: x_tables rules are
// legacy whatever classified them.
func TestLevelsUnclassified(t *testing.T) {
	r := Record{Legacy: Legacy{Rules: 2}, Nft: Nft{Rules: 5}}
	if got := r.Levels(); got != (Impact{Legacy: 2}) || r.WorstLevel() != ImpactLegacy {
		t.Errorf("Levels %+v, worst %q", got, r.WorstLevel())
	}
	r.Impact, r.Worst = Impact{Legacy: 2, Xt: 1, Native: 4}, ImpactLegacy
	if got := r.Levels(); got != r.Impact {
		t.Errorf("classified Levels %+v", got)
	}
	if (Record{Nft: Nft{Rules: 5}}).WorstLevel() != "" {
		t.Error("unclassified nft usage has a level")
	}
}

func TestBreakingFirst(t *testing.T) {
	in := []Example{{Rule: "n1", Impact: ImpactNative}, {Rule: "u"}, {Rule: "x1", Impact: ImpactXt}, {Rule: "n2", Impact: ImpactNative}, {Rule: "x2", Impact: ImpactXt}}
	var got []string
	for _, ex := range BreakingFirst(in) {
		got = append(got, ex.Rule)
	}
	if strings.Join(got, ",") != "x1,x2,n1,n2,u" || in[0].Rule != "n1" {
		t.Errorf("order %v (the input must stay as it was: %v)", got, in)
	}
}
