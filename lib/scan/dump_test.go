package scan

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/allowlist"
	"github.com/iptables-alerter/iptables-alerter/lib/catalog"
	"github.com/iptables-alerter/iptables-alerter/lib/classify"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
)

// TestDump: the render command's listing of a netns written by the real
// clients, with each option's marks; golden files in testdata/.
func TestDump(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "iptables-legacy")
	ns := nstest.New(t)
	for _, r := range [][]string{
		{"iptables-nft", "-A", "OUTPUT", "-p", "tcp", "--dport", "22623", "--syn", "-j", "REJECT"},
		{"iptables-nft", "-A", "OUTPUT", "-m", "owner", "--uid-owner", "4242", "-j", "RETURN"},
		{"iptables-nft", "-A", "INPUT", "-s", "10.0.0.0/8", "-j", "ACCEPT"},
		{"iptables-nft", "-N", "MESHTEST_EMPTY"},
		{"iptables-nft", "-P", "FORWARD", "DROP"},
		{"iptables-legacy", "-N", "OLD"},
		{"iptables-legacy", "-A", "OLD", "-j", "RETURN"},
	} {
		ns.Run(r...)
	}
	res := readNS(t, ns)
	allow, err := allowlist.New([]allowlist.Entry{
		{Name: "block-mcs", Reason: "test", Rule: "-A OUTPUT -p tcp --dport 22623 --syn -j REJECT"},
		{Name: "ten-only-in-infra", Reason: "test", Rule: "-A INPUT -s 10.0.0.0/8 -j ACCEPT", Namespaces: []string{"infra"}},
	}, "test")
	if err != nil {
		t.Fatal(err)
	}
	vendorsFile := filepath.Join(t.TempDir(), "vendors.json")
	if err := os.WriteFile(vendorsFile, []byte(`{"vendors": [{"name": "meshtest", "hint": "use nft", "doc": "https://example.com/meshtest", "chains": ["MESHTEST_*"]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	vendors, err := catalog.Load(vendorsFile)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		opts DumpOptions
	}{
		{name: "plain", opts: DumpOptions{}},
		{name: "impact", opts: DumpOptions{Impact: true}},
		{name: "allowlist", opts: DumpOptions{Allow: allow, Namespace: "app"}},
		{name: "allowlist-namespace", opts: DumpOptions{Allow: allow, Namespace: "infra", Impact: true}},
		{name: "vendors", opts: DumpOptions{Vendors: vendors}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := Dump(&b, res, tt.opts); err != nil {
				t.Fatal(err)
			}
			golden(t, "dump-"+tt.name+".golden", b.String())
		})
	}
}

// TestDumpComments: what the rule lines leave unsaid comes as comments,
// attacker-chosen names made printable and bounded.
func TestDumpComments(t *testing.T) {
	long := "LONG_" + strings.Repeat("x", 100)
	res := Result{Usage: classify.Usage{
		Chains: []classify.Chain{
			{Family: inspect.IP, Table: "filter", Name: "EVIL\nNAME", User: true},
			{Family: inspect.IP, Table: "filter", Name: "FORWARD", Drop: true},
			{Family: inspect.IP6, Table: "nat", Name: long, User: true},
			{Family: inspect.IP6, Table: "nat", Name: "OUTPUT", Rules: 3},
		},
		Legacy: []classify.Legacy{
			{Family: inspect.IP, Table: "mangle", Rules: 4, Chains: []string{"A", "B\tC"}},
			{Family: inspect.IP6, Table: "filter", Rules: 1},
		},
	}}
	var b bytes.Buffer
	if err := Dump(&b, res, DumpOptions{Impact: true}); err != nil {
		t.Fatal(err)
	}
	want := `# ip filter: empty user chain "EVIL\nNAME"
# ip filter: chain FORWARD has policy DROP
# ip6 nat: empty user chain "LONG_` + strings.Repeat("x", 59) + `"...+41
# 3 more rules counted but not rendered (bound of 0)
# legacy ip mangle: 4 entries beyond the untouched table, user chains A "B\tC"
# legacy ip6 filter: 1 entries beyond the untouched table
# impact: legacy=5 xt=0 native=3 worst=legacy
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("Dump (-want +got):\n%s", diff)
	}
}

// TestDumpWriteError: a listing cut short by its writer says so.
func TestDumpWriteError(t *testing.T) {
	res := Result{Usage: classify.Usage{Chains: []classify.Chain{{Family: inspect.IP, Table: "filter", Name: "FORWARD", Drop: true}}}}
	if err := Dump(failingWriter{}, res, DumpOptions{}); !errors.Is(err, errFull) {
		t.Errorf("Dump to a full writer: %v, want %v", err, errFull)
	}
}

var errFull = errors.New("device full")

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errFull }
