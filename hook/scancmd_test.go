package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// scanOut runs the scan command in-process.
func scanOut(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return runCmd(t, append([]string{"scan"}, args...)...)
}

// TestScanCommand: the one-shot scan prints the finding the hook would
// record and exits 1 on usage, 0 on a clean netns, 2 on a bad flag or a
// path that is no namespace; --all walks a netns directory.
func TestScanCommand(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft")
	used, clean := nstest.New(t), nstest.New(t)
	used.Run("iptables-nft", "-A", "OUTPUT", "-p", "tcp", "--dport", "25", "-j", "DROP")

	code, out, errs := scanOut(t, "--netns", used.Path(), "--format", "json", "--allowlist", "")
	if code != 1 {
		t.Fatalf("scan of a netns with a rule: exit %d, stderr %s", code, errs)
	}
	rec, err := findings.Parse([]byte(strings.TrimSpace(out)))
	if err != nil || rec.Nft.Rules != 1 || rec.Source != "scan" || rec.Netns != used.Path() {
		t.Fatalf("json output %q: %+v, %v", out, rec, err)
	}
	if code, out, _ := scanOut(t, "--netns", clean.Path(), "--allowlist", ""); code != 0 || !strings.Contains(out, "no iptables usage") {
		t.Errorf("clean netns: exit %d, %q", code, out)
	}
	if code, out, _ := scanOut(t, "--netns", used.Path(), "--allowlist", ""); code != 1 || !strings.Contains(out, "-A OUTPUT -p tcp --dport 25 -j DROP") {
		t.Errorf("text output: exit %d, %q", code, out)
	}
	if code, _, _ := scanOut(t, "--netns", "/etc/hostname"); code != 2 {
		t.Errorf("not a netns: exit %d, want 2", code)
	}
	if code, _, _ := scanOut(t, "--netns", used.Path(), "--all"); code != 2 {
		t.Errorf("--netns with --all: exit %d, want 2", code)
	}
	dir := t.TempDir()
	for name, target := range map[string]string{"a": used.Path(), "b": clean.Path()} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	code, out, _ = scanOut(t, "--all", "--netns-dir", dir, "--allowlist", "")
	if code != 1 || !strings.Contains(out, filepath.Join(dir, "a")+": iptables usage: 1 nft rules") || !strings.Contains(out, filepath.Join(dir, "b")+": no iptables usage") {
		t.Errorf("--all: exit %d, %q", code, out)
	}
}

// TestScanTextStates: the text output of scan says what a person must act
// on first. A namespace whose look could not finish (here its deadline
// passed before anything was read) is usage unknown, with the reason,
// never "0 nft rules"; the example rules come breaking first (an xt match
// before a native rule written earlier).
func TestScanTextStates(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft")
	mixed := nstest.New(t)
	mixed.Run("iptables-nft", "-A", "OUTPUT", "-p", "tcp", "--dport", "25", "-j", "DROP")
	mixed.Run("iptables-nft", "-A", "OUTPUT", "-m", "owner", "--uid-owner", "1337", "-j", "ACCEPT")
	code, out, errs := scanOut(t, "--netns", mixed.Path(), "--allowlist", "")
	xt, native := strings.Index(out, "--uid-owner 1337"), strings.Index(out, "--dport 25")
	if code != 1 || xt < 0 || native < 0 || xt > native || !strings.Contains(out, "impact: xt") {
		t.Errorf("scan text: exit %d, want the xt rule before the native one:\n%s%s", code, out, errs)
	}

	code, out, errs = scanOut(t, "--netns", mixed.Path(), "--allowlist", "", "--timeout", "1ns")
	if code != 1 || !strings.Contains(out, ": iptables usage unknown: ") || !strings.Contains(out, "deadline") || strings.Contains(out, "0 nft rules") {
		t.Errorf("scan text of a netns not read: exit %d, want usage unknown with the reason:\n%s%s", code, out, errs)
	}
}
