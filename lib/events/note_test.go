package events

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
)

func sampleRecord() findings.Record {
	return findings.Record{
		Schema:      findings.Schema,
		Node:        "node-a",
		ContainerID: "c0ffee",
		SandboxID:   "5a4db0c5",
		Pod:         findings.Pod{Namespace: "shop", Name: "cart-7d9f", UID: "0b6f8e2c-2a3b-4a51-9d7e-111111111111"},
		Container:   "istio-init",
		Image:       "docker.io/istio/proxyv2:1.20.0",
		Nft:         findings.Nft{Tables: []string{"ip nat"}, Chains: 4, Rules: 12},
		Fingerprint: "f1f2f3",
		Examples: []findings.Example{
			{Family: "ip", Table: "nat", Chain: "PREROUTING", Rule: "-A PREROUTING -p tcp -j ISTIO_INBOUND"},
			{Family: "ip", Table: "nat", Chain: "OUTPUT", Rule: "-A OUTPUT -p tcp -j ISTIO_OUTPUT"},
		},
	}
}

func TestNoteGolden(t *testing.T) {
	legacy := sampleRecord()
	legacy.Nft = findings.Nft{}
	legacy.Legacy = findings.Legacy{Tables: []string{"ip filter"}, Rules: 3}
	legacy.Examples = nil
	legacy.Truncated = true
	legacy.Allowlisted = 2

	hostile := sampleRecord()
	hostile.Container = "app\x1b[31m"
	hostile.Examples = []findings.Example{{Family: "ip", Table: "filter", Rule: "-A INPUT -m comment --comment \"a\nFAKE LINE\u202egnp.exe\xff\" -j DROP"}}

	istio := sampleRecord()
	istio.Impact, istio.Worst = findings.Impact{Xt: 3, Native: 9}, findings.ImpactXt
	istio.Examples[0].Impact, istio.Examples[1].Impact = findings.ImpactNative, findings.ImpactXt
	istio.Vendors = []findings.Vendor{
		{Name: "istio", Hint: "Istio 1.28+: set values.global.nativeNftables=true", Doc: "https://istio.io/latest/docs/setup/additional-setup/nftables/"},
		{Name: "linkerd", Hint: strings.Repeat("long hint ", 60), Doc: "https://linkerd.io/"},
	}

	cases := []struct {
		name  string
		rec   findings.Record
		owner owner.Owner
	}{
		{name: "nft", rec: sampleRecord()},
		{name: "xt-vendors-owner", rec: istio, owner: owner.Owner{Kind: "Deployment", Name: "cart"}},
		{name: "legacy-truncated", rec: legacy},
		{name: "hostile", rec: hostile},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Note(tc.rec, tc.owner)
			golden := filepath.Join("testdata", "note-"+tc.name+".txt")
			if os.Getenv("UPDATE_GOLDEN") == "1" {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("read golden (UPDATE_GOLDEN=1 writes it): %v", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("note (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNoteLimit(t *testing.T) {
	many := sampleRecord()
	many.Examples = nil
	for range 200 {
		many.Examples = append(many.Examples, findings.Example{Family: "ip", Table: "filter", Rule: "-A INPUT -s 10.0.0.0/8 -p tcp -m tcp --dport 8080 -j ACCEPT"})
	}
	huge := sampleRecord()
	huge.Examples = []findings.Example{{Family: "ip", Table: "filter", Rule: "-A INPUT " + strings.Repeat("é", 2000)}}
	huge.Container = strings.Repeat("ü", 300)
	tables := sampleRecord()
	for range 500 {
		tables.Nft.Tables = append(tables.Nft.Tables, "ip6 mangle")
	}

	cases := []struct {
		name     string
		rec      findings.Record
		contains []string
	}{
		{name: "many examples", rec: many, contains: []string{examplesHeading, "more)"}},
		{name: "one huge multibyte rule", rec: huge, contains: []string{deprecation}},
		{name: "many tables", rec: tables, contains: []string{deprecation, safetext.Ellipsis}},
		{name: "no examples", rec: func() findings.Record { r := sampleRecord(); r.Examples = nil; return r }(), contains: []string{"iptables-nft: 12 rules"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Note(tc.rec, owner.Owner{})
			if len(got) > NoteLimit {
				t.Errorf("note is %d bytes, limit %d", len(got), NoteLimit)
			}
			if !utf8.ValidString(got) {
				t.Errorf("note is not valid UTF-8: %q", got)
			}
			if !strings.HasPrefix(got, findings.ImpactWords(tc.rec.WorstLevel())) || !strings.Contains(got, deprecation) {
				t.Errorf("note does not start with the impact or lacks the deprecation: %q", got)
			}
			for _, c := range tc.contains {
				if !strings.Contains(got, c) {
					t.Errorf("note lacks %q:\n%s", c, got)
				}
			}
		})
	}
}
