package modules

import (
	"strings"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
)

// TestReleases: the built-in table loads, every verified entry cites a
// counted source, and the default target is the newest release with
// verified data.
func TestReleases(t *testing.T) {
	if got := Releases.Default(); got != "10.2" {
		t.Errorf("default target %q, want 10.2", got)
	}
	for _, e := range Releases.Entries {
		s := Releases.Sources[e.Source]
		if e.Package != PackageUnverified && !s.Counted() {
			t.Errorf("%s %v: %s from %s source %s", e.Module, e.Releases, e.Package, s.Kind, e.Source)
		}
		if !strings.HasPrefix(s.URL, "https://") {
			t.Errorf("%s: source %q has no link", e.Module, e.Source)
		}
	}
	if e := Releases.Lookup("10.2", "nft_compat"); e.Package != PackageExtra {
		t.Errorf("nft_compat on 10.2: %+v", e)
	}
	if e := Releases.Lookup("10.0", "xt_owner"); e.Package != PackageUnverified || e.Source != "" {
		t.Errorf("xt_owner on 10.0 (no entry): %+v", e)
	}
	for in, want := range map[string]string{"": "10.2", "rhel-10.0": "10.0", "rhel-10.1": "10.1", "10.2": "10.2"} {
		if got, err := Releases.Target(in); err != nil || got != want {
			t.Errorf("Target(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := Releases.Target("rhel-9.6"); err == nil || !strings.Contains(err.Error(), "rhel-10.0, rhel-10.1, rhel-10.2") {
		t.Errorf("Target(rhel-9.6) error %v, want the list of targets", err)
	}
}

// TestLoadRefuses: a field report cannot verify a package, and every
// entry needs a cited source and a known release.
func TestLoadRefuses(t *testing.T) {
	for name, js := range map[string]string{
		"field verifies": `{"releases":["10.0"],"sources":{"f":{"url":"https://x","kind":"field","says":"s"}},"entries":[{"module":"m","releases":["10.0"],"package":"kernel-modules-extra","source":"f"}]}`,
		"no source":      `{"releases":["10.0"],"sources":{},"entries":[{"module":"m","releases":["10.0"],"package":"unverified","source":"f"}]}`,
		"bad release":    `{"releases":["10.0"],"sources":{"f":{"url":"https://x","kind":"red-hat","says":"s"}},"entries":[{"module":"m","releases":["9.6"],"package":"absent","source":"f"}]}`,
		"bad package":    `{"releases":["10.0"],"sources":{"f":{"url":"https://x","kind":"red-hat","says":"s"}},"entries":[{"module":"m","releases":["10.0"],"package":"kernel-extra","source":"f"}]}`,
		"twice":          `{"releases":["10.0"],"sources":{"f":{"url":"https://x","kind":"red-hat","says":"s"}},"entries":[{"module":"m","releases":["10.0"],"package":"absent","source":"f"},{"module":"m","releases":["10.0"],"package":"absent","source":"f"}]}`,
	} {
		if _, err := Load([]byte(js)); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
}

// TestExtension: module names follow the kernel's MODULE_ALIAS lines, and
// in a bridge table only ebtables' own extensions are ebt_ ones: nft_compat
// finds any other in the xt extensions of no family.
func TestExtension(t *testing.T) {
	for _, tc := range []struct {
		fam              inspect.Family
		kind, name, want string
	}{
		{inspect.IP, "match", "owner", "xt_owner"}, {inspect.IP, "target", "REDIRECT", "xt_REDIRECT"},
		{inspect.IP, "target", "MASQUERADE", "xt_MASQUERADE"}, {inspect.IP, "target", "MARK", "xt_mark"},
		{inspect.IP, "match", "mark", "xt_mark"}, {inspect.IP, "match", "state", "xt_state"},
		{inspect.IP, "target", "DNAT", "xt_nat"}, {inspect.IP, "match", "tcp", "xt_tcpudp"}, {inspect.IP, "match", "icmp", "xt_tcpudp"},
		{inspect.IP, "target", "REJECT", "ipt_REJECT"}, {inspect.IP6, "target", "REJECT", "ip6t_REJECT"}, {inspect.IP, "target", "CT", "xt_CT"},
		{inspect.IP, "target", "NOTRACK", "xt_CT"}, {inspect.ARP, "target", "mangle", "arpt_mangle"},
		{inspect.IP6, "target", "SNPT", "ip6t_NPT"}, {inspect.IP6, "target", "DNPT", "ip6t_NPT"},
		{inspect.Bridge, "match", "among", "ebt_among"}, {inspect.Bridge, "match", "mark_m", "ebt_mark_m"},
		{inspect.Bridge, "match", "limit", "ebt_limit"}, {inspect.Bridge, "target", "nflog", "ebt_nflog"},
		{inspect.Bridge, "target", "mark", "ebt_mark"}, {inspect.Bridge, "match", "mark", "xt_mark"},
		{inspect.Bridge, "match", "comment", "xt_comment"}, {inspect.Bridge, "target", "AUDIT", "xt_AUDIT"},
		{inspect.Bridge, "match", "set", "xt_set"},
	} {
		if got := Extension(tc.fam, tc.kind, tc.name); got[0] != tc.want {
			t.Errorf("Extension(%s, %s, %s) = %v, want %s", tc.fam, tc.kind, tc.name, got, tc.want)
		}
	}
}
