package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/findingstest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
)

// TestHookVendors: the real hook names the vendor of an Istio ruleset with
// its hint and impact, an admin's --vendors file adds its own entry (a
// broken one is logged and the built-in table still used), and render
// prints the vendors too.
func TestHookVendors(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft-restore", "iptables-nft")
	ns := nstest.New(t)
	ns.Restore(nstest.IstioNAT, "iptables-nft-restore")
	ns.Run("iptables-nft", "-N", "ACME_FILTER")
	admin := filepath.Join(t.TempDir(), "vendors.json")
	if err := os.WriteFile(admin, []byte(`{"vendors": [{"name": "acme", "title": "ACME agent", "hint": "ACME 7+: set firewall=nftables", "doc": "https://acme.example/nft", "chains": ["ACME_*"]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(t.TempDir(), "broken.json")
	if err := os.WriteFile(broken, []byte(`{"vendors": [`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, file string
		want       []string
		log        string
	}{
		{"built-in", "/nonexistent/vendors.json", []string{"istio"}, ""},
		{"admin entry", admin, []string{"istio", "acme"}, ""},
		{"broken admin file", broken, []string{"istio"}, "cannot load the vendor table"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h hookRun
			runHookProc(t, pod{netns: ns.Path(), sandbox: "sb-" + tc.name}.state(t), &h, "--vendors", tc.file)
			recs := findingstest.Read(t, h.findings)
			if len(recs) != 1 {
				t.Fatalf("want 1 finding, got %d; stderr:\n%s", len(recs), h.stderr)
			}
			var got []string
			for _, v := range recs[0].Vendors {
				got = append(got, v.Name)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("vendors %v, want %v", got, tc.want)
			}
			if !strings.Contains(recs[0].Vendors[0].Hint, "nativeNftables=true") || recs[0].Worst != "xt" {
				t.Errorf("istio vendor %+v, worst %q", recs[0].Vendors[0], recs[0].Worst)
			}
			if !strings.Contains(h.stderr, tc.log) {
				t.Errorf("stderr lacks %q:\n%s", tc.log, h.stderr)
			}
		})
	}
	code, out, errs := runCmd(t, "render", "--vendors", admin, "--netns", ns.Path())
	if code != 0 {
		t.Fatalf("render: exit %d\n%s", code, errs)
	}
	for _, want := range []string{"\n# vendor istio: Istio 1.27+", "\n# vendor acme: ACME 7+: set firewall=nftables https://acme.example/nft\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("render output lacks %q:\n%s", want, out)
		}
	}
}
